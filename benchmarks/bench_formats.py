"""Images per second from MDS, LitData and WebDataset: our readers against each peer's loader.

One synthetic image set (``--samples`` 32x32 RGB PNGs with a caption and an int label),
written once per format by the peers' own writers (``formats_paths.py``: Streaming's
``MDSWriter``, ``litdata.optimize``, webdataset's ``ShardWriter``), is read by

* ours: ``open_mds`` / ``open_litdata`` / ``open_webdataset`` + ``DistributedShardedDataset``
  + ``StatefulDataLoader`` (and, over the tar shards, ``ShardedDataLoader``);
* each peer's own loader on its own format: Mosaic ``StreamingDataset`` +
  ``StreamingDataLoader``, LitData ``StreamingDataset`` + ``StreamingDataLoader``, a
  ``webdataset.WebDataset(...).shuffle(1000)`` pipeline and ``wids.ShardListDataset``.

Every path shuffles, reads batches of 64 and decodes every PNG with PIL into a ``uint8``
tensor in the same collate function (``formats_paths.collate``), at 0 and 2 workers.

* ``read``: one whole epoch from ``iter(loader)``: images per wall second, images per CPU
  second (this process and its reaped worker processes), time to the first batch (from
  building the loader).
* ``resume``: a fresh loader + its state at k batches (``load_state_dict``) + the first batch,
  0 workers; k = 0 is a fresh start. States are the documented ones (ours, Mosaic's and
  LitData's ``state_dict``); ``webdataset`` and ``wids`` document none: ``webdataset`` is
  timed replaying k batches (what resuming it costs without a state), ``wids`` is not timed.
  Each resume is checked against the batch k an uninterrupted loader gave (``exact``).

Every measurement is a fresh process (``_harness.spawn_json``) with the page cache warm; the
paths run interleaved, in alternating order, for ``--rounds`` rounds (median), so a busy
machine slows every path alike; the load average is recorded per round. Run it from the
repository root in a venv with the peers (``bench_peers.py`` says how to make one)::

    /work/bench-venv/bin/python benchmarks/bench_formats.py   # -> results/formats.json
    .venv/bin/python benchmarks/tables.py                      # the table in docs/benchmarks.md

``--quick`` is CI's smoke run (seconds). Without the peers (CI's venv) its MDS and
WebDataset corpora come from ``formats_standins.py`` (the result says ``stand-in``), only
our paths run, and LitData's are skipped; without Pillow the script is skipped.
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
from collections.abc import Sequence
from pathlib import Path

from _harness import REPO_ROOT, Json, load_average, package_version, python_version, spawn_json
from formats_children import run_child
from formats_paths import BATCH, FORMATS, PATHS, SEED, installed, missing
from formats_table import formats_table
from formats_writers import shard_sizes, warm, write_corpora

RESULTS = REPO_ROOT / "benchmarks" / "results" / "formats.json"
QUICK = {"samples": 640, "per_shard": 160, "rounds": 1, "repeat": 1}
VERSIONS = ("torch", "torchdata", "pillow", "mosaicml-streaming", "litdata", "webdataset", "wids")


# --------------------------------------------------------------------------------------
# Measurements (child side).
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Parent side.
# --------------------------------------------------------------------------------------


def _run(kind: str, *args: object) -> Json:
    result = spawn_json(__file__, ["--child", kind, *map(str, args)])
    shown = {k: v for k, v in result.items() if k != "runs"}
    print(f"  {kind} {' '.join(map(str, args[:1] + args[2:]))}: {shown}", file=sys.stderr)
    return result


def measure(args: argparse.Namespace, root: Path, paths: Sequence[str]) -> Json:
    """Every path's reads and resumes, interleaved per round; medians over the rounds."""
    reads: dict[str, dict[str, list[Json]]] = {p: {"0": [], "2": []} for p in paths}
    resumes: dict[str, list[Json]] = {p: [] for p in paths if p != "wids"}  # wids: no state
    loads = []
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for workers in ("0", "2"):
            for path in order:
                reads[path][workers].append(_run("read", path, root, workers))
        for path in order:
            if path in resumes:
                resumes[path].append(_run("resume", path, root, args.repeat, *args.ks))
        loads.append(os.getloadavg())
    return {**summarise(reads, resumes, args.ks), "load_by_round": loads}


