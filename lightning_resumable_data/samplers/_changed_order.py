"""An epoch order that follows the data changes recorded in a sampler's state (a mixin).

:class:`ChangedOrder` gives :class:`~lightning_resumable_data.DistributedSampler` the length
each epoch's usual order has (:meth:`~ChangedOrder.start_length`), the base length with what
a change appended (:meth:`~ChangedOrder.base_length`), the order and its inverse over those
segments, and the positions the changes leave out; :meth:`~ChangedOrder.apply_change` records
a new change at a resume (see :mod:`~lightning_resumable_data.index.changes`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.changes import (
    DataChange,
    Segment,
    base_length,
    epoch_segments,
    removal_cuts,
    segment_order,
    segment_positions,
    start_length,
)
from lightning_resumable_data.index.inverse import order_positions
from lightning_resumable_data.index.partition import samples_per_rank
from lightning_resumable_data.index.permutation import PermutationAlgorithm
from lightning_resumable_data.index.skips import skipped, to_base
from lightning_resumable_data.samplers._cut_order import CutOrder
from lightning_resumable_data.samplers._cuts import merge_ranges, ranges_of
from lightning_resumable_data.samplers._rank_order import Order, epoch_order
from lightning_resumable_data.samplers.data_changes import (
    ChangeReport,
    DataChangePolicy,
    decide_change,
)

__all__ = ["ChangedOrder"]

_log = logging.getLogger("lightning_resumable_data")


class ChangedOrder(CutOrder):
    """Epoch orders over data that changed between a checkpoint and its resume (a mixin).

    The sampler provides ``shuffle``, ``algorithm``, ``seed``, ``dataset_length`` and
    ``rank`` besides what :class:`CutOrder` needs.
    """

    shuffle: bool
    algorithm: PermutationAlgorithm
    seed: int
    dataset_length: int
    rank: int
    num_replicas: int
    drop_last: bool
    changes: list[DataChange]
    data_changes: DataChangePolicy | None
    last_change: ChangeReport | None
    epoch_length: int  # what epochs after the last change read (the saved one while loading)

    def start_length(self, epoch: int) -> int:
        """The dataset length of ``epoch``'s usual order (before anything appended to it)."""
        return start_length(self.changes, epoch, self.epoch_length)

    def segments(self, epoch: int) -> list[Segment]:
        """``epoch``'s base order: its usual order, then what changes appended."""
        return _segments(tuple(self.changes), epoch, self.start_length(epoch), self.seed)

    def base_length(self, epoch: int) -> int:
        """Positions of ``epoch``'s base order (its cuts not taken off)."""
        if not self.changes:
            return self.epoch_length
        return base_length(self.segments(epoch))

    def _usual(self, epoch: int) -> Order:
        args = (self.shuffle, self.algorithm, self.start_length(epoch), self.seed, epoch)
        return epoch_order(*args)

    def _order(self, epoch: int) -> Order:
        """The base order of ``epoch`` as a lookup from positions to dataset indices."""
        if not self.changes:
            return self._usual(epoch)
        return segment_order(self.segments(epoch), self._usual(epoch), self.shuffle)

    def _positions(self, epoch: int, indices: NDArray[np.int64]) -> NDArray[np.int64]:
        """Every base position of ``epoch``'s order at which dataset ``indices`` sit."""
        return self._segment_positions(epoch, self.segments(epoch), indices)

    def _segment_positions(
        self, epoch: int, segments: Sequence[Segment], indices: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        args = (self.shuffle, self.algorithm, segments[0].length, self.seed, epoch)
        if len(segments) == 1:
            inside = np.asarray(indices, dtype=np.int64)
            return order_positions(*args, inside[inside < segments[0].length])

        def usual(found: NDArray[np.int64]) -> NDArray[np.int64]:
            return order_positions(*args, found)

        return segment_positions(segments, usual, self.shuffle, indices)

    def _changed_cuts(self, epoch: int) -> list[tuple[int, int]]:
        """The base ranges ``epoch``'s changes leave out."""
        if not any(c.epoch == epoch and c.position for c in self.changes):
            return []
        segments = self.segments(epoch)

        def positions_of(before: Sequence[Segment], indices: NDArray[np.int64]) -> Any:
            return self._segment_positions(epoch, before, indices)

        ranges, arrays = removal_cuts(self.changes, epoch, segments, positions_of)
        return merge_ranges(ranges, *(ranges_of(a) for a in arrays))

    def apply_change(
        self, kind: str, epoch: int, consumed: int, saved_length: int, changed_files: list[str]
    ) -> None:
        """Record the change from ``saved_length`` (and ``changed_files``) at a resume.

        ``consumed`` is the resume position under the saved data; it stays the position
        under the new data (the same samples are behind it, and what is cut comes after).

        Raises:
            StateMismatchError: The policy refuses the change.
        """
        cuts = self.cuts(epoch)
        unread = self.base_length(epoch) - skipped(cuts) - consumed
        base = int(to_base(np.array([consumed], np.int64), cuts)[0])
        args = (epoch, base, saved_length, self.dataset_length, changed_files)
        change = decide_change(self.data_changes, kind, *args)
        self.epoch_length = self.dataset_length
        if change is None:
            return
        self.changes.append(change)
        self._cuts.clear()
        left = self.base_length(epoch) - skipped(self.cuts(epoch)) - consumed
        if change.position == 0:  # the epoch reads the new data's order from its start
            counts = (unread, unread, left)
        else:
            counts = (unread, unread + change.added - left, change.added)
        dropped = left - samples_per_rank(left, self.num_replicas, self.drop_last) * (
            self.num_replicas
        )
        report = ChangeReport(change, *counts, consumed, max(0, dropped))
        logged = report == self.last_change  # Lightning loads a state twice: said once
        self.last_change = report
        if self.rank == 0 and not logged:
            _log.info(report.describe())


@functools.lru_cache(maxsize=64)
def _segments(
    changes: tuple[DataChange, ...], epoch: int, first_length: int, seed: int
) -> list[Segment]:
    """:func:`epoch_segments`, cached: a loader asks for the epoch's size at every batch."""
    return epoch_segments(changes, epoch, first_length, seed)
