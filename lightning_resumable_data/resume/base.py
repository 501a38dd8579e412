"""The one interface of a loader's resume strategies, and the layout they count in.

A :class:`~lightning_resumable_data.StatefulDataLoader` picks one strategy when it is built,
from its sampler (:func:`~lightning_resumable_data.resume.choose_strategy`), and delegates
to it the three things that differ between kinds of samplers: how a reading starts
(:meth:`ResumeStrategy.begin`), how a position is saved (:meth:`ResumeStrategy.save`) and
how one is restored (:meth:`ResumeStrategy.restore`). The loader itself only iterates and
counts batches (:class:`~lightning_resumable_data._progress.Progress`).
"""

from __future__ import annotations

import abc
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple

from lightning_resumable_data._progress import BatchPosition, CountingIterator, Progress
from lightning_resumable_data.resume.torchdata_state import TorchdataPosition
from lightning_resumable_data.state import make_state

__all__ = ["Layout", "Restored", "RestoredPosition", "ResumeMode", "ResumeStrategy"]

ResumeMode = Literal["position", "skip", "torchdata"]


@dataclass(frozen=True, slots=True)
class Layout:
    """The loader's layout: its state's kind, batch size, world size and ``drop_last``.

    Example:
        >>> Layout("StatefulDataLoader", batch_size=4, num_replicas=2, drop_last=False).step_samples
        8
    """

    kind: str
    batch_size: int  # samples per batch on one rank (1 for a custom batch sampler)
    num_replicas: int
    drop_last: bool

    @property
    def step_samples(self) -> int:
        """Global samples one batch on every rank consumes."""
        return self.batch_size * self.num_replicas


class RestoredPosition(NamedTuple):
    """The position a ``load_state_dict`` restored: epoch, consumed, and the saved step.

    ``step_samples`` is the global samples per batch of the layout that saved it (batch
    size x world size), so a trainer can check the position against its own saved batch
    count, whatever the layout now.
    """

    epoch: int
    consumed: int
    step_samples: int


class Restored(NamedTuple):
    """What a restore gives the loader: its new progress, and what a trainer may check.

    ``layout_change`` is (batches saved, the same position in batches of this layout) after
    a restore under another batch or world size.
    """

    progress: Progress
    position: RestoredPosition | None = None
    layout_change: tuple[int, int] | None = None


class ResumeStrategy(abc.ABC):
    """How a loader with a given kind of sampler begins a reading, saves and restores.

    Args:
        sampler: The sampler that orders the samples (``None`` for an iterable dataset).
        layout: The loader's layout.
        strict: Refuse a state saved under another configuration (``strict_resume``).
    """

    mode: ClassVar[ResumeMode]
    #: State keys this strategy needs beyond ``epoch``, ``batches_yielded``, ``batch_size``
    #: and ``num_replicas``, with their types.
    required: ClassVar[Mapping[str, type]] = {}
    #: Whether the loader seeds its workers from (seed, epoch, rank) for this strategy.
    seeds_workers: ClassVar[bool] = True

    def __init__(self, sampler: Any, layout: Layout, strict: bool) -> None:
        self.sampler = sampler
        self.layout = layout
        self.strict = strict
        #: Global samples every epoch ends at (a trainer's limit); position mode only.
        self.epoch_limit: int | None = None
        #: Where the batches handed out and not yet trained begin; position mode only.
        self.handed: deque[BatchPosition] | None = None

    def begin(self, progress: Progress, iterator: CountingIterator) -> None:
        """Set the sampler to read ``progress``'s epoch from its position."""
        if hasattr(self.sampler, "lock_epoch"):
            self.sampler.lock_epoch(progress.epoch)  # a trainer's set_epoch cannot move it now
        elif hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(progress.epoch)

    def consumed(self, progress: Progress, batches: int) -> int:
        """Global samples consumed after ``batches`` batches of ``progress``'s epoch."""
        if progress.resume_at is not None:  # restored, not iterated yet
            return progress.resume_at
        steps = batches - progress.base_batches
        return progress.base_consumed + steps * self.layout.step_samples

    def ends_epoch(self, consumed: int) -> bool:
        """Whether an epoch has nothing left after ``consumed`` global samples."""
        return False

    def save(
        self,
        progress: Progress,
        batches: int,
        fingerprint: Mapping[str, Any],
        current: bool = True,
    ) -> dict[str, Any]:
        """The state after ``batches`` batches of ``progress``'s epoch.

        ``current``: ``progress`` is the loader's live record, not the epoch before it.
        """
        position = self.position(progress, batches, current)
        return make_state(self.layout.kind, fingerprint, **position)

    def position(self, progress: Progress, batches: int, current: bool = True) -> dict[str, Any]:
        """The state's position entries (the common ones; a strategy adds its own)."""
        return self.entries(progress.epoch, batches)

    def entries(self, epoch: int, batches: int) -> dict[str, Any]:
        """The entries every state has: the epoch, its batches, and the layout."""
        return {
            "epoch": epoch,
            "batches_yielded": batches,
            "batch_size": self.layout.batch_size,
            "num_replicas": self.layout.num_replicas,
        }

    def torchdata_entries(self, position: TorchdataPosition, epoch: int) -> dict[str, Any]:
        """The entries of a torchdata state's position, in the epoch the sampler is set to.

        torchdata's states hold no epoch: the sampler's (else the loader's ``epoch``) is the
        one the torchdata job was reading; a finished pass means the next epoch's start.
        """
        epoch = int(getattr(self.sampler, "epoch", epoch))
        if position.finished:
            return self.entries(epoch + 1, 0)
        return self.entries(epoch, position.batches)

    @abc.abstractmethod
    def restore(self, state: dict[str, Any]) -> Restored:
        """The progress a checked state restores (its keys and types are checked already)."""

    @abc.abstractmethod
    def restore_torchdata(
        self, state: dict[str, Any], position: TorchdataPosition, epoch: int
    ) -> Restored:
        """The progress a state of torchdata's own loader restores (``epoch``: the loader's)."""
