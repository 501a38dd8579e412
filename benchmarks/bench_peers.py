"""Every loader path of ours against its peers and the raw limit: resume latency, read rate.

All paths read the same rows: 1024-token ``uint16`` sequences, batch 32, shuffled, rank 0
of 1, and yield the same batch (a ``torch.uint16`` tensor ``(32, 1024)``, default collate;
no dtype conversion anywhere). Paths (``peers_paths.py``): ``plain`` and ``sharded`` (ours),
``torchdata``, ``litdata`` (its ``TokensLoader`` path), ``grain`` (``MapDataset`` ->
``IterDataset``, ``get_state``/``set_state``), ``mosaic`` (MosaicML Streaming: ``MDSWriter``
shards, ``StreamingDataset`` + ``StreamingDataLoader``, ``peers_mosaic.py``) and ``raw`` (the
limit: a vectorised memmap gather per batch, one process). Each measurement runs in its own process
(``_harness.spawn_json``); the paths run in the same invocation, interleaved, so that a busy
machine slows every path alike.

* ``resume``: a fresh loader + its state load + the first batch, at k batches into the
  epoch (k = 10, 1,000 on the read set; k = 100,000 on a 3.3M-sample set of sparse files,
  so that k is mid-epoch), and the first batch of a fresh start (k = 0). Median of
  ``--repeat`` runs in one process.
* ``throughput``: samples/s over ``--batches`` batches at 0 and 2 workers.
* ``lightning``: steps/s of a small model under ``Trainer`` (``peers_lightning.py``).

The peers are not dependencies of the package; run it from a venv that has them::

    python3 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install torch==2.13.0
    /work/bench-venv/bin/pip install -c <(echo torch==2.13.0) -e . torchdata litdata grain \
        mosaicml-streaming==0.13.0
    /work/bench-venv/bin/pip uninstall -y torchvision   # LitData pulls a CUDA build
    /work/bench-venv/bin/python benchmarks/bench_peers.py   # -> benchmarks/results/peers.json
    .venv/bin/python benchmarks/tables.py && .venv/bin/python docs/make_plots.py

Streaming imports torchvision at its top level; with torchvision uninstalled (it cannot load
beside a CPU-only torch), ``peers_mosaic.import_streaming`` gives it two placeholder names
for the time of the import only (a stub package in the venv would break ``import
lightning``): no step beyond the uninstall. A peer missing from the environment (LitData,
Grain, Streaming) is skipped with a printed note; ``--quick`` is the CI-sized run (under two
minutes). The data goes to a temporary folder, removed at the end (keep it with ``--data``):
the 3.3M-sample set as MDS shards is 6.8 GB, written by Streaming's own writer.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _harness import REPO_ROOT, Json, load_average, package_version, python_version, spawn_json
from peers_lightning import child_lightning
from peers_mosaic import make_mosaic, mosaic_state
from peers_paths import (
    BATCH,
    PATHS,
    SEQ_LEN,
    build,
    describe,
    grain_state,
    make_data,
    make_litdata,
    missing,
    raw_batch,
    raw_batches,
)
from peers_verdicts import verdicts

RESULTS = REPO_ROOT / "benchmarks" / "results" / "peers.json"
RESUME_KS = (0, 10, 1_000, 100_000)
QUICK_KS = (0, 10, 100)
RESUME_SAMPLES = 3_300_000  # > 100,000 batches of 32: k = 100,000 is mid-epoch
QUICK = {"rounds": 1, "repeat": 2, "batches": 100, "steps": 50, "samples": 8_192}


# --------------------------------------------------------------------------------------
# Measurements (child side).
# --------------------------------------------------------------------------------------


def child_resume(path: str, root: Path, k: int, repeat: int) -> Json:
    """Median seconds from a fresh loader to its first batch after a resume at batch k."""
    state: Any = None
    expected: Any = None  # the batch a resume must give, where it is known
    if path == "grain":
        state = grain_state(root, k) if k else None
    elif path == "mosaic":
        state, expected = mosaic_state(root, k) if k else (None, None)
    elif k and path != "raw":
        loader = build(path, root, 0, cheap=path != "litdata")
        iterator = iter(loader)
        for _ in range(k):
            next(iterator)
        state = loader.state_dict()
        del iterator, loader
    times = []
    for _ in range(repeat + 1):  # the first run warms imports and the page cache
        start = time.perf_counter()
        if path == "raw":
            batch = raw_batch(root, k)
        else:
            loader = build(path, root, 0)
            if state is not None:
                loader.load_state_dict(state)
            batch = next(iter(loader))
        times.append(time.perf_counter() - start)
        if path == "grain":
            loader.close()  # Grain's prefetch threads would go on reading
    if path == "grain" and not bool((batch.numpy() == loader.dataset[k]).all()):
        raise RuntimeError(f"Grain resumed at k={k} to a batch other than its batch {k}")
    if expected is not None and not bool((batch.numpy() == expected.numpy()).all()):
        raise RuntimeError(f"{path} resumed at k={k} to a batch other than its batch {k}")
    return {"seconds": statistics.median(times[1:]), "runs": times[1:], "batch": describe(batch)}


def child_throughput(path: str, root: Path, workers: int, batches: int) -> Json:
    """Samples per second over ``batches`` batches (after 20 warm-up batches)."""
    loader = None if path == "raw" else build(path, root, workers)
    iterator = raw_batches(root) if loader is None else iter(loader)
    for _ in range(20):
        next(iterator)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        next(iterator)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if hasattr(loader, "close"):
        loader.close()  # type: ignore[union-attr]
    # Without workers every thread of the loading is in this process: its CPU time is the
    # cost, and it is less disturbed by other processes on a busy machine than wall time.
    rate = batches * BATCH / (cpu if workers == 0 else seconds)
    return {"samples_per_s": rate, "seconds": seconds, "cpu_s": cpu}


# --------------------------------------------------------------------------------------
# Parent side.
# --------------------------------------------------------------------------------------


def measure(args: argparse.Namespace, roots: dict[str, Path], paths: Sequence[str]) -> Json:
    """All measurements, paths interleaved per round; medians over rounds."""
    resume: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    throughput: dict[str, dict[str, list[float]]] = {p: {} for p in paths}
    lightning: dict[str, list[float]] = {"resumable": [], "plain": []}
    batches: dict[str, str] = {}
    for round_index in range(args.rounds):
        order = list(paths) if round_index % 2 == 0 else list(reversed(paths))
        for k in args.ks:
            for path in order:
                root = roots["resume" if k * BATCH >= args.samples else "small"]
                if path == "litdata" and root == roots["resume"]:
                    continue
                result = _run("resume", path, root, k, args.repeat)
                _note(f"resume {path} k={k}", result)
                if "seconds" in result:
                    resume[path].setdefault(str(k), []).append(result["seconds"])
                    batches.setdefault(path, result["batch"])
        for workers in (0, 2):
            for path in order:
                # raw is one process: per CPU second beside 0 workers, per wall second beside 2
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
        "batch": batches,
    }


def _run(kind: str, *args: object) -> Json:
    return spawn_json(__file__, ["--child", kind, *map(str, args)])


def _note(label: str, result: Json) -> None:
    shown = {k: v for k, v in result.items() if k != "runs"}
    print(f"  {label}: {shown}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (``--quick`` sets the CI-sized defaults of ``QUICK``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI-sized: " + str(QUICK))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--repeat", type=int, default=5, help="resumes per child (median)")
    parser.add_argument("--batches", type=int, default=600, help="batches per throughput run")
    parser.add_argument("--steps", type=int, default=300, help="Lightning steps timed")
    parser.add_argument("--samples", type=int, default=40_000, help="samples of the read set")
    parser.add_argument("--skip-lightning", action="store_true")
    parser.add_argument("--data", type=Path, default=None, help="data folder (default: temp)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])
        for name, value in QUICK.items():
            if f"--{name}" not in given:
                setattr(args, name, value)
    args.ks = QUICK_KS if args.quick else RESUME_KS  # no 3.3M-sample set in --quick
    return args


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


def conditions(args: argparse.Namespace) -> str:
    """The conditions of the run, for the JSON and the docs."""
    big = (
        f"{RESUME_SAMPLES:,} samples (sparse files; Mosaic's MDS shards written in full) for "
        "k = 100,000, where LitData is not run"
    )
    return (
        f"{SEQ_LEN}-token uint16 sequences, batch {BATCH}, shuffled, rank 0 of 1, every path "
        f"yielding a torch.uint16 ({BATCH}, {SEQ_LEN}) batch; {args.samples:,} samples "
        f"(resumes up to k = {max(k for k in args.ks if k * BATCH < args.samples):,} and all "
        "reads)"
        + (f", {big} (its optimize() writes every byte)" if 100_000 in args.ks else "")
        + "; shards memmapped (preload=False), as the .npy; LitData: optimize() with "
        "TokensLoader, StreamingDataset(item_loader=TokensLoader(block_size=1024)); Grain: "
        "MapDataset.source(memmap).shuffle().batch(32).to_iter_dataset(), without read threads "
        "(ReadOptions(num_threads=0)) at 0 workers, its default ReadOptions + mp_prefetch at 2; "
        "Mosaic: MDSWriter (ndarray:uint16:1024, 16,384 samples a shard), "
        "StreamingDataset(local, shuffle=True, shuffle_seed=0, batch_size=32) with its default "
        "shuffle (py1e) and predownload + StreamingDataLoader, a collate stacking the rows "
        "(np.stack + torch.from_numpy, as Grain's batch), resumed by its state_dict/"
        "load_state_dict (past k = 1,000: its state at k = 1 with sample_in_epoch = 32k); "
        "raw limit: one process, a fancy-index gather of each "
        "batch's rows from the memmap (resume: rows of batch k by an affine bijection); "
        "throughput without workers and Lightning steps per CPU second of the process, with 2 "
        f"workers per wall second (raw: per wall second of its one process); median of "
        f"{args.rounds} interleaved rounds, {os.cpu_count()} CPUs shared with other work"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Prepare the data, run every case, print the verdicts and write the JSON."""
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child)))
        return 0
    base = args.data or Path(tempfile.mkdtemp(prefix="lrd-peers-"))
    roots = {"small": base / "small", "resume": base / "resume"}
    sys.path.insert(0, str(REPO_ROOT))
    paths = []
    for path in PATHS:
        reason = missing(path)
        if reason:
            print(f"note: {path} skipped: {reason}", flush=True)
        else:
            paths.append(path)
    if not (roots["small"] / "all.npy").exists():
        make_data(roots["small"], args.samples, sparse=False)
    if 100_000 in args.ks and not (roots["resume"] / "all.npy").exists():
        make_data(roots["resume"], RESUME_SAMPLES, sparse=True)
    if "litdata" in paths and not (roots["small"] / "litdata").exists():
        make_litdata(roots["small"])
    for root in roots.values():  # index.json is written last: without it, a partial set
        mds = root / "mosaic" / "index.json"
        if "mosaic" in paths and (root / "all.npy").exists() and not mds.exists():
            make_mosaic(root)
    started = time.time()
    try:
        results = measure(args, roots, paths)
    finally:
        if args.data is None:  # a temporary folder: nobody else can find it
            shutil.rmtree(base, ignore_errors=True)
    command = "benchmarks/bench_peers.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    results.update(
        command=command.strip(),
        conditions=conditions(args),
        skipped={p: r for p in PATHS if (r := missing(p))},
        seconds=round(time.time() - started, 1),
        load_average=load_average(),
        versions={
            "python": python_version(),
            **{p: package_version(p) for p in ("torch", "torchdata", "litdata", "grain")},
            "mosaicml-streaming": package_version("mosaicml-streaming"),
            "lightning": package_version("lightning"),
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
