"""A rank's share of an epoch's global order, chunk by chunk and batch by batch (pure functions).

What :class:`~lightning_resumable_data.samplers.distributed.DistributedSampler` iterates:
the epoch's order as a lookup from positions to dataset indices (:func:`epoch_order`),
this rank's positions in growing chunks (:func:`span_arrays`), and those chunks sliced into
batches (:func:`array_batches`). The sampler keeps the position; these only compute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.partition import RankSpan, span_positions
from lightning_resumable_data.index.permutation import (
    PermutationAlgorithm,
    feistel_keys,
    feistel_permute,
    randperm,
)
from lightning_resumable_data.randomness import KeyedBatch
from lightning_resumable_data.samplers._arguments import SEED_LIMIT
from lightning_resumable_data.samplers._chunks import BatchCount

__all__ = ["Order", "array_batches", "epoch_order", "span_arrays"]

Order = Callable[[NDArray[np.int64]], NDArray[np.integer]]
Arrays = Iterator[tuple[NDArray[np.int64], NDArray[np.integer]]]


def epoch_order(
    shuffle: bool, algorithm: PermutationAlgorithm, length: int, seed: int, epoch: int
) -> Order:
    """The global order of ``epoch`` as a lookup from positions to dataset indices.

    Example:
        >>> epoch_order(False, "randperm", 5, 0, 0)(np.arange(3)).tolist()
        [0, 1, 2]
    """
    if not shuffle:
        return lambda positions: positions
    if algorithm == "randperm":
        permutation = randperm(length, (seed + epoch) % SEED_LIMIT)
        return lambda positions: permutation[positions]
    keys = feistel_keys(seed % SEED_LIMIT, epoch)
    return lambda positions: feistel_permute(positions, length, keys)


def span_arrays(
    span: RankSpan,
    total: int,
    order: Order,
    length: int,
    sizes: Iterator[int],
    count: BatchCount | None,
) -> Arrays:
    """Yield (positions, indices) of the first ``total`` samples of ``span``, a chunk at a time.

    Chunk ``k`` holds ``next(sizes)`` samples; ``count.produced`` (if given) grows by each.

    Example:
        >>> span = RankSpan(start=1, step=2, count=3)
        >>> [p.tolist() for p, _ in span_arrays(span, 3, lambda p: p, 6, iter([2, 2]), None)]
        [[1, 3], [5]]
    """
    begin = 0
    while begin < total:
        end = min(begin + next(sizes), total)
        positions = span_positions(span, begin, end)
        if count is not None:
            count.produced += end - begin
        yield positions, order(positions % length)
        begin = end


def array_batches(
    arrays: Arrays,
    count: BatchCount,
    batch_size: int,
    drop_last: bool,
    keys: tuple[int, int] | None,
    step: int,
) -> Iterator[list[int]]:
    """Slice chunks of (positions, indices) into batches; ``count.yielded`` grows by each.

    ``keys`` is ``(seed, epoch)`` to yield :class:`~lightning_resumable_data.KeyedBatch`
    batches, ``None`` for plain lists; ``step`` is the distance between a rank's positions.

    Example:
        >>> arrays = iter([(np.arange(3), np.array([5, 6, 7]))])
        >>> list(array_batches(arrays, BatchCount(), 2, False, None, 1))
        [[5, 6], [7]]
    """
    for positions, indices in arrays:
        values: list[int] = indices.tolist()
        first = int(positions[0])
        for offset in range(0, len(values), batch_size):
            batch = values[offset : offset + batch_size]
            if drop_last and len(batch) < batch_size:
                return
            count.yielded += len(batch)
            if keys is not None:
                seed, epoch = keys
                yield KeyedBatch(
                    batch, seed=seed, epoch=epoch, start=first + offset * step, step=step
                )
            else:
                yield batch
