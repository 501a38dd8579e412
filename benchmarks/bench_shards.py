"""Benchmark shard prefetch: throughput across shard boundaries with slow storage.

Run from the repository root::

    .venv/bin/python benchmarks/bench_shards.py              # full run (about a minute)
    .venv/bin/python benchmarks/bench_shards.py --quick      # CI smoke (a few seconds)
    .venv/bin/python benchmarks/bench_shards.py --shards 32 --read-delay 0.05 --repeat 5

Set-up: ``--shards`` (default 24) token shards written with ``write_token_shards`` into a
temporary directory, ``--samples-per-shard`` (default 64) samples of 1024 ``uint16``
tokens each, read by ``TokenShardReader`` (``preload=True``) wrapped so that every shard
load first sleeps ``--read-delay`` seconds (default 0.1): simulated slow storage, a
network file system or an object store. One rank (``num_replicas=1``), ``batch_size=8``,
shards and samples shuffled, one epoch.

Training is simulated too: every batch costs ``read_delay * batch_size /
samples_per_shard`` seconds of ``time.sleep`` in the consuming loop (sleep overshoot is
carried into the next batch's sleep), so processing one shard costs exactly as much as
reading one (``--compute-ratio`` scales this). A sleep releases the GIL as a GPU step does;
the per-sample Python work of reading is real and comes on top.

Configurations (shard prefetch ``k`` means ``num_shard_prefetches=k`` or ``prefetch=k``,
with ``max_resident = k + 1``; micro-batch prefetch ``m`` is ``num_microbatch_prefetches``):

* ``dataset``: ``StatefulDataLoader`` over ``DistributedShardedDataset`` with its
  ``ShardedSampler``, ``num_workers=0``, shard prefetch 0 or 1 (on the dataset's thread);
* ``loader (thread)``: ``ShardedDataLoader(multiprocessing=False)`` with (k, m) = (0, 0):
  a synchronous loader, no background work at all; (0, 2): micro-batches only; (1, 2):
  the whole pipeline;
* ``loader (process)``: ``ShardedDataLoader(multiprocessing=True)`` (reading and shard
  prefetch in one worker process) with (0, 2) and (1, 2).

Time is the wall time of one epoch from ``iter()`` to the last batch, best of
``--repeat`` (default 2) fresh loaders. Ideal times, for ``S`` shards, read time ``d`` and
processing time ``p`` per shard: a synchronous loader stalls on every read,
``S * (d + p)``; with shard prefetch only the first read is exposed,
``d + S * max(d, p)``. With ``d == p`` the ideal ratio is ``2S / (S + 1)`` (1.92 for 24
shards).

Verdicts (target 1.8x): *with prefetch vs without*: for the dataset path, shard prefetch
1 vs 0; for the loader, the whole pipeline (thread or process) vs the synchronous (0, 0)
loader. A second line per loader mode isolates the shard prefetch (1, 2) vs (0, 2): the
micro-batch queue alone already hides ``m`` batches of each shard read, so that ratio is
lower by construction. Every epoch is checked to hold each sample once, and all
configurations to read the same order.

Results go to ``--json`` (default ``benchmarks/results/shards.json``; not written with
``--quick``); ``benchmarks/tables.py`` turns them into the table of ``docs/sharded.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _harness import (
    REPO_ROOT,
    argument_parser,
    load_average,
    mark,
    print_block,
    python_version,
)
from tables import shards_rows

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
TOKEN_RANGE = 60_000
RESULTS = "benchmarks/results/shards.json"
PATH_NAMES = {
    "dataset": "dataset (`StatefulDataLoader`, no workers)",
    "loader (thread)": "`ShardedDataLoader`, thread",
    "loader (process)": "`ShardedDataLoader`, process",
}


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
class Config:
    path: str
    shard_prefetch: int
    microbatch_prefetch: int | None  # None: the dataset path (no micro-batch queue)

    @property
    def label(self) -> str:
        micro = "" if self.microbatch_prefetch is None else f", micro {self.microbatch_prefetch}"
        return f"shard {self.shard_prefetch}{micro}"


CONFIGS = (
    Config("dataset", 0, None),
    Config("dataset", 1, None),
    Config("loader (thread)", 0, 0),
    Config("loader (thread)", 0, 2),
    Config("loader (thread)", 1, 2),
    Config("loader (process)", 0, 2),
    Config("loader (process)", 1, 2),
)
# (label, with prefetch, without): the verdict lines.
COMPARISONS = (
    ("dataset: shard prefetch", CONFIGS[1], CONFIGS[0], True),
    ("loader (thread): pipeline vs synchronous", CONFIGS[4], CONFIGS[2], True),
    ("loader (process): pipeline vs synchronous", CONFIGS[6], CONFIGS[2], True),
    ("loader (thread): shard prefetch alone", CONFIGS[4], CONFIGS[3], False),
    ("loader (process): shard prefetch alone", CONFIGS[6], CONFIGS[5], False),
)


def timed_epoch(batches: Iterable[Any], step: float, total: int) -> float:
    """Consume one epoch, processing ``step`` seconds per batch; check the sample count.

    ``time.sleep`` overshoots (more on a busy machine); the overshoot is carried over and
    taken off the next batch's sleep, so that processing costs ``step`` per batch on
    average, as real compute would. Time spent waiting for the loader is not affected.
    """
    seen = 0
    debt = 0.0  # processing time spent beyond step * batches so far
    start = time.perf_counter()
    for batch in batches:
        seen += len(batch)
        began = time.perf_counter()
        if step - debt > 0:
            time.sleep(step - debt)
        debt += time.perf_counter() - began - step
    seconds = time.perf_counter() - start
    if seen != total:
        raise AssertionError(f"read {seen} samples, the dataset has {total}")
    return seconds


def first_tokens(batches: Iterable[Any]) -> list[int]:
    """A fingerprint of an epoch: the first token of every sample, in order."""
    return [int(row[0]) for batch in batches for row in batch]


def build(
    config: Config, directory: Path, delay: float
) -> tuple[Iterable[Any], Callable[[], None]]:
    """A fresh loader for ``config`` (one epoch) and its close function."""
    readers = slow_readers(directory, delay)
    k = config.shard_prefetch
    if config.microbatch_prefetch is None:
        data = DistributedShardedDataset(readers, max_resident=k + 1, prefetch=k)
        loader = StatefulDataLoader(data, batch_size=BATCH, sampler=data.sampler(1, 0))
        return loader, data.close
    sharded = ShardedDataLoader(
        readers,
        BATCH,
        num_shard_prefetches=k,
        num_microbatch_prefetches=config.microbatch_prefetch,
        num_replicas=1,
        dp_rank=0,
        multiprocessing=config.path == "loader (process)",
    )
    return sharded, sharded.close


def measure(
    config: Config, directory: Path, delay: float, repeat: int, step: float, total: int
) -> float:
    """Best time of ``repeat`` epochs, each with a fresh loader."""
    best = float("inf")
    for _ in range(repeat):
        batches, close = build(config, directory, delay)
        try:
            best = min(best, timed_epoch(batches, step, total))
        finally:
            close()
    return best


def check_orders(directory: Path, samples: int) -> None:
    """Every configuration reads each sample once, in the same order (the sampler's)."""
    orders = []
    for config in CONFIGS:
        batches, close = build(config, directory, 0.0)
        orders.append(first_tokens(batches))
        close()
    # Sample i starts with token (i * SEQ_LEN) % TOKEN_RANGE: distinct for these sizes.
    expected = sorted(i * SEQ_LEN % TOKEN_RANGE for i in range(samples))
    if sorted(orders[0]) != expected:
        raise AssertionError("an epoch did not read every sample exactly once")
    if any(order != orders[0] for order in orders):
        raise AssertionError("the configurations disagree on the epoch's order")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argument_parser(__doc__)
    parser.add_argument("--shards", type=int, default=24, help="shards (default 24)")
    parser.add_argument("--samples-per-shard", type=int, default=64, help="default 64")
    parser.add_argument("--read-delay", type=float, default=0.1, help="seconds per shard load")
    parser.add_argument(
        "--compute-ratio",
        type=float,
        default=1.0,
        help="processing time of one shard / read time of one shard (default 1)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="best of k (default 2)")
    parser.add_argument("--quick", action="store_true", help="12 shards, 0.03 s, best of 1")
    parser.add_argument("--json", default=RESULTS, help=f"JSON results path (default {RESULTS})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.shards, args.read_delay, args.repeat = 12, 0.03, 1
    shards, per_shard, delay = args.shards, args.samples_per_shard, args.read_delay
    step = delay * args.compute_ratio * BATCH / per_shard
    processing = step * per_shard / BATCH  # per shard
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        tokens = np.arange(shards * per_shard * SEQ_LEN, dtype=np.int64) % TOKEN_RANGE
        write_token_shards(directory, [tokens], SEQ_LEN, tokens_per_shard=per_shard * SEQ_LEN)
        check_orders(directory, shards * per_shard)
        print(
            f"# {shards} shards x {per_shard} samples of {SEQ_LEN} uint16 tokens, "
            f"batch_size={BATCH}, read delay {delay * 1000:.0f} ms per shard, processing "
            f"{step * 1000:.2f} ms per batch ({processing * 1000:.0f} ms per shard); one "
            f"epoch, best of {args.repeat}; python {python_version()}",
            flush=True,
        )
        samples = shards * per_shard
        seconds = {c: measure(c, directory, delay, args.repeat, step, samples) for c in CONFIGS}
    ideal_sync = shards * (delay + processing)
    ideal_prefetch = delay + shards * max(delay, processing)
    rows = []
    for config, value in seconds.items():
        ideal: float | None = ideal_prefetch if config.shard_prefetch else None
        if config.shard_prefetch == 0 and not config.microbatch_prefetch:
            ideal = ideal_sync
        rows.append(
            {
                "path": PATH_NAMES[config.path],
                "prefetch": config.label,
                "seconds": value,
                "samples_per_s": samples / value,
                "ideal_seconds": ideal,
            }
        )
    lines = shards_rows(rows)
    verdicts = []
    for label, with_, without, judged in COMPARISONS:
        ratio = seconds[without] / seconds[with_]
        line = f"{label} ({with_.label} vs {without.label}): {ratio:.2f}x"
        if judged:
            line += (
                f" (ideal {ideal_sync / ideal_prefetch:.2f}x, target {TARGET}x) "
                f"— {mark(ratio >= TARGET)}"
            )
        verdicts.append(line)
    print_block(lines)
    print_block(verdicts)
    if not args.quick:
        conditions = (
            f"{shards} shards of {per_shard} samples of {SEQ_LEN} uint16 tokens, batch "
            f"{BATCH}, a simulated {delay * 1000:.0f} ms read and {processing * 1000:.0f} ms "
            f"of processing per shard, one epoch, best of {args.repeat}"
        )
        payload = {
            "command": "benchmarks/bench_shards.py",
            "conditions": conditions,
            "python": python_version(),
            "load_average": load_average(),
            "ideal_seconds": {"synchronous": ideal_sync, "prefetch": ideal_prefetch},
            "rows": rows,
            "verdicts": verdicts,
        }
        target = REPO_ROOT / args.json
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
