"""Benchmark the mixture's cost per sample per rank, by source sizes and world size.

Run from the repository root::

    .venv/bin/python benchmarks/bench_mixture_ranks.py           # about two minutes
    .venv/bin/python benchmarks/bench_mixture_ranks.py --quick   # a smoke run
    .venv/bin/python benchmarks/tables.py                        # docs table from the JSON

A ``MixtureSampler`` over ``N = 10**8`` samples per epoch (``samples_per_epoch``), rank 0
of ``W`` for ``W`` in 1, 8, 64, 512 and 4,096, reads its positions of epoch 0 with
``for _ in sampler`` (the plain iteration: one Python int per index). Measured: CPU
seconds (``time.process_time``, one thread pinned to one CPU) over ``min(N / W, 10**6)``
samples (the whole rank epoch from ``W = 128`` on, a prefix below), as microseconds per
sample. A rank computes only its own positions, so the cost per sample should stay flat in
``W`` (per-rank cost proportional to ``N / W``). Beside each, in the same process, the plain
``DistributedSampler(algorithm="feistel")`` over ``range(N)`` at the same rank and world:
the ratio is the mixture's price over a plain shuffle.

Source-size mixes (the issue's cases):

* ``2 x 10**6``: two sources of ``10**6`` samples, weights 0.5 / 0.5;
* ``1,000 + 10**6``: a 1,000-sample source at weight 0.3 (30,000 passes per epoch, read
  by every rank) and a ``10**6`` one;
* ``10 sources``: sizes ``10**3 .. 3 * 10**7``, equal weights.

Target: at most 0.5 us per sample at ``W = 1`` for every mix, and flat in ``W`` (within 3x
of ``W = 1`` at ``W = 4,096``). Results go to ``--json`` (default
``benchmarks/results/mixture_ranks.json``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path
from typing import Any

from _harness import load_average, pin_to_one_cpu, python_version

N = 10**8
WORLDS = (1, 8, 64, 512, 4096)
MIXES: dict[str, tuple[dict[str, int], list[float]]] = {
    "2 x 10**6": ({"a": 10**6, "b": 10**6}, [0.5, 0.5]),
    "1,000 + 10**6": ({"small": 1000, "big": 10**6}, [0.3, 0.7]),
    "10 sources": (
        {f"s{i}": size for i, size in enumerate([10**3, 3 * 10**3, 10**4, 3 * 10**4, 10**5,
                                                3 * 10**5, 10**6, 3 * 10**6, 10**7, 3 * 10**7])},
        [1.0] * 10,
    ),
}  # fmt: skip
TARGET_US = 0.5


def timed(sampler: Any, count: int) -> float:
    """CPU seconds to take ``count`` indices from a fresh iterator of ``sampler``."""
    start = time.process_time()
    for _ in itertools.islice(iter(sampler), count):
        pass
    return time.process_time() - start


def measure(mix: str, world: int, cap: int) -> dict[str, Any]:
    from lightning_resumable_data import DistributedSampler, MixtureDataset, MixtureSampler

    sizes, weights = MIXES[mix]
    dataset = MixtureDataset({name: range(size) for name, size in sizes.items()})
    count = min(N // world, cap)
    mixture = MixtureSampler(dataset, weights, world, 0, seed=0, samples_per_epoch=N)
    mixture_s = timed(mixture, count)
    plain = DistributedSampler(range(N), world, 0, seed=0, algorithm="feistel")
    plain_s = timed(plain, count)
    return {
        "mix": mix,
        "world": world,
        "count": count,
        "rank_epoch": N // world,
        "mixture_us": mixture_s / count * 1e6,
        "feistel_us": plain_s / count * 1e6,
        "ratio": mixture_s / plain_s,
        "rank_epoch_s": mixture_s / count * (N // world),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples per case")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/mixture_ranks.json"))
    args = parser.parse_args()
    pin_to_one_cpu()
    cap = 10**5 if args.quick else 10**6
    rows = []
    for mix in MIXES:
        for world in WORLDS:
            row = measure(mix, world, cap)
            rows.append(row)
            print(
                f"{mix:>14}  W={world:<5} {row['count']:>9,} samples  "
                f"mixture {row['mixture_us']:.3f} us/sample  feistel {row['feistel_us']:.3f}  "
                f"ratio {row['ratio']:.1f}x  rank epoch {row['rank_epoch_s']:.2f} s",
                flush=True,
            )
    verdicts = []
    for mix in MIXES:
        mine = {r["world"]: r for r in rows if r["mix"] == mix}
        first, last = mine[WORLDS[0]]["mixture_us"], mine[WORLDS[-1]]["mixture_us"]
        verdicts.append(
            f"{mix}: {first:.2f} us/sample at W=1 (target <= {TARGET_US}) — "
            f"{'PASS' if first <= TARGET_US else 'MISS'}; {last / first:.1f}x that at "
            f"W={WORLDS[-1]} (target <= 3x) — {'PASS' if last <= 3 * first else 'MISS'}"
        )
    for line in verdicts:
        print(line)
    result = {
        "command": "benchmarks/bench_mixture_ranks.py" + (" --quick" if args.quick else ""),
        "n": N,
        "python": python_version(),
        "load_average": load_average(),
        "rows": rows,
        "verdicts": verdicts,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