def summarise(reads: dict[str, dict[str, list[Json]]], resumes: dict[str, list[Json]],
              ks: Sequence[int]) -> Json:  # fmt: skip
    """Medians over the rounds of each path's reads and resumes; the runs that failed."""
    med = statistics.median
    read: Json = {}
    errors: dict[str, str] = {}
    for path, by_workers in reads.items():
        for workers, runs in by_workers.items():
            good = [run for run in runs if "error" not in run]
            errors.update({f"read {path} {workers}": r["error"] for r in runs if "error" in r})
            if good:
                keys = ("images_per_s", "images_per_cpu_s", "first_batch_s")
                row = {key: med(run[key] for run in good) for key in keys}
                row.update(images=good[0]["images"], distinct=good[0]["distinct"], runs=good)
                read.setdefault(path, {})[workers] = row
    resume: Json = {}
    for path, runs in resumes.items():
        errors.update({f"resume {path}": r["error"] for r in runs if "error" in r})
        good = [run for run in runs if "error" not in run]
        for k in map(str, ks) if good else ():
            seconds = med(run[k]["seconds"] for run in good)
            exact = all(run[k]["exact"] for run in good)
            resume.setdefault(path, {})[k] = {"seconds": seconds, "exact": exact}
    return {"read": read, "resume": resume, "errors": errors}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (``--quick`` sets the CI-sized defaults of ``QUICK``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI-sized: " + str(QUICK))
    parser.add_argument("--samples", type=int, default=20_000, help="images in the set")
    parser.add_argument("--per-shard", type=int, default=2_000, help="images per shard")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--repeat", type=int, default=3, help="resumes per child (median)")
    parser.add_argument("--data", type=Path, default=None, help="data folder (default: temp)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])
        for name, value in QUICK.items():
            if f"--{name.replace('_', '-')}" not in given:
                setattr(args, name, value)
    batches = args.samples // BATCH
    args.ks = (0, max(1, batches // 2))  # a fresh start, and a resume mid-epoch
    return args


def conditions(args: argparse.Namespace, shards: dict[str, list[int]]) -> str:
    """The conditions of the run, for the JSON and the docs."""
    counts = ", ".join(f"{FORMATS[f]} {len(s)}" for f, s in shards.items())
    return (
        f"{args.samples:,} synthetic 32x32 RGB PNGs (about 3.2 kB each, random pixels) with a "
        f"caption and an int label; shards of about {args.per_shard:,} images ({counts} "
        f"shards); shuffled, seed {SEED}, batch {BATCH}, rank 0 of 1; every PNG decoded by "
        "PIL into a uint8 (64, 32, 32, 3) tensor in the same collate on every path; reads: "
        "one epoch from iter(), per wall second and per CPU second of the process and its "
        "workers; first batch from building the loader; resume: fresh loader + state + first "
        f"batch, 0 workers, median of {args.repeat} in a process; median of {args.rounds} "
        f"interleaved rounds, a fresh process per measurement, page cache warm, "
        f"{os.cpu_count()} CPUs shared with other work"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Write the corpora, run every case, print the table and write the JSON."""
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child)))
        return 0
    if not installed("PIL"):
        print("bench_formats.py skipped: every path decodes PNGs with Pillow (pip install pillow)")
        return 0
    started, load_start = time.time(), load_average()
    base = args.data or Path(tempfile.mkdtemp(prefix="lrd-formats-"))
    try:
        writers = write_corpora(base, args.samples, args.per_shard)
        skipped = {p: r for p in PATHS if (r := missing(p))}
        skipped.update({p: "no corpus (its writer is not installed)" for p, (f, *_) in
                        PATHS.items() if f not in writers and p not in skipped})  # fmt: skip
        paths = [p for p in PATHS if p not in skipped]
        for path, reason in skipped.items():
            print(f"note: {path} skipped: {reason}", flush=True)
        corpus_bytes = warm(base)
        index = _run("index", base) if "wds" in writers else {}
        results = measure(args, base, paths)
        shards = {f: shard_sizes(base, f) for f in writers}
    finally:
        if args.data is None:  # a temporary folder: nobody else can find it
            shutil.rmtree(base, ignore_errors=True)
    command = "benchmarks/bench_formats.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    results.update(
        command=command.strip(),
        conditions=conditions(args, shards),
        writers=writers,
        skipped=skipped,
        corpus={"samples": args.samples, "bytes": corpus_bytes, "shard_sizes": shards},
        wds_index_s=index.get("seconds"),
        resume_ks=list(args.ks),
        seconds=round(time.time() - started, 1),
        load_average_start=load_start,
        load_average=load_average(),
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        versions={"python": python_version(), **{d: package_version(d) for d in VERSIONS}},
    )
    print("\n".join(formats_table(results)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
