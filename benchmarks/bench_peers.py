"""Every loader path of ours against its peers: resume latency, read throughput, Lightning.

All cases read the same data: 1024-token ``uint16`` sequences, batch 32, shuffled, rank 0
of 1. Each measurement runs in its own process (``_harness.spawn_json``); the peers run in
the same invocation, interleaved, so that a busy machine slows every path alike.

* ``resume``: a fresh loader + ``load_state_dict`` + the first batch, at k batches into the
  epoch (k = 10, 1,000 on the read set; k = 100,000 on a 3.3M-sample set of sparse files,
  so that k is mid-epoch), and the first batch of a fresh start (k = 0). Median of
  ``--repeat`` runs in one process.
* ``throughput``: samples/s over ``--batches`` batches at 0 and 2 workers.
* ``lightning``: steps/s of a small model under ``Trainer``, ``ResumableDataModule`` against
  a plain ``DataLoader`` (``shuffle=True``).

Paths: ``plain`` (``DistributedSampler`` + our ``StatefulDataLoader`` over a memmapped
``.npy``), ``sharded`` (``DistributedShardedDataset`` + its ``ShardedSampler`` + our loader),
``torchdata`` (the baseline: the same ``.npy`` + torch's ``DistributedSampler`` + torchdata's
``StatefulDataLoader``) and ``litdata`` (``StreamingDataset`` + ``StreamingDataLoader``, if
installed: ``pip install litdata``, not a dependency of the package). Files are sparse
where the content does not matter (the resume set), real tokens elsewhere.

Usage::

    .venv/bin/python benchmarks/bench_peers.py            # writes benchmarks/results/peers.json
    .venv/bin/python benchmarks/tables.py                 # rewrites the docs tables
    .venv/bin/python docs/make_plots.py                   # redraws docs/img/peers.png
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import REPO_ROOT, Json, load_average, package_version, python_version, spawn_json

RESULTS = REPO_ROOT / "benchmarks" / "results" / "peers.json"
SEQ_LEN = 1024
BATCH = 32
SEED = 0
PATHS = ("plain", "sharded", "torchdata", "litdata")
RESUME_KS = (0, 10, 1_000, 100_000)
RESUME_SAMPLES = 3_300_000  # > 100,000 batches of 32: k = 100,000 is mid-epoch
SHARD_TOKENS = 1 << 24  # 16,384 samples per shard
RESUME_TARGET = 1.0  # every path of ours <= the fastest peer
THROUGHPUT_TARGET = 0.97  # >= 0.97x torchdata's baseline (and >= LitData)
LIGHTNING_TARGET = 0.98


# --------------------------------------------------------------------------------------
# Data (child side).
# --------------------------------------------------------------------------------------


def make_data(root: Path, samples: int, sparse: bool) -> None:
    """Write ``samples`` sequences as token shards (ours) and as one ``.npy`` (baseline)."""
    import numpy as np

    from lightning_resumable_data.shards.tokens import INDEX_FILE, TokenShardIndex

    root.mkdir(parents=True, exist_ok=True)
    per_shard = SHARD_TOKENS // SEQ_LEN
    sizes = [min(per_shard, samples - s) for s in range(0, samples, per_shard)]
    files = tuple(f"shard_{i:05d}.bin" for i in range(len(sizes)))
    rng = np.random.default_rng(0)
    for name, size in zip(files, sizes, strict=True):
        path = root / name
        if sparse:
            with path.open("wb") as file:
                file.truncate(size * SEQ_LEN * 2)
        else:
            rng.integers(0, 60_000, size * SEQ_LEN, dtype=np.uint16).tofile(path)
    index = TokenShardIndex(SEQ_LEN, "uint16", files, tuple(sizes))
    (root / INDEX_FILE).write_text(json.dumps(index.to_json()))
    array = np.lib.format.open_memmap(
        root / "all.npy", mode="w+", dtype=np.uint16, shape=(samples, SEQ_LEN)
    )
    if not sparse:
        offset = 0
        for name, size in zip(files, sizes, strict=True):
            array[offset : offset + size] = np.fromfile(root / name, np.uint16).reshape(size, -1)
            offset += size
    array.flush()


def make_litdata(root: Path) -> None:
    """The same token sequences in LitData's format (``litdata.optimize``)."""
    import litdata
    import numpy as np

    array = np.load(root / "all.npy", mmap_mode="r")
    litdata.optimize(
        fn=_litdata_row,
        inputs=[(str(root / "all.npy"), i) for i in range(len(array))],
        output_dir=str(root / "litdata"),
        chunk_bytes="64MB",
        num_workers=1,
        mode="overwrite",
    )


