"""Benchmark keyed training seeding: its cost per step against a small model's step time.

Run from the repository root::

    .venv/bin/python benchmarks/bench_seeding.py              # about a minute
    .venv/bin/python benchmarks/bench_seeding.py --quick      # CI smoke (under 30 s)

``ResumableDataCallback`` calls :func:`lightning_resumable_data.seeding.seed_training_step`
once per training batch: it derives the key's seeds (one BLAKE2b digest) and reseeds
torch's CPU generator (and CUDA's when available: not on this machine), and with
``seed_training=("torch", "numpy", "random")`` NumPy's global ``RandomState`` and ``random``
too. Three measurements, each in a fresh subprocess pinned to one CPU with one torch
thread, best of ``--repeat`` (default 5):

* ``seed``: ``seed_training_step(0, seed=0, step=s)`` for ``--calls`` consecutive steps,
  CPU time per call, with the default generators (torch's) and with all three
  (``torch.manual_seed`` beside it, for the record: it formats a stack trace for every
  lazily seeded backend, which is why the module seeds generators itself);
* ``torch step``: a small model in a plain loop: an MLP 784 -> 256 -> 256 -> 10 with ReLU
  and ``Dropout(0.1)``, batch 64, cross-entropy, ``AdamW``, forward + backward + step;
  blocks of 25 steps without and with ``seed_training_step`` before each step alternate
  in one process, and the best block of each is kept (the end-to-end difference);
* ``lightning step``: the same model trained by a ``Trainer`` (CPU, no logger, no progress
  bar, no checkpoints) on a ``ResumableDataModule`` over in-memory tensors, time per
  training batch from the first batch's start to the last batch's end, with
  ``seed_training`` on and off.

All times are CPU time of the measuring process (``time.process_time``): on a shared
machine, wall time counts the time other processes run. The ratio is seeding time per call
over the step time without seeding (target: < 1% of the Lightning step). The end-to-end
differences are printed too: the interleaved torch blocks are the cleaner one; the Lightning
on/off runs are separate processes, so their difference includes run-to-run noise. Results
go to ``--json`` (default ``benchmarks/results/seeding.json``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from _harness import (
    REPO_ROOT,
    Json,
    argument_parser,
    best_time,
    load_average,
    mark,
    one_torch_thread,
    package_version,
    pin_to_one_cpu,
    print_block,
    progress,
    python_version,
    repeat_runs,
    spawn_json,
    table_header,
    table_row,
)

RESULTS = "benchmarks/results/seeding.json"
TARGET = 0.01  # seeding may cost at most 1% of a small model's Lightning step
BATCH, FEATURES, HIDDEN, CLASSES = 64, 784, 256, 10
BLOCK = 25  # steps per timed block of the plain torch loop


def _model() -> Any:
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, CLASSES),
    )


def child_seed(calls: int) -> Json:
    import torch

    from lightning_resumable_data.seeding import seed_training_step

    for step in range(100):  # warm-up
        seed_training_step(0, seed=0, step=step)
    started = time.process_time()
    for step in range(calls):
        seed_training_step(0, seed=0, step=step)
    ours = (time.process_time() - started) / calls
    every = ("torch", "numpy", "random")
    started = time.process_time()
    for step in range(calls):
        seed_training_step(0, seed=0, step=step, generators=every)
    all_three = (time.process_time() - started) / calls
    started = time.process_time()
    for step in range(calls // 10):
        torch.manual_seed(step)
    manual = (time.process_time() - started) / (calls // 10)
    return {"seconds": ours, "all_generators_seconds": all_three, "manual_seed_seconds": manual}


def child_torch_step(steps: int) -> Json:
    import torch

    from lightning_resumable_data.seeding import seed_training_step

    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, FEATURES), torch.randint(CLASSES, (BATCH,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        optimizer.step()

    for _ in range(20):
        step()
    # Blocks of BLOCK steps without and with seeding, alternating; the best block of each.
    best = {False: float("inf"), True: float("inf")}
    for block in range(max(1, steps // BLOCK)):
        for seeding in (False, True):
            started = time.process_time()
            for s in range(BLOCK):
                if seeding:
                    seed_training_step(0, seed=0, step=block * BLOCK + s)
                step()
            best[seeding] = min(best[seeding], (time.process_time() - started) / BLOCK)
    return {"seconds": best[False], "seconds_on": best[True]}


def child_lightning_step(steps: int, seeding: bool) -> Json:
    import lightning.pytorch as pl
    import torch

    from lightning_resumable_data import ResumableDataCallback, ResumableDataModule

    class Small(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _model()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Clock(pl.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_start(self, *args: Any) -> None:
            if not self.times:
                self.times.append(time.process_time())

        def on_train_batch_end(self, *args: Any) -> None:
            self.times.append(time.process_time())

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(BATCH * steps, FEATURES), torch.randint(CLASSES, (BATCH * steps,))
    )
    clock = Clock()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        callbacks=[clock, ResumableDataCallback(log_every_n_steps=0, seed_training=seeding)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir="/tmp/bench_seeding",
    )
    datamodule = ResumableDataModule(data, batch_size=BATCH, seed=0)
    trainer.fit(Small(), datamodule=datamodule)
    warm = 20  # the first batches build caches
    elapsed = clock.times[-1] - clock.times[warm]
    return {"seconds": elapsed / (len(clock.times) - 1 - warm)}


def run_child(argv: Sequence[str]) -> Json:
    mode, count = argv[1], int(argv[2])
    pin_to_one_cpu()
    one_torch_thread()
    if mode == "seed":
        return child_seed(count)
    if mode == "torch":
        return child_torch_step(count)
    return child_lightning_step(count, seeding=mode == "lightning-on")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        print(json.dumps(run_child(argv)))
        return 0
    parser = argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls and steps")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.calls, args.steps = 2, 5000, 100
    print(
        f"# Keyed training seeding vs a small model's step (MLP {FEATURES}-{HIDDEN}-{HIDDEN}-"
        f"{CLASSES}, dropout, batch {BATCH}, AdamW); one thread, one CPU, fresh process per "
        f"run, best of {args.repeat}; python {python_version()}, torch "
        f"{package_version('torch')}, lightning {package_version('lightning')}; "
        f"{load_average()}",
        flush=True,
    )
    modes = {
        "seed": args.calls,
        "torch": args.steps,
        "lightning-off": args.steps,
        "lightning-on": args.steps,
    }
    results: dict[str, list[Json]] = {}
    for mode, count in modes.items():
        runs, error = repeat_runs(
            partial(spawn_json, __file__, ["--child", mode, str(count)]), args.repeat
        )
        if error:
            print(f"\nFAILED: {mode}: {error}")
            return 1
        results[mode] = runs
        progress(f"  {mode:<14} {best_time(runs) * 1e6:9.1f} us")
    seed = best_time(results["seed"])
    manual = best_time(results["seed"], "manual_seed_seconds")
    every = best_time(results["seed"], "all_generators_seconds")
    torch_step = best_time(results["torch"])
    torch_on = best_time(results["torch"], "seconds_on")
    off, on = best_time(results["lightning-off"]), best_time(results["lightning-on"])
    rows = {
        "seed_us": seed * 1e6,
        "all_generators_seed_us": every * 1e6,
        "torch_manual_seed_us": manual * 1e6,
        "torch_step_us": torch_step * 1e6,
        "lightning_step_off_us": off * 1e6,
        "lightning_step_on_us": on * 1e6,
        "ratio_lightning": seed / off,
        "ratio_torch": seed / torch_step,
        "torch_step_on_us": torch_on * 1e6,
        "torch_on_off_difference": torch_on / torch_step - 1,
        "on_off_difference": on / off - 1,
    }
    table = [
        *table_header("measurement", "time per call/step", "seeding / step"),
        table_row(["seed_training_step (default: torch)", f"{seed * 1e6:.1f} us", ""]),
        table_row(["... torch, NumPy and random", f"{every * 1e6:.1f} us", ""]),
        table_row(["torch.manual_seed (not used)", f"{manual * 1e6:.1f} us", ""]),
        table_row(["plain torch step", f"{torch_step * 1e6:.0f} us", f"{seed / torch_step:.2%}"]),
        table_row(
            [
                "plain torch step, seeding each step",
                f"{torch_on * 1e6:.0f} us",
                f"(on/off {torch_on / torch_step - 1:+.2%})",
            ]
        ),
        table_row(["Lightning step, seeding off", f"{off * 1e6:.0f} us", f"{seed / off:.2%}"]),
        table_row(
            ["Lightning step, seeding on", f"{on * 1e6:.0f} us", f"(on/off {on / off - 1:+.2%})"]
        ),
    ]
    verdict = (
        f"{mark(seed / off < TARGET)}: seeding costs {seed / off:.2%} of a small model's "
        f"Lightning step (target < {TARGET:.0%})"
    )
    print_block(table)
    print_block([verdict])
    path = REPO_ROOT / args.json
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": "benchmarks/bench_seeding.py" + (" --quick" if args.quick else ""),
        "python": python_version(),
        "torch": package_version("torch"),
        "lightning": package_version("lightning"),
        "load_average": load_average(),
        "conditions": f"one thread pinned to one CPU, fresh process per run, best of "
        f"{args.repeat}; {args.calls} seeding calls, {args.steps} steps",
        "results": rows,
        "runs": results,
        "verdict": verdict,
    }
    Path(path).write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
