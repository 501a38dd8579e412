"""What an epoch's order leaves out, as methods: cut steps and quarantined samples.

:class:`CutOrder` gives :class:`~lightning_resumable_data.DistributedSampler` (and its
subclasses) :meth:`~CutOrder.skip_positions` and :meth:`~CutOrder.quarantine`, and the
order that remains (:meth:`~CutOrder.cuts`, :meth:`~CutOrder.epoch_size`); the sampler
reads its order through :func:`skipping` and saves ``skips`` and ``quarantine`` with its
state (:mod:`~lightning_resumable_data.samplers._distributed_state`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.skips import add_skip, skipped, to_base
from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.samplers._cuts import Quarantine, epoch_cuts, merge_ranges

__all__ = ["CutOrder", "skipping"]

Positions = Any  # an array of positions (or of dataset indices)


class CutOrder:
    """Cut positions and quarantined samples of a sampler's epochs (a mixin).

    The sampler provides ``epoch``, ``frontier``, ``epoch_length`` and ``_positions``.
    """

    #: Why this sampler cannot cut its order ("" if it can), for the error.
    CUTS: ClassVar[str] = ""
    epoch: int
    epoch_length: int
    skips: dict[int, list[tuple[int, int]]]
    quarantined: list[Quarantine]
    _cuts: dict[int, list[tuple[int, int]]]

    @property
    def frontier(self) -> int:
        """Global position up to which the live iteration has computed the order."""
        raise NotImplementedError  # the sampler's

    @property
    def consumed(self) -> int:
        """Global samples of the current epoch handed out."""
        raise NotImplementedError  # the sampler's

    def _restart(self, consumed: int) -> None:
        """Start the next iteration at ``consumed`` (an iteration going on is superseded)."""
        raise NotImplementedError  # the sampler's

    def _positions(self, epoch: int, indices: NDArray[np.int64]) -> NDArray[np.int64]:
        """Where dataset ``indices`` sit in ``epoch``'s whole order."""
        raise NotImplementedError  # the sampler's

    def skip_positions(self, epoch: int, start: int, stop: int) -> None:
        """Never read positions ``[start, stop)`` of ``epoch``'s order as it stands.

        Later positions move up (the epoch gets shorter); the skip is saved with the state,
        so a resume on any layout keeps it. The positions must not be computed yet.

        Example:
            >>> from lightning_resumable_data import DistributedSampler
            >>> sampler = DistributedSampler(range(8), num_replicas=1, rank=0, shuffle=False)
            >>> sampler.skip_positions(0, 2, 5)
            >>> list(sampler), len(sampler)
            ([0, 1, 5, 6, 7], 5)
        """
        self._can_cut(f"skip positions [{start}, {stop}) of epoch {epoch}")
        self.skips[epoch] = epoch_skips(self, epoch, start, stop)
        self._cuts.clear()

    def quarantine(self, indices: Iterable[int]) -> None:
        """Leave dataset ``indices`` out of every draw from the first position not handed out.

        Every other sample is still read once per epoch; the quarantine is saved with the
        state, so every resume keeps it. The next iteration continues from the position
        (one going on is superseded, as by ``load_state_dict``). Costs one inversion of
        each epoch's order.

        Example:
            >>> from lightning_resumable_data import DistributedSampler
            >>> sampler = DistributedSampler(range(6), num_replicas=1, rank=0, shuffle=False)
            >>> sampler.quarantine([1, 4])
            >>> list(sampler), len(sampler)
            ([0, 2, 3, 5], 4)
        """
        self._can_cut("quarantine samples")
        at = self.consumed
        self.quarantined.append(quarantine_from(self, indices))
        self._restart(at)  # the next iteration reads on from here, without them
        self._cuts.clear()

    def _can_cut(self, what: str) -> None:
        if self.CUTS:
            raise ValueError(
                f"Cannot {what}: cuts work for single and sharded datasets, not yet for a "
                f"{type(self).__name__} ({self.CUTS})."
            )

    def cuts(self, epoch: int) -> list[tuple[int, int]]:
        """The base ranges ``epoch``'s order leaves out (cut steps, quarantined samples)."""
        if epoch not in self._cuts:
            found = epoch_cuts(epoch, self.skips, self.quarantined, self._positions)
            extra = self._changed_cuts(epoch)
            self._cuts[epoch] = merge_ranges(found, extra) if extra else found
        return self._cuts[epoch]

    def _changed_cuts(self, epoch: int) -> list[tuple[int, int]]:
        """Base ranges of ``epoch`` that changes of the data leave out (none here)."""
        return []

    def base_length(self, epoch: int) -> int:
        """Positions of ``epoch``'s whole order, before its cuts."""
        return self.epoch_length

    def epoch_size(self, epoch: int | None = None) -> int:
        """Positions of an epoch's order that are read: its length less what is cut."""
        epoch = self.epoch if epoch is None else epoch
        return self.base_length(epoch) - skipped(self.cuts(epoch))


def epoch_skips(owner: CutOrder, epoch: int, start: int, stop: int) -> list[tuple[int, int]]:
    """``epoch``'s skipped ranges with positions ``[start, stop)`` of its order cut as well.

    Raises:
        ValueError: The positions are computed already, or not inside what the epoch reads.
    """
    epoch = check_non_negative_int("epoch", epoch)
    start, stop = check_non_negative_int("start", start), check_non_negative_int("stop", stop)
    size = owner.epoch_size(epoch)
    if epoch < owner.epoch or (epoch == owner.epoch and start < owner.frontier):
        raise ValueError(
            f"Cannot skip positions [{start}, {stop}) of epoch {epoch}: this sampler has "
            f"already computed epoch {owner.epoch} up to position {owner.frontier}. Skip "
            "before the data is read (a later start, or before the epoch begins)."
        )
    if not start < stop <= size:
        raise ValueError(
            f"Cannot skip positions [{start}, {stop}) of epoch {epoch}: a skip needs "
            f"start < stop <= {size} (the positions epoch {epoch} has left to read)."
        )
    return add_skip(owner.cuts(epoch), start, stop)


def quarantine_from(owner: CutOrder, indices: Iterable[int]) -> Quarantine:
    """A quarantine of dataset ``indices`` from the first position ``owner`` has not handed out.

    Raises:
        ValueError: No index, or an index outside the dataset.
    """
    wanted = sorted({int(i) for i in indices})
    length = owner.epoch_length
    if not wanted or wanted[0] < 0 or wanted[-1] >= length:
        raise ValueError(
            f"quarantine needs dataset indices in [0, {length}), got {wanted[:10]!r}"
            f"{'...' if len(wanted) > 10 else ''}."
        )
    epoch = owner.epoch
    start = int(to_base(np.array([owner.consumed], np.int64), owner.cuts(epoch))[0])
    return epoch, start, tuple(wanted)


def skipping(order: Callable[[Positions], Positions], ranges: list[tuple[int, int]]) -> Any:
    """``order`` read at the base positions of the positions of the order that remains."""
    return lambda positions: order(to_base(positions, ranges))