def _litdata_row(item: tuple[str, int]) -> Any:
    import numpy as np

    path, index = item
    return np.load(path, mmap_mode="r")[index].copy()


class NpyTokens:
    """The baseline dataset: a memmapped ``.npy``, one tensor per ``__getitem__``."""

    def __init__(self, path: Path) -> None:
        import numpy as np

        self.path = path
        self.array = np.load(path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: int) -> Any:
        import torch

        return torch.from_numpy(self.array[int(index)].astype("int64"))


class _Cheap:
    """A dataset of the same length that returns the index: states are made fast on it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


def build(path: str, root: Path, workers: int, cheap: bool = False) -> Any:
    """A loader of ``path`` (shuffled, batch 32, rank 0 of 1) over the data in ``root``."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    import lightning_resumable_data as lrd
    from lightning_resumable_data.shards import DistributedShardedDataset, open_token_shards

    if path == "litdata":
        import litdata

        dataset = litdata.StreamingDataset(str(root / "litdata"), shuffle=True, seed=SEED)
        return litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    if path == "sharded":
        readers = open_token_shards(root, preload=False)  # memmapped, as the baseline
        data: Any = DistributedShardedDataset(readers, seed=SEED)
        sampler: Any = data.sampler(num_replicas=1, rank=0)
        if cheap:
            data = _Cheap(len(data))
        return lrd.StatefulDataLoader(data, BATCH, sampler=sampler, num_workers=workers)
    data = NpyTokens(root / "all.npy")
    data = _Cheap(len(data)) if cheap else data
    if path == "plain":
        sampler = lrd.DistributedSampler(data, 1, 0, seed=SEED)
        return lrd.StatefulDataLoader(data, BATCH, sampler=sampler, num_workers=workers)
    sampler = torch.utils.data.DistributedSampler(data, 1, 0, seed=SEED)
    return TorchdataLoader(data, BATCH, sampler=sampler, num_workers=workers)


# --------------------------------------------------------------------------------------
# Measurements (child side).
# --------------------------------------------------------------------------------------


def child_resume(path: str, root: Path, k: int, repeat: int) -> Json:
    """Median seconds from a fresh loader to its first batch after a resume at batch k."""
    state = None
    if k:
        loader = build(path, root, 0, cheap=path != "litdata")
        iterator = iter(loader)
        for _ in range(k):
            next(iterator)
        state = loader.state_dict()
        del iterator, loader
    times = []
    for _ in range(repeat + 1):  # the first run warms imports and the page cache
        start = time.perf_counter()
        loader = build(path, root, 0)
        if state is not None:
            loader.load_state_dict(state)
        batch = next(iter(loader))
        times.append(time.perf_counter() - start)
        del loader
    shape = list(batch.shape) if hasattr(batch, "shape") else None
    return {"seconds": statistics.median(times[1:]), "runs": times[1:], "shape": shape}


def child_throughput(path: str, root: Path, workers: int, batches: int) -> Json:
    """Samples per second over ``batches`` batches (after 20 warm-up batches)."""
    loader = build(path, root, workers)
    iterator = iter(loader)
    for _ in range(20):
        next(iterator)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(iterator)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    # Without workers every thread of the loading is in this process: its CPU time is the
    # cost, and it is less disturbed by other processes on a busy machine than wall time.
    rate = batches * BATCH / (cpu if workers == 0 else seconds)
    return {"samples_per_s": rate, "seconds": seconds, "cpu_s": cpu}


def child_lightning(path: str, root: Path, steps: int) -> Json:
    """Steps/s of a small model under Trainer: ResumableDataModule or a plain DataLoader."""
    import lightning as L  # noqa: N812
    import torch

    from lightning_resumable_data import ResumableDataModule

    class Small(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(SEQ_LEN, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
            )

        def training_step(self, batch: Any, _: int) -> Any:
            return self.net(batch.float() / 60_000).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    dataset: Any = NpyTokens(root / "all.npy")
    data: Any
    if path == "resumable":
        data = ResumableDataModule(dataset, batch_size=BATCH, seed=SEED)
    else:

        class Plain(L.LightningDataModule):
            def train_dataloader(self) -> Any:
                return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)

        data = Plain()
    trainer = L.Trainer(
        max_steps=steps + 20,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_StepClock(warmup=20)],
    )
    trainer.fit(Small(), datamodule=data)
    clock: Any = next(c for c in trainer.callbacks if isinstance(c, _StepClock))  # type: ignore[attr-defined]
    # Steps per CPU second of this process: the comparison is data-path overhead, and CPU
    # time is less disturbed than wall time by other processes on a shared machine.
    return {"steps_per_s": steps / clock.cpu, "seconds": clock.seconds, "cpu_s": clock.cpu}


