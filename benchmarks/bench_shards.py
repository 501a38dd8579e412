"""Benchmark shard prefetch: throughput across shard boundaries with slow storage.

Run from the repository root::

    .venv/bin/python benchmarks/bench_shards.py              # full run (about 30 s)
    .venv/bin/python benchmarks/bench_shards.py --quick      # CI smoke (a few seconds)
    .venv/bin/python benchmarks/bench_shards.py --shards 32 --read-delay 0.02 --repeat 5

Set-up: ``--shards`` (default 24) token shards written with ``write_token_shards`` into a
temporary directory, ``--samples-per-shard`` (default 64) samples of 1024 ``uint16``
tokens each, read by ``TokenShardReader`` (``preload=True``) wrapped so that every shard
load first sleeps ``--read-delay`` seconds (default 0.05): simulated slow storage, a
network file system or an object store. One rank (``num_replicas=1``), ``batch_size=8``,
shards and samples shuffled, one epoch.

Training is simulated too: every batch costs ``read_delay * batch_size /
samples_per_shard`` seconds of ``time.sleep`` in the consuming loop, so processing one
shard costs exactly as much as reading one (``--compute-ratio`` scales this). A sleep
releases the GIL as a GPU step does; the per-sample Python work of reading is real.

Paths measured, each without shard prefetch (``prefetch=0``, ``max_resident=1``: a shard
is loaded when its first sample is read) and with it (``prefetch=1``, ``max_resident=2``):

* ``dataset``: ``StatefulDataLoader`` over ``DistributedShardedDataset`` with its
  ``ShardedSampler``, ``num_workers=0`` (the prefetch runs on the dataset's thread);
* ``loader (thread)``: ``ShardedDataLoader(multiprocessing=False)``, two micro-batches
  prefetched in both variants;
* ``loader (process)``: ``ShardedDataLoader(multiprocessing=True)``: reading and shard
  prefetch in one worker process, two micro-batches prefetched.

Time is the wall time of one epoch from ``iter()`` to the last batch, best of
``--repeat`` (default 3) fresh loaders. Ideal times: without prefetch every shard costs a
read plus its processing, ``S * (d + p)``; with prefetch only the first read is exposed,
``d + S * p``. With ``d == p`` the ideal ratio is ``2S / (S + 1)`` (1.92 for 24 shards).
The verdict checks the ratio against the target of 1.8x on every path. Every epoch's
samples are checked to be exactly the dataset's, once each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lightning_resumable_data import (
    DistributedShardedDataset,
    ShardedDataLoader,
    StatefulDataLoader,
    TokenShardReader,
    open_token_shards,
    write_token_shards,
)

SEQ_LEN = 1024
BATCH = 8
TARGET = 1.8


class SlowTokenReader(TokenShardReader):
    """A token shard whose load first waits ``delay`` seconds (simulated slow storage)."""

    delay = 0.0

    def load(self) -> None:
        if not self.loaded:
            time.sleep(self.delay)
        super().load()


def slow_readers(directory: Path, delay: float) -> list[SlowTokenReader]:
    readers = []
    for reader in open_token_shards(directory):
        slow = SlowTokenReader(reader.path, SEQ_LEN, np.uint16, num_samples=len(reader))
        slow.delay = delay
        readers.append(slow)
    return readers


@dataclass(frozen=True)
class Result:
    path: str
    prefetch: int
    seconds: float
    samples: int


def timed_epoch(batches: Iterable[Any], step: float, total: int) -> float:
    """Consume one epoch, sleeping ``step`` per batch; check every sample came once."""
    seen = 0
    start = time.perf_counter()
    for batch in batches:
        seen += len(batch)
        time.sleep(step)
    seconds = time.perf_counter() - start
    if seen != total:
        raise AssertionError(f"read {seen} samples, the dataset has {total}")
    return seconds


def first_tokens(batches: Iterable[Any]) -> list[int]:
    """A fingerprint of an epoch: the first token of every sample, in order."""
    return [int(row[0]) for batch in batches for row in batch]


Build = Callable[[int], tuple[Iterable[Any], Callable[[], None]]]


def builders(directory: Path, delay: float) -> dict[str, Build]:
    """Per path: ``prefetch -> (iterable of one epoch, close)``."""

    def dataset(prefetch: int) -> tuple[Iterable[Any], Callable[[], None]]:
        data = DistributedShardedDataset(
            slow_readers(directory, delay), max_resident=prefetch + 1, prefetch=prefetch
        )
        loader = StatefulDataLoader(data, batch_size=BATCH, sampler=data.sampler(1, 0))
        return loader, data.close

    def sharded(multiprocessing: bool) -> Build:
        def build(prefetch: int) -> tuple[Iterable[Any], Callable[[], None]]:
            loader = ShardedDataLoader(
                slow_readers(directory, delay),
                BATCH,
                num_shard_prefetches=prefetch,
                num_microbatch_prefetches=2,
                num_replicas=1,
                dp_rank=0,
                multiprocessing=multiprocessing,
            )
            return loader, loader.close

        return build

    return {
        "dataset": dataset,
        "loader (thread)": sharded(False),
        "loader (process)": sharded(True),
    }


def measure(build: Build, prefetch: int, repeat: int, step: float, total: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        batches, close = build(prefetch)
        try:
            best = min(best, timed_epoch(batches, step, total))
        finally:
            close()
    return best


def check_orders(directory: Path, build_all: dict[str, Build]) -> None:
    """All paths and both variants read the same epoch (the order is the sampler's)."""
    orders = []
    for build in build_all.values():
        for prefetch in (0, 1):
            batches, close = build(prefetch)
            orders.append(first_tokens(batches))
            close()
    if any(order != orders[0] for order in orders):
        raise AssertionError("the paths disagree on the epoch's order")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shards", type=int, default=24, help="shards (default 24)")
    parser.add_argument("--samples-per-shard", type=int, default=64, help="default 64")
    parser.add_argument("--read-delay", type=float, default=0.05, help="seconds per shard load")
    parser.add_argument(
        "--compute-ratio",
        type=float,
        default=1.0,
        help="processing time of one shard / read time of one shard (default 1)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="best of k (default 3)")
    parser.add_argument("--quick", action="store_true", help="12 shards, 0.03 s, best of 1")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.shards, args.read_delay, args.repeat = 12, 0.03, 1
    shards, per_shard, delay = args.shards, args.samples_per_shard, args.read_delay
    step = delay * args.compute_ratio * BATCH / per_shard
    total = shards * per_shard
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        tokens = np.arange(total * SEQ_LEN, dtype=np.int64) % 60_000
        write_token_shards(directory, [tokens], SEQ_LEN, tokens_per_shard=per_shard * SEQ_LEN)
        build_all = builders(directory, delay)
        check_orders(directory, builders(directory, 0.0))
        print(
            f"# {shards} shards x {per_shard} samples of {SEQ_LEN} uint16 tokens, "
            f"batch_size={BATCH}, read delay {delay * 1000:.0f} ms per shard, processing "
            f"{step * 1000:.2f} ms per batch ({step * per_shard / BATCH * 1000:.0f} ms per "
            f"shard); one epoch, best of {args.repeat}; python {sys.version.split()[0]}",
            flush=True,
        )
        results = [
            Result(name, prefetch, measure(build, prefetch, args.repeat, step, total), total)
            for name, build in build_all.items()
            for prefetch in (0, 1)
        ]
    ideal_without = shards * (delay + step * per_shard / BATCH)
    ideal_with = delay + shards * max(delay, step * per_shard / BATCH)
    lines = [
        "| path | shard prefetch | seconds | samples/s | ideal seconds |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        ideal = ideal_with if r.prefetch else ideal_without
        lines.append(
            f"| {r.path} | {'1 ahead' if r.prefetch else 'none'} | {r.seconds:.3f} "
            f"| {r.samples / r.seconds:,.0f} | {ideal:.3f} |"
        )
    print()
    print("\n".join(lines))
    print()
    ideal_ratio = ideal_without / ideal_with
    all_pass = True
    for name in build_all:
        without, with_ = (
            next(r for r in results if (r.path, r.prefetch) == (name, p)) for p in (0, 1)
        )
        ratio = without.seconds / with_.seconds
        passed = ratio >= TARGET
        all_pass = all_pass and passed
        print(
            f"{name}: prefetch speed-up {ratio:.2f}x (ideal {ideal_ratio:.2f}x, target "
            f"{TARGET}x) — {'PASS' if passed else 'MISS'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
