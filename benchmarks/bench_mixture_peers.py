"""Benchmark a weighted mixture's index stream against Grain's ``MapDataset.mix``, in one run.

Run from the repository root (Grain is not a dependency: use the benchmark venv of
``bench_peers.py``; without Grain only this library's rows are measured)::

    /work/bench-venv/bin/python benchmarks/bench_mixture_peers.py           # ~2 minutes
    .venv/bin/python benchmarks/bench_mixture_peers.py --quick              # CI smoke
    .venv/bin/python benchmarks/tables.py                                   # the docs table

The mixture: three sources ``a``, ``b``, ``c`` of sizes in ratio 6:3:1 (``N`` samples in
all, indices only, so nothing is read but the order), weights ``{a: 0.5, b: 0.3, c: 0.2}``
(``c`` is read twice per epoch), ``N`` samples an epoch, rank 0 of ``--world`` (default 8):

* **ours**: ``MixtureSampler(MixtureDataset(...), weights, samples_per_epoch=N,
  drop_last=True, num_replicas=W, rank=0, seed=0)``: a random source sequence with exact
  per-source counts, every sample once per pass, each pass its own permutation;
* **Grain** (its documented mixing path): each source ``MapDataset.range(...)
  .shuffle(seed).repeat()``, mixed with ``MapDataset.mix(sources, weights)``, cut to ``N``
  with ``slice``, rank 0's every ``W``-th element, iterated as ``to_iter_dataset`` without
  read threads. Grain's mix interleaves the sources in a fixed pattern (not a random source
  sequence) and has no weight change inside an epoch.

Measured, each in a fresh process pinned to one CPU (best of ``--repeat``):

* **epoch**: CPU seconds of rank 0's full epoch (``for _ in stream: pass``);
* **resume**: from loading a state at the epoch's middle (ours: ``state_at`` through JSON
  into a fresh sampler; Grain: ``set_state({"next_index": k})``) to the first index, wall
  ms; untimed, the next 1,000 indices must equal the uninterrupted epoch's there;
* **counts** (untimed, rank 0 of 1, ``N`` at most 400,000): each source's count in the
  epoch against ``round(weight * N)``.

Results go to ``--json`` (default ``benchmarks/results/mixture_peers.json``).
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import sys
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from _harness import (
    REPO_ROOT,
    Json,
    argument_parser,
    best_time,
    fmt_n,
    load_average,
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

RESULTS = "benchmarks/results/mixture_peers.json"
MIXTURE_PEERS = REPO_ROOT / RESULTS
NAMES, RATIO, WEIGHTS = ("a", "b", "c"), (6, 3, 1), (0.5, 0.3, 0.2)
SEED, WINDOW, COUNTS_MAX = 0, 1000, 400_000
SYSTEMS = ("ours", "grain")


def sizes(n: int) -> list[int]:
    """The sources' sizes, 6:3:1, summing to ``n``."""
    head = [n * part // sum(RATIO) for part in RATIO[:-1]]
    return [*head, n - sum(head)]


def stream(system: str, n: int, world: int) -> Any:
    """Rank 0's epoch as an iterable with a state: the sampler, or Grain's iter dataset."""
    if system == "ours":
        from lightning_resumable_data import MixtureDataset, MixtureSampler

        sources = dict(zip(NAMES, map(range, sizes(n)), strict=True))
        return MixtureSampler(
            MixtureDataset(sources),
            dict(zip(NAMES, WEIGHTS, strict=True)),
            num_replicas=world,
            rank=0,
            seed=SEED,
            drop_last=True,
            samples_per_epoch=n,
        )
    grain = importlib.import_module("grain")  # not a dependency: typed Any
    starts = itertools.accumulate([0, *sizes(n)[:-1]])
    parts = [
        grain.MapDataset.range(start, start + size).shuffle(seed=SEED + i).repeat()
        for i, (start, size) in enumerate(zip(starts, sizes(n), strict=True))
    ]
    mixed = grain.MapDataset.mix(parts, list(WEIGHTS)).slice(slice(0, n))
    rank = mixed.slice(slice(0, None, world))
    return rank.to_iter_dataset(grain.ReadOptions(num_threads=0))


def run_epoch(system: str, n: int, world: int) -> Json:
    """CPU seconds of rank 0's epoch."""
    data = stream(system, n, world)
    start, count = time.process_time(), 0
    for _ in data:
        count += 1
    return {"seconds": time.process_time() - start, "count": count}


def run_resume(system: str, n: int, world: int) -> Json:
    """Wall ms from loading the middle's state to the first index; the window checked."""
    k = n // 2 // world  # rank 0's position at the epoch's middle
    if system == "ours":
        state = json.loads(json.dumps(stream(system, n, world).state_at(0, k * world)))
        data = stream(system, n, world)
        start = time.perf_counter()
        data.load_state_dict(state)
        iterator: Iterator[int] = iter(data)
    else:
        data = stream(system, n, world)
        start = time.perf_counter()
        iterator = iter(data)
        iterator.set_state({"next_index": k})  # type: ignore[attr-defined]
    resumed = [next(iterator)]
    seconds = time.perf_counter() - start
    resumed += itertools.islice(iterator, WINDOW - 1)
    expected = list(itertools.islice(iter(stream(system, n, world)), k, k + len(resumed)))
    return {"seconds": seconds, "ok": resumed == expected}


def run_counts(system: str, n: int, world: int) -> Json:
    """Each source's count in a whole epoch of ``min(n, COUNTS_MAX)`` on one rank."""
    import numpy as np

    n = min(n, COUNTS_MAX)
    indices = np.fromiter(stream(system, n, 1), dtype=np.int64, count=n)
    bounds = np.cumsum(sizes(n))  # source i holds the indices below bounds[i]
    which = np.searchsorted(bounds, indices, side="right")
    counts = np.bincount(which, minlength=len(NAMES)).tolist()
    targets = [round(weight * n) for weight in WEIGHTS]
    return {"seconds": 0.0, "n": n, "counts": counts, "ok": counts == targets}


def child(what: str, system: str, n: int, world: int) -> Json:
    pin_to_one_cpu()
    runs = {"epoch": run_epoch, "resume": run_resume, "counts": run_counts}
    return runs[what](system, n, world)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1], argv[2], int(argv[3]), int(argv[4]))))
        return 0
    parser = argument_parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="a small N, one repeat")
    parser.add_argument("--n", type=int, default=4_000_000)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeat = 80_000, 1
    systems = [s for s in SYSTEMS if s == "ours" or importlib.util.find_spec("grain")]
    print(
        f"# Mixture index stream, N = {fmt_n(args.n)}, rank 0 of {args.world}, one CPU; "
        f"python {python_version()}, grain {package_version('grain')}; {load_average()}",
        flush=True,
    )
    results: dict[str, dict[str, list[Json]]] = {s: {} for s in systems}
    for _ in range(args.repeat):  # systems interleaved
        for what, system in itertools.product(("epoch", "resume", "counts"), systems):
            command = ["--child", what, system, str(args.n), str(args.world)]
            runs, error = repeat_runs(partial(spawn_json, __file__, command), 1)
            if error:
                print(f"\nFAILED: {system} {what}: {error}")
                return 1
            results[system].setdefault(what, []).extend(runs)
            progress(f"  {system:<6} {what:<7} {runs[0]['seconds']:.4f} s")
    rows = {system: summary(results[system]) for system in systems}
    print_block(mixture_peers_table(write(args, rows)))
    return 0 if all(row["resume_ok"] and row["counts_ok"] for row in rows.values()) else 1