class _StepClock:
    """A callback that times the steps after ``warmup`` (built lazily: imports lightning)."""

    def __new__(cls, warmup: int) -> Any:
        import lightning as L  # noqa: N812

        class Clock(L.Callback):
            def __init__(self) -> None:
                self.count, self.start, self.seconds = 0, 0.0, 0.0
                self.cpu_start, self.cpu = 0.0, 0.0

            def on_train_batch_start(self, *args: Any) -> None:
                self.count += 1
                if self.count == warmup + 1:
                    self.start, self.cpu_start = time.perf_counter(), time.process_time()

            def on_train_end(self, *args: Any) -> None:
                self.seconds = time.perf_counter() - self.start
                self.cpu = time.process_time() - self.cpu_start

        global _StepClock  # so isinstance() finds the real class
        clock = Clock()
        _StepClock = Clock  # type: ignore[misc,assignment]
        return clock


# --------------------------------------------------------------------------------------
# Parent side.
# --------------------------------------------------------------------------------------


def _run(kind: str, *args: object) -> Json:
    # LitData imports torchvision at the top level, which a CPU-only torch's PyPI wheel
    # cannot load: LRD_BENCH_LITDATA_PATH may name a folder with a stub package, put on
    # PYTHONPATH for LitData's children only (Lightning's would try the stub).
    extra = os.environ.get("LRD_BENCH_LITDATA_PATH")
    if not extra or "litdata" not in map(str, args):
        return spawn_json(__file__, ["--child", kind, *map(str, args)])
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [extra, before]))
    try:
        return spawn_json(__file__, ["--child", kind, *map(str, args)])
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = before


def measure(args: argparse.Namespace, roots: dict[str, Path], paths: Sequence[str]) -> Json:
    """All measurements, peers interleaved per round; medians over rounds."""
    resume: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    throughput: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    lightning: dict[str, list[float]] = {"resumable": [], "plain": []}
    for round_index in range(args.rounds):
        order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
        for k in RESUME_KS:
            for path in order:
                root = roots["resume" if k * BATCH >= args.samples else "small"]
                if path == "litdata" and root == roots["resume"]:
                    continue
                result = _run("resume", path, root, k, args.repeat)
                _note(f"resume {path} k={k}", result)
                if "seconds" in result:
                    resume[path].setdefault(str(k), []).append(result["seconds"])
        for workers in (0, 2):
            for path in order:
                result = _run("throughput", path, roots["small"], workers, args.batches)
                _note(f"throughput {path} workers={workers}", result)
                if "samples_per_s" in result:
                    throughput[path].setdefault(str(workers), []).append(result["samples_per_s"])
        if not args.skip_lightning:
            for path in ("resumable", "plain") if round_index % 2 == 0 else ("plain", "resumable"):
                result = _run("lightning", path, roots["small"], args.steps)
                _note(f"lightning {path}", result)
                if "steps_per_s" in result:
                    lightning[path].append(result["steps_per_s"])
    med = statistics.median
    return {
        "resume_s": {p: {k: med(v) for k, v in ks.items()} for p, ks in resume.items()},
        "throughput": {p: {w: med(v) for w, v in ws.items()} for p, ws in throughput.items()},
        "lightning_steps_per_s": {p: med(v) for p, v in lightning.items() if v},
    }


def _note(label: str, result: Json) -> None:
    shown = {k: v for k, v in result.items() if k != "runs"}
    print(f"  {label}: {shown}", file=sys.stderr, flush=True)


