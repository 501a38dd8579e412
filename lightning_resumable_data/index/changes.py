"""Data that changed between a checkpoint and its resume: the epoch orders that follow (pure).

A change is recorded where it took effect: ``(epoch, position)``, a base position of that
epoch's order (see :mod:`~lightning_resumable_data.index.skips`). The dataset had
``old_length`` samples before it and ``new_length`` after it. Within that epoch:

* positions before ``position`` were read under the old order, as they were;
* dataset indices ``>= removed_from`` of the order so far are never read from ``position``
  on (a shrink removes ``[new_length, old_length)``; a replacement removes everything);
* dataset indices ``[added_start, added_stop)`` are appended to the epoch's order, in a
  keyed permutation of their own: read once, after every sample of the order before them.

Later epochs read the ``new_length`` samples in the usual order. A change at position 0
needs none of this: that epoch already has the new order.

The order of an epoch is so a list of *segments*: the usual order of the length the epoch
started with, then one segment per appended range. :func:`segment_order` reads it,
:func:`segment_positions` inverts it, and :func:`removal_cuts` gives the base positions a
change leaves out.

Example:
    >>> grow = DataChange(0, 4, 6, 9, added_start=6, added_stop=9, removed_from=6)
    >>> segments = epoch_segments([grow], 0, 6)
    >>> [(s.offset, s.length, s.first_index) for s in segments]
    [(0, 6, 0), (6, 3, 6)]
    >>> start_length([grow], 1, 6)  # the next epoch reads all 9
    9
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.inverse import feistel_inverse
from lightning_resumable_data.index.keys import key_sequence
from lightning_resumable_data.index.permutation import FEISTEL_ROUNDS, feistel_permute

__all__ = [
    "DataChange",
    "Segment",
    "base_length",
    "epoch_segments",
    "removal_cuts",
    "segment_order",
    "segment_positions",
    "start_length",
]

_ADDED_STREAM: Final = 0x41444444  # "ADDD": the order of a range appended mid-epoch

Positions = NDArray[np.int64]
Lookup = Callable[[Positions], NDArray[np.integer]]  # the epoch's usual order
Inverse = Callable[[Positions], Positions]  # its inverse, for indices of that length


class DataChange(NamedTuple):
    """One change of the dataset, where it took effect (all plain ints; see the module)."""

    epoch: int
    position: int  # a base position of ``epoch``'s order
    old_length: int
    new_length: int
    added_start: int  # dataset indices appended to this epoch, [added_start, added_stop)
    added_stop: int
    removed_from: int  # dataset indices >= this are left out from ``position`` on

    @property
    def added(self) -> int:
        """Samples appended to the epoch's order."""
        return self.added_stop - self.added_start


class Segment(NamedTuple):
    """A stretch of an epoch's base order: ``length`` positions from ``offset``.

    Segment 0 is the usual order of the epoch's starting length (``key`` is ``None``);
    an appended one reads ``first_index + permutation(j)`` under its own ``key``.
    """

    offset: int
    length: int
    first_index: int
    key: NDArray[np.uint64] | None


def start_length(changes: Sequence[DataChange], epoch: int, length_now: int) -> int:
    """The dataset length ``epoch``'s usual order (its segment 0) has.

    That of the last change before the epoch (or at its first position); before any change,
    the first change's old length; without changes, ``length_now``.
    """
    length = changes[0].old_length if changes else length_now
    for change in changes:
        if change.epoch < epoch or (change.epoch == epoch and change.position == 0):
            length = change.new_length
    return length


def epoch_segments(
    changes: Sequence[DataChange], epoch: int, first_length: int, seed: int = 0
) -> list[Segment]:
    """The segments of ``epoch``'s base order: its usual order, then each appended range."""
    segments = [Segment(0, first_length, 0, None)]
    for number, change in enumerate(changes):
        if change.epoch == epoch and change.position > 0 and change.added > 0:
            offset = segments[-1].offset + segments[-1].length
            words = key_sequence(_ADDED_STREAM, seed, epoch, number, change.added_start)
            key = words.generate_state(FEISTEL_ROUNDS, np.uint64).astype(np.uint64)
            segments.append(Segment(offset, change.added, change.added_start, key))
    return segments


def base_length(segments: Sequence[Segment]) -> int:
    """Positions of the base order the segments make up."""
    return segments[-1].offset + segments[-1].length


def segment_order(segments: Sequence[Segment], usual: Lookup, shuffle: bool) -> Lookup:
    """The base order over ``segments``: positions to dataset indices (vectorised)."""
    if len(segments) == 1:
        return usual
    starts = np.array([s.offset for s in segments], dtype=np.int64)

    def order(positions: Positions) -> NDArray[np.integer]:
        positions = np.asarray(positions, dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        out = np.empty(positions.shape, dtype=np.int64)
        for number, segment in enumerate(segments):
            mask = which == number
            if not mask.any():
                continue
            local = positions[mask] - segment.offset
            if segment.key is None:
                out[mask] = usual(local)
            elif shuffle:
                out[mask] = segment.first_index + feistel_permute(
                    local, segment.length, segment.key
                )
            else:
                out[mask] = segment.first_index + local
        return out

    return order


def segment_positions(
    segments: Sequence[Segment], usual: Inverse, shuffle: bool, indices: Positions
) -> Positions:
    """Every base position at which dataset ``indices`` sit in the segments' order.

    An index can sit in more than one segment (removed by a shrink, then added again).
    """
    wanted = np.asarray(indices, dtype=np.int64).reshape(-1)
    found: list[Positions] = []
    for segment in segments:
        first, stop = segment.first_index, segment.first_index + segment.length
        inside = wanted[(wanted >= first) & (wanted < stop)] - first
        if not inside.size:
            continue
        if segment.key is None:
            local = usual(inside)
        elif shuffle:
            local = feistel_inverse(inside, segment.length, segment.key)
        else:
            local = inside
        found.append(np.asarray(local, dtype=np.int64) + segment.offset)
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def removal_cuts(
    changes: Sequence[DataChange],
    epoch: int,
    segments: Sequence[Segment],
    positions_of: Callable[[Sequence[Segment], Positions], Positions],
) -> tuple[list[tuple[int, int]], list[Positions]]:
    """Base positions of ``epoch`` that its changes leave out: ranges, and arrays to merge.

    A change removes its indices ``>= removed_from`` from its position on, in the segments
    that existed when it took effect (those appended later are new data). A replacement
    (``removed_from == 0``) cuts one range and costs nothing; a shrink inverts the order at
    each removed index (O(removed)).
    """
    ranges: list[tuple[int, int]] = []
    arrays: list[Positions] = []
    appended = 0
    for change in changes:
        if change.epoch != epoch or change.position == 0:
            continue
        before = segments[: 1 + appended]
        end = base_length(before)
        if change.removed_from == 0 and change.position < end:
            ranges.append((change.position, end))
        elif change.removed_from < change.old_length:
            highest = max(s.first_index + s.length for s in before)
            removed = np.arange(change.removed_from, highest, dtype=np.int64)
            at = positions_of(before, removed)
            arrays.append(at[at >= change.position])
        appended += change.added > 0
    return ranges, arrays
