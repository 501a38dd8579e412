"""Skipped stretches of an epoch's order: the order that remains, as positions (pure functions).

A skip removes a stretch of positions from an epoch's global order ``G``; the order that
remains, ``G'``, is ``G`` with those stretches cut out, so a position is still a prefix of
the order that is read (of ``G'``). Skips are held as sorted, disjoint, half-open ranges
``[start, stop)`` of positions of ``G`` (*base* positions); :func:`to_base` maps positions
of ``G'`` to the base positions they read, :func:`add_skip` cuts one more stretch, given in
positions of ``G'`` as it stands.

Example:
    >>> ranges = add_skip([], 4, 6)  # positions 4 and 5 of G are never read
    >>> to_base(np.arange(6), ranges).tolist()
    [0, 1, 2, 3, 6, 7]
    >>> add_skip(ranges, 3, 5)  # G' positions 3 and 4 are G's 3 and 6: one stretch
    [(3, 7)]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["add_skip", "check_ranges", "skipped", "to_base"]

Ranges = Sequence[tuple[int, int]]


def skipped(ranges: Ranges) -> int:
    """Positions the ranges remove.

    Example:
        >>> skipped([(2, 5), (9, 10)])
        4
    """
    return sum(stop - start for start, stop in ranges)


def to_base(positions: NDArray[np.int64], ranges: Ranges) -> NDArray[np.int64]:
    """The base positions that positions of the remaining order read (vectorised).

    Example:
        >>> to_base(np.array([0, 2, 3]), [(2, 4)]).tolist()
        [0, 4, 5]
    """
    if not ranges:
        return positions
    starts = np.array([start for start, _ in ranges], dtype=np.int64)
    lengths = np.array([stop - start for start, stop in ranges], dtype=np.int64)
    before = np.concatenate(([0], np.cumsum(lengths)))  # removed before each range
    remaining_starts = starts - before[:-1]  # where each range begins in the remaining order
    return positions + before[np.searchsorted(remaining_starts, positions, side="right")]


def add_skip(ranges: Ranges, start: int, stop: int) -> list[tuple[int, int]]:
    """The ranges with positions ``[start, stop)`` of the remaining order removed as well.

    Example:
        >>> add_skip([(10, 12)], 0, 2), add_skip([(10, 12)], 9, 11)
        ([(0, 2), (10, 12)], [(9, 13)])
    """
    if not 0 <= start < stop:
        raise ValueError(f"a skip must satisfy 0 <= start < stop, got [{start}, {stop}).")
    first, last = (int(p) for p in to_base(np.array([start, stop - 1], np.int64), ranges))
    # the remaining positions from start to stop - 1 are contiguous once the ranges between
    # them are counted as removed: one stretch of the base order, merged with its neighbours
    merged: list[tuple[int, int]] = []
    new = (first, last + 1)
    for begin, end in sorted([*ranges, new]):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def check_ranges(value: object, length: int, where: str) -> list[tuple[int, int]]:
    """``value`` as sorted disjoint ranges inside ``[0, length)``; a ``ValueError`` if not.

    Example:
        >>> check_ranges([[1, 3]], 10, "epoch 0")
        [(1, 3)]
    """
    problem = f"{where}: skipped ranges must be sorted, disjoint [start, stop) pairs with "
    if not isinstance(value, Iterable) or isinstance(value, (str, bytes)):
        raise ValueError(problem + f"0 <= start < stop <= {length}, got {value!r:.200}.")
    ranges: list[tuple[int, int]] = []
    for pair in value:
        if (
            not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            or not 0 <= pair[0] < pair[1] <= length
            or (ranges and pair[0] < ranges[-1][1])
        ):
            raise ValueError(problem + f"0 <= start < stop <= {length}, got {value!r:.200}.")
        ranges.append((int(pair[0]), int(pair[1])))
    return ranges
