"""Benchmark the package's cost inside a real ``Trainer`` loop at a short (~1 ms) step.

Run from the repository root::

    .venv/bin/python benchmarks/bench_lightning_overhead.py            # a few minutes
    .venv/bin/python benchmarks/bench_lightning_overhead.py --quick    # CI smoke (~30 s)

One ``Trainer.fit`` epoch per run, in a fresh process pinned to one CPU with one torch
thread. The ``training_step`` busy-waits ``--step-ms`` (default 1 ms) of CPU time and
returns a tiny loss, so the step is short and fixed and what differs is the data path and
the callbacks. Four set-ups over the same in-memory ``TensorDataset`` and batch size:

* ``plain``: a ``LightningDataModule`` returning ``torch.utils.data.DataLoader(shuffle=True)``;
* ``default``: ``ResumableDataModule(dataset, batch_size=..., seed=...)`` exactly as the
  docs show it, no callback passed (the DataModule installs ``ResumableDataCallback()``);
* ``all-generators``: the same with ``ResumableDataCallback(seed_training=("torch",
  "numpy", "random"))``;
* ``seeding-off``: the same with ``ResumableDataCallback(seed_training=False)``.

Two numbers per set-up, both CPU time per training batch (``time.process_time``), best of
``--repeat`` runs with the set-ups interleaved:

* **step**: from the start of batch ``WARM`` to the end of the last; the ratio
  ``plain / set-up`` is the throughput relative to a plain ``DataLoader`` (target >= 0.98);
* **hooks**: the time spent inside ``ResumableDataCallback``'s per-batch hooks
  (``on_train_batch_start`` and ``on_train_batch_end``), measured in situ by wrapping
  them; a difference of totals moves by more than this from run to run on a shared machine.

Results go to ``--json`` (default ``benchmarks/results/lightning_overhead.json``).
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

RESULTS = "benchmarks/results/lightning_overhead.json"
SETUPS = ("plain", "default", "all-generators", "seeding-off")
TARGET = 0.98  # throughput relative to a plain DataLoader at a 1 ms step
BATCH, WARM = 64, 50


def child(setup: str, steps: int, step_ms: float) -> Json:
    """One ``fit`` epoch of ``steps`` batches under ``setup``; CPU time per batch."""
    import lightning.pytorch as pl
    import torch

    from lightning_resumable_data import ResumableDataCallback, ResumableDataModule

    spent = {"hooks": 0.0}
    for name in ("on_train_batch_start", "on_train_batch_end"):
        hook = getattr(ResumableDataCallback, name)

        def timed(*args: Any, _hook: Any = hook, **kwargs: Any) -> None:
            started = time.process_time()
            _hook(*args, **kwargs)
            spent["hooks"] += time.process_time() - started

        setattr(ResumableDataCallback, name, timed)

    class Spin(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            end = time.process_time() + step_ms / 1000
            while time.process_time() < end:
                pass
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x).squeeze(-1), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Clock(pl.Callback):
        def __init__(self) -> None:
            self.start, self.end, self.hooks = 0.0, 0.0, 0.0

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, i: int) -> None:
            if i == WARM:
                self.start, self.hooks = time.process_time(), spent["hooks"]

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            self.end = time.process_time()

    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(
        torch.randn(BATCH * steps, 8), torch.randn(BATCH * steps)
    )
    clock = Clock()
    callbacks: list[pl.Callback] = [clock]
    if setup == "plain":

        class Plain(pl.LightningDataModule):
            def train_dataloader(self) -> Any:
                return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)

        datamodule: pl.LightningDataModule = Plain()
    else:
        datamodule = ResumableDataModule(dataset, batch_size=BATCH, seed=0)
        if setup != "default":
            generators = ("torch", "numpy", "random") if setup == "all-generators" else False
            callbacks.append(ResumableDataCallback(seed_training=generators))
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir="/tmp/bench_lightning_overhead",
    )
    trainer.fit(Spin(), datamodule=datamodule)
    batches = steps - WARM
    return {
        "seconds": (clock.end - clock.start) / batches,
        "hook_seconds": (spent["hooks"] - clock.hooks) / batches,
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        pin_to_one_cpu()
        one_torch_thread()
        print(json.dumps(child(argv[1], int(argv[2]), float(argv[3]))))
        return 0
    parser = argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--step-ms", type=float, default=1.0)
    parser.add_argument("--json", default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.steps = 1, 300
    print(
        f"# Lightning at a {args.step_ms:g} ms step: CPU time per training batch, batch "
        f"{BATCH}, {args.steps} batches, one thread on one CPU, fresh process per run, set-ups "
        f"interleaved, best of {args.repeat}; python {python_version()}, torch "
        f"{package_version('torch')}, lightning {package_version('lightning')}; "
        f"{load_average()}",
        flush=True,
    )
    results: dict[str, list[Json]] = {setup: [] for setup in SETUPS}
    for _ in range(args.repeat):
        for setup in SETUPS:
            command = ["--child", setup, str(args.steps), str(args.step_ms)]
            runs, error = repeat_runs(partial(spawn_json, __file__, command), 1)
            if error:
                print(f"\nFAILED: {setup}: {error}")
                return 1
            results[setup] += runs
            progress(f"  {setup:<15} {runs[0]['seconds'] * 1e6:8.1f} us/batch")
    plain = best_time(results["plain"])
    rows: dict[str, Json] = {}
    table = table_header("set-up", "CPU time / batch", "plain / set-up", "callback hooks / batch")
    for setup in SETUPS:
        step = best_time(results[setup])
        hooks = best_time(results[setup], "hook_seconds")
        seconds = [run["seconds"] for run in results[setup]]
        rows[setup] = {
            "step_us": step * 1e6,
            "ratio": plain / step,
            "hooks_us": hooks * 1e6,
            "runs_us": [min(seconds) * 1e6, max(seconds) * 1e6],  # the spread between runs
        }
        shown_hooks = "" if setup == "plain" else f"{hooks * 1e6:.1f} us ({hooks / plain:.1%})"
        table.append(table_row([setup, f"{step * 1e6:.0f} us", f"{plain / step:.3f}", shown_hooks]))
    default = rows["default"]
    verdict = (
        f"{mark(default['ratio'] >= TARGET)}: the documented default runs at "
        f"{default['ratio']:.3f}x a plain DataLoader's throughput at a {args.step_ms:g} ms step "
        f"(target >= {TARGET}); its callback hooks cost {default['hooks_us']:.1f} us a batch"
    )
    low, high = rows["plain"]["runs_us"]
    share = default["hooks_us"] / rows["plain"]["step_us"]
    verdict += (
        f". Measured in situ, the hooks are {share:.1%} of the plain step "
        f"({mark(share <= 1 - TARGET)} against 2%); the plain runs alone spread "
        f"{high / low - 1:.0%} between processes, more than the difference of the totals"
    )
    print_block(table)
    print_block([verdict])
    if args.quick:
        return 0
    record = {
        "command": "benchmarks/bench_lightning_overhead.py",
        "python": python_version(),
        "torch": package_version("torch"),
        "lightning": package_version("lightning"),
        "load_average": load_average(),
        "conditions": f"{args.step_ms:g} ms busy-wait step, batch {BATCH}, {args.steps} "
        f"batches (first {WARM} not timed), one thread pinned to one CPU, fresh process per "
        f"run, set-ups interleaved, best of {args.repeat}",
        "results": rows,
        "runs": results,
        "verdict": verdict,
    }
    path = REPO_ROOT / args.json
    path.parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
