"""What an epoch's order leaves out: cut steps and quarantined samples, as base ranges.

A sampler's order for an epoch is its whole order less its *cuts*: the ranges of
positions cut by :meth:`~lightning_resumable_data.DistributedSampler.skip_positions`
(held per epoch) and the positions of quarantined samples
(:meth:`~lightning_resumable_data.DistributedSampler.quarantine`: dataset indices left out
of every draw from a position on). :func:`epoch_cuts` merges both into sorted, disjoint
base ranges, which :mod:`~lightning_resumable_data.index.skips` reads the order through.

Example:
    >>> merge_ranges([(2, 4)], ranges_of(np.array([4, 5, 9])))
    [(2, 6), (9, 10)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Quarantine",
    "check_quarantine",
    "epoch_cuts",
    "merge_ranges",
    "quarantine_state",
    "ranges_of",
]

Ranges = list[tuple[int, int]]
Quarantine = tuple[int, int, tuple[int, ...]]  # from (epoch, base position): indices left out


def ranges_of(positions: NDArray[np.int64]) -> Ranges:
    """Sorted positions as ranges of consecutive ones (vectorised).

    Example:
        >>> ranges_of(np.array([7, 1, 2, 3]))
        [(1, 4), (7, 8)]
    """
    if not positions.size:
        return []
    ordered = np.unique(positions)
    breaks = np.flatnonzero(np.diff(ordered) != 1) + 1
    starts = ordered[np.concatenate(([0], breaks))]
    stops = ordered[np.concatenate((breaks - 1, [ordered.size - 1]))] + 1
    return list(zip(starts.tolist(), stops.tolist(), strict=True))


def merge_ranges(*parts: Iterable[tuple[int, int]]) -> Ranges:
    """The union of ranges, as sorted disjoint ranges (touching ones merged)."""
    merged: Ranges = []
    for start, stop in sorted(r for part in parts for r in part):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((int(start), int(stop)))
    return merged


def epoch_cuts(
    epoch: int,
    skips: Mapping[int, Sequence[tuple[int, int]]],
    quarantine: Sequence[Quarantine],
    positions_of: Callable[[int, NDArray[np.int64]], NDArray[np.int64]],
) -> Ranges:
    """``epoch``'s cut base ranges: its skipped ranges and its quarantined samples' positions.

    A quarantine from ``(e, p)`` leaves its samples out of epoch ``e`` at positions ``>= p``
    (what came before was read) and out of every later epoch.
    """
    found: list[NDArray[np.int64]] = []
    for since, position, indices in quarantine:
        if epoch < since:
            continue
        at = positions_of(epoch, np.asarray(indices, dtype=np.int64))
        found.append(at[at >= position] if epoch == since else at)
    left_out = ranges_of(np.concatenate(found)) if found else []
    return merge_ranges(skips.get(epoch, ()), left_out)


def quarantine_state(quarantine: Sequence[Quarantine]) -> list[list[Any]]:
    """The quarantine as plain lists: ``[[epoch, position, [index, ...]], ...]``."""
    return [[epoch, position, list(indices)] for epoch, position, indices in quarantine]


def check_quarantine(value: object, length: int) -> list[Quarantine]:
    """A saved quarantine, checked; a ``ValueError`` says what is wrong.

    Example:
        >>> check_quarantine([[0, 4, [1, 2]]], 10)
        [(0, 4, (1, 2))]
    """
    entries: list[Quarantine] = []
    items: list[Any] = value if isinstance(value, list) else [value]
    for entry in items:
        ok = isinstance(entry, (list, tuple)) and len(entry) == 3
        if ok:
            epoch, position, indices = entry
            ok = (
                all(isinstance(v, int) and v >= 0 for v in (epoch, position))
                and isinstance(indices, (list, tuple))
                and all(isinstance(i, int) and 0 <= i < length for i in indices)
            )
        if not ok:
            raise ValueError(
                f"a quarantine entry must be [epoch, position, [dataset indices in [0, "
                f"{length})]], got {entry!r:.200}"
            )
        entries.append((int(entry[0]), int(entry[1]), tuple(int(i) for i in entry[2])))
    return entries
