"""Benchmark the run-time position check: its cost per training batch.

Run from the repository root::

    .venv/bin/python benchmarks/bench_guard.py            # a few seconds

``ResumableDataCallback(verify="raise")`` (the default) does, at every training batch, what
:func:`check_once` does: take where the batch the loader handed out begins
(``StatefulDataLoader.take_handed``), read the trainer's epoch, step and batch index, and
compare with the position they imply (``PositionGuard.check``). Measured here on a real
``Trainer`` (its counters are read through the same properties) and a real loader, for
``--calls`` batches, best of ``--repeat`` blocks, CPU time per batch; and the loader's own
share: recording each handed-out batch's position inside ``CountingIterator.__next__``
(over a trivial inner iterator, with and without the record, in alternating blocks).
Target: under 2 us a batch. Results go to ``--json`` (default
``benchmarks/results/guard.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import lightning.pytorch as pl

from lightning_resumable_data import DistributedSampler, StatefulDataLoader
from lightning_resumable_data._progress import BatchPosition
from lightning_resumable_data.lightning.guard import PositionGuard


def check_once(
    guard: PositionGuard, loader: StatefulDataLoader, trainer: pl.Trainer, batch: int
) -> None:
    """What the callback does per batch (the loader's queue refilled to one entry)."""
    queue = loader._strategy.handed
    assert queue is not None  # a position sampler's loader
    queue.append(BatchPosition(0, batch * loader.samples_per_step))
    handed = loader.take_handed()
    epoch, step_samples = trainer.current_epoch, loader.samples_per_step
    if handed is not None and not guard.matches(handed, epoch, batch, step_samples):
        raise AssertionError("the check failed on a matching position")


def guard_cost(calls: int, repeat: int) -> float:
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    loader = StatefulDataLoader(
        range(10**6), batch_size=32, sampler=DistributedSampler(range(10**6), 1, 0)
    )
    guard = PositionGuard("raise")
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for batch in range(calls):
            check_once(guard, loader, trainer, batch)
        best = min(best, (time.process_time() - start) / calls)
    return best


def record_cost(calls: int, repeat: int) -> float:
    """Per-batch cost of recording positions in ``CountingIterator.__next__``.

    The iterator runs over a trivial inner iterator, with the record and without it, in
    alternating blocks; the difference of the best blocks is the record's cost.
    """
    from collections import deque

    from lightning_resumable_data._progress import CountingIterator, Progress

    def block(record: bool) -> float:
        progress = Progress()
        handed: deque[BatchPosition] = deque(maxlen=64)
        iterator = CountingIterator(progress, lambda it: iter(range(calls)), None, 0)
        if record:
            iterator.handed, iterator.step_samples = handed, 32
        start = time.process_time()
        for _ in iterator:
            handed.clear()
        return time.process_time() - start

    with_record, without = float("inf"), float("inf")
    for _ in range(repeat):
        with_record = min(with_record, block(True))
        without = min(without, block(False))
    return max(0.0, with_record - without) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/guard.json"))
    args = parser.parse_args()
    check = guard_cost(args.calls, args.repeat)
    record = record_cost(args.calls, args.repeat)
    print(f"check per batch:            {check * 1e6:.2f} us")
    print(f"position record per batch:  {record * 1e6:.2f} us")
    print(f"total per batch:            {(check + record) * 1e6:.2f} us (target < 2 us)")
    result = {"check_us": check * 1e6, "record_us": record * 1e6, "target_us": 2.0}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