def verdicts(results: Json) -> list[str]:
    """One line per target: met or not, with the ratio."""
    lines = []
    resume, ours = results["resume_s"], ("plain", "sharded")
    peers = [p for p in ("torchdata", "litdata") if p in resume]
    for k in map(str, RESUME_KS):
        times = {p: resume[p][k] for p in peers if k in resume[p]}
        if not times:
            continue
        fastest = min(times, key=times.__getitem__)
        for path in ours:
            if k in resume.get(path, {}):
                ratio = resume[path][k] / times[fastest]
                mark = "met" if ratio <= RESUME_TARGET else "NOT met"
                lines.append(
                    f"resume k={int(k):,}: {path} {resume[path][k] * 1e3:.1f} ms = {ratio:.2f}x "
                    f"the fastest peer ({fastest}, {times[fastest] * 1e3:.1f} ms): {mark}"
                )
    rates = results["throughput"]
    for workers in ("0", "2"):
        base = rates.get("torchdata", {}).get(workers)
        lit = rates.get("litdata", {}).get(workers)
        for path in ours:
            rate = rates.get(path, {}).get(workers)
            if rate is None or base is None:
                continue
            ok = rate >= THROUGHPUT_TARGET * base and (lit is None or rate >= lit)
            lit_text = f", {rate / lit:.2f}x LitData" if lit else ""
            lines.append(
                f"throughput {workers} workers: {path} {rate:,.0f} samples/s = "
                f"{rate / base:.2f}x torchdata{lit_text}: {'met' if ok else 'NOT met'}"
            )
    steps = results.get("lightning_steps_per_s", {})
    if {"resumable", "plain"} <= steps.keys():
        ratio = steps["resumable"] / steps["plain"]
        mark = "met" if ratio >= LIGHTNING_TARGET else "NOT met"
        lines.append(
            f"Lightning: ResumableDataModule {steps['resumable']:.1f} steps/s = {ratio:.3f}x a "
            f"plain DataLoader ({steps['plain']:.1f}): {mark}"
        )
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--repeat", type=int, default=5, help="resumes per child (median)")
    parser.add_argument("--batches", type=int, default=600, help="batches per throughput run")
    parser.add_argument("--steps", type=int, default=300, help="Lightning steps timed")
    parser.add_argument("--samples", type=int, default=40_000, help="samples of the read set")
    parser.add_argument("--skip-lightning", action="store_true")
    parser.add_argument("--data", type=Path, default=None, help="data folder (default: temp)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_child(spec: Sequence[str]) -> Json:
    """Run one measurement in this (child) process."""
    kind, path, root, *rest = spec
    numbers = [int(value) for value in rest]
    actions: dict[str, Callable[..., Json]] = {
        "resume": child_resume,
        "throughput": child_throughput,
        "lightning": child_lightning,
    }
    return actions[kind](path, Path(root), *numbers)


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare the data, run every case, print the verdicts and write the JSON."""
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child)))
        return 0
    base = args.data or Path(tempfile.mkdtemp(prefix="lrd-peers-"))
    roots = {"small": base / "small", "resume": base / "resume"}
    sys.path.insert(0, str(REPO_ROOT))
    if not (roots["small"] / "all.npy").exists():
        make_data(roots["small"], args.samples, sparse=False)
    if not (roots["resume"] / "all.npy").exists():
        make_data(roots["resume"], RESUME_SAMPLES, sparse=True)
    paths = [p for p in PATHS if p != "litdata" or importlib.util.find_spec("litdata")]
    if "litdata" in paths and not (roots["small"] / "litdata").exists():
        make_litdata(roots["small"])
    started = time.time()
    results = measure(args, roots, paths)
    command = "benchmarks/bench_peers.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    results.update(
        command=command.strip(),
        conditions=(
            f"{SEQ_LEN}-token uint16 sequences, batch {BATCH}, shuffled, rank 0 of 1; "
            f"{args.samples:,} samples (resumes up to k = 1,000 and all reads), "
            f"{RESUME_SAMPLES:,} samples (sparse files) for k = 100,000, where LitData is not "
            f"run (its optimize() writes every byte); shards memmapped (preload=False), as the "
            f"baseline's .npy; throughput without workers and Lightning steps per CPU second "
            f"of the process, with 2 workers per wall second; median of {args.rounds} "
            f"interleaved rounds, {os.cpu_count()} CPUs shared with other work"
        ),
        seconds=round(time.time() - started, 1),
        load_average=load_average(),
        versions={
            "python": python_version(),
            **{p: package_version(p) for p in ("torch", "torchdata", "litdata", "lightning")},
        },
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    )
    results["verdicts"] = verdicts(results)
    for line in results["verdicts"]:
        print(line)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