def summary(runs: dict[str, list[Json]]) -> Json:
    """One system's row: best times, and whether every check held in every run."""
    epoch = best_time(runs["epoch"])
    count = int(runs["epoch"][0]["count"])
    return {
        "count": count,
        "epoch_cpu_s": epoch,
        "rate": count / epoch,
        "resume_ms": best_time(runs["resume"]) * 1e3,
        "resume_ok": all(run["ok"] for run in runs["resume"]),
        "counts": runs["counts"][0]["counts"],
        "counts_n": runs["counts"][0]["n"],
        "counts_ok": all(run["ok"] for run in runs["counts"]),
    }


def mixture_peers_table(payload: Json) -> list[str]:
    """The docs table (``tables.py``): each system's rate, ratio to Grain's, resume, checks."""
    rows: dict[str, Json] = payload["results"]
    grain = rows.get("grain")
    lines = [
        f"`{payload['command']}`: N = {payload['n']:,} samples an epoch, rank 0 of "
        f"{payload['world']}, one CPU, fresh process per measurement, best of "
        f"{payload['repeat']}; Python {payload['python']}, Grain {payload['grain']}, "
        f"{payload['load_average']} at the end of the run.",
        "",
    ]
    lines += table_header(
        "system", "rank-0 indices", "epoch CPU s", "M indices/s", "÷ Grain", "resume ms", "checks"
    )
    for system, row in rows.items():
        ratio = f"{row['rate'] / grain['rate']:.1f}x" if grain else "—"
        checks = (
            f"resume exact: {row['resume_ok']}; counts {row['counts']} of "
            f"{row['counts_n']:,} = targets: {row['counts_ok']}"
        )
        cells = [
            system,
            f"{row['count']:,}",
            f"{row['epoch_cpu_s']:.3f}",
            f"{row['rate'] / 1e6:.3f}",
            ratio,
            f"{row['resume_ms']:.2f}",
            checks,
        ]
        lines.append(table_row(cells))
    return lines


def write(args: Any, rows: dict[str, Json]) -> Json:
    """Write (and return) the JSON the docs table is generated from."""
    out = REPO_ROOT / args.json if not args.json.startswith("/") else args.json
    payload = {
        "command": "benchmarks/bench_mixture_peers.py" + (" --quick" if args.quick else ""),
        "n": args.n,
        "world": args.world,
        "repeat": args.repeat,
        "python": python_version(),
        "grain": package_version("grain"),
        "load_average": load_average(),
        "results": rows,
    }
    with open(out, "w") as handle:
        json.dump(payload, handle, indent=2)
    return payload


if __name__ == "__main__":
    sys.exit(main())
