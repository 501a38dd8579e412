"""Stride partition of an epoch's global order, with drop-last, wrap padding and resume.

An epoch of a dataset of ``n`` samples is a global order ``G`` (a permutation of
``[0, n)``). Its *padded* order is ``P[j] = G[j mod n]``: reading past ``n`` wraps around to
the start, exactly as ``torch.utils.data.DistributedSampler`` pads. Rank ``r`` of ``W`` reads
positions ``start + r, start + r + W, start + r + 2W, ...`` of ``P``, where ``start`` is the
number of global samples already consumed in this epoch. Every rank reads the same count:

* ``drop_last=False``: ``ceil((n - start) / W)`` (the last row is padded by wrapping around);
* ``drop_last=True``: ``floor((n - start) / W)`` (the ragged tail is dropped).

With ``start = 0`` this is torch's layout exactly. Because each step consumes a whole row of
``W`` positions, what all ranks consumed together is always a prefix of ``P``; a resume
under another world size ``W'`` just strides the remaining suffix over ``W'`` ranks, so every
sample of the epoch is still read exactly once (up to the ``< W'`` padded or dropped tail).

Example:
    >>> span = rank_span(10, num_replicas=4, rank=1, drop_last=False)
    >>> span, span_positions(span).tolist()
    (RankSpan(start=1, step=4, count=3), [1, 5, 9])
    >>> rank_span(10, num_replicas=3, rank=1, drop_last=True, consumed=4)
    RankSpan(start=5, step=3, count=2)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "RankSpan",
    "check_rank",
    "epoch_total_size",
    "rank_span",
    "samples_per_rank",
    "span_positions",
]


@dataclass(frozen=True, slots=True)
class RankSpan:
    """The arithmetic progression of padded-order positions that one rank reads.

    Attributes:
        start: Position of the rank's first sample.
        step: Distance between consecutive samples (the world size).
        count: Number of samples.
    """

    start: int
    step: int
    count: int


def check_rank(num_replicas: int, rank: int) -> None:
    """Raise ``ValueError`` unless ``num_replicas >= 1`` and ``0 <= rank < num_replicas``.

    Example:
        >>> check_rank(2, 1)
    """
    for name, value in (("num_replicas", num_replicas), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}={value!r} must be an int, got {type(value).__name__}.")
    if num_replicas < 1:
        raise ValueError(
            f"num_replicas={num_replicas} must be >= 1 (the data-parallel world size)."
        )
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"rank={rank} must be in [0, num_replicas) = [0, {num_replicas}); pass the "
            "data-parallel rank of this process."
        )


def samples_per_rank(remaining: int, num_replicas: int, drop_last: bool) -> int:
    """Samples each rank reads when ``remaining`` global samples are left in the epoch.

    Example:
        >>> samples_per_rank(10, 4, drop_last=False), samples_per_rank(10, 4, drop_last=True)
        (3, 2)
    """
    if remaining <= 0:
        return 0
    if drop_last:
        return remaining // num_replicas
    return -(-remaining // num_replicas)


def epoch_total_size(n: int, num_replicas: int, drop_last: bool) -> int:
    """Global samples in one epoch: torch's ``DistributedSampler.total_size``.

    Example:
        >>> epoch_total_size(10, 4, drop_last=False), epoch_total_size(10, 4, drop_last=True)
        (12, 8)
    """
    return samples_per_rank(n, num_replicas, drop_last) * num_replicas


def rank_span(n: int, num_replicas: int, rank: int, drop_last: bool, consumed: int = 0) -> RankSpan:
    """Return the padded-order positions rank ``rank`` reads after ``consumed`` samples.

    Args:
        n: Length of the global order (the dataset size).
        num_replicas: World size now (may differ from the one that consumed the prefix).
        rank: This rank, in ``[0, num_replicas)``.
        drop_last: Drop the ragged tail instead of padding it by wrapping around.
        consumed: Global samples of this epoch already consumed by all ranks together.

    Example:
        >>> rank_span(10, num_replicas=2, rank=0, drop_last=False, consumed=6)
        RankSpan(start=6, step=2, count=2)
    """
    check_rank(num_replicas, rank)
    if consumed < 0:
        raise ValueError(f"consumed={consumed} must be >= 0.")
    count = samples_per_rank(n - consumed, num_replicas, drop_last)
    return RankSpan(start=consumed + rank, step=num_replicas, count=count)


def span_positions(span: RankSpan, begin: int = 0, end: int | None = None) -> NDArray[np.int64]:
    """Positions of the span's samples ``begin`` (inclusive) to ``end`` (exclusive).

    Example:
        >>> span_positions(RankSpan(start=1, step=4, count=3), 1).tolist()
        [5, 9]
    """
    end = span.count if end is None else min(end, span.count)
    begin = min(max(begin, 0), end)
    return span.start + span.step * np.arange(begin, end, dtype=np.int64)
