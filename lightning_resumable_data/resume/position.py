"""Resuming a position sampler: one global position, O(1) and elastic.

The state holds the global samples consumed in the epoch (``batches x batch size x world
size``); a restore hands the sampler its state at that position, so any world size or batch
size continues right after it (the rest of the epoch is strided over the new ranks).
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from lightning_resumable_data._batching import PositionBatchSampler, PositionSampler
from lightning_resumable_data._progress import CountingIterator, Progress
from lightning_resumable_data.resume.base import (
    Layout,
    Restored,
    RestoredPosition,
    ResumeStrategy,
)
from lightning_resumable_data.resume.torchdata_state import TorchdataPosition
from lightning_resumable_data.state import ResumeWarning, StateMismatchError

__all__ = ["PositionResume"]

_HANDED: Final = 64  # batches a trainer's fetcher may run ahead of training, at most


class PositionResume(ResumeStrategy):
    """The strategy of a :class:`~lightning_resumable_data._batching.PositionSampler`.

    Args:
        sampler: The position sampler.
        layout: The loader's layout.
        strict: Refuse a state saved under another configuration; otherwise only its epoch
            and position are restored, with a :class:`~lightning_resumable_data.ResumeWarning`.
        batch_sampler: The loader's batch sampler; a :class:`PositionBatchSampler` is told
            where this rank's share of a shorter (trainer-limited) epoch ends.

    Example:
        >>> from lightning_resumable_data import DistributedSampler
        >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=False)
        >>> strategy = PositionResume(sampler, Layout("demo", 2, 2, False), strict=True)
        >>> state = strategy.save(Progress(epoch=0, batches_yielded=1), 1, {})
        >>> state["consumed"], strategy.ends_epoch(8), strategy.ends_epoch(10)
        (4, False, True)
    """

    mode: ClassVar = "position"
    required: ClassVar[Mapping[str, type]] = {"consumed": int, "sampler": dict}
    sampler: PositionSampler

    def __init__(
        self,
        sampler: PositionSampler,
        layout: Layout,
        strict: bool,
        batch_sampler: object = None,
    ) -> None:
        super().__init__(sampler, layout, strict)
        self.batch_sampler = batch_sampler
        self.handed = collections.deque(maxlen=_HANDED)

    # -- counting --------------------------------------------------------------------------

    def batches_left(self, consumed: int) -> int:
        """Batches of this layout left in the epoch after ``consumed`` global samples."""
        if self.epoch_limit is not None and consumed >= self.epoch_limit:
            return 0
        left, size = self.sampler.samples_left(consumed), self.layout.batch_size
        return left // size if self.layout.drop_last else -(-left // size)

    def ends_epoch(self, consumed: int) -> bool:
        """Whether the epoch's samples, or the trainer's epoch limit, end at ``consumed``."""
        return self.batches_left(consumed) == 0

    def _rank_samples_before_limit(self, consumed: int) -> int | None:
        """Samples of this rank in ``[consumed, epoch limit)``; ``None`` without a limit."""
        limit, replicas = self.epoch_limit, self.layout.num_replicas
        if limit is None or limit >= consumed + self.sampler.samples_left(consumed) * replicas:
            return None
        rank = int(getattr(self.sampler, "rank", 0))
        return max(0, -(-(limit - consumed - rank) // replicas))

    # -- reading ---------------------------------------------------------------------------

    def begin(self, progress: Progress, iterator: CountingIterator) -> None:
        """Apply a pending restore, note where this reading begins, and cap a short epoch."""
        super().begin(progress, iterator)
        sampler = self.sampler
        if progress.resume_at is not None:  # the loader, not the sampler, owns a restore
            sampler.load_state_dict(sampler.state_at(progress.epoch, progress.resume_at))
            progress.resume_at = None
        progress.base_consumed, progress.base_batches = sampler.consumed, progress.batches_yielded
        if isinstance(self.batch_sampler, PositionBatchSampler):
            self.batch_sampler.limit = self._rank_samples_before_limit(progress.base_consumed)
        iterator.handed, iterator.step_samples = self.handed, self.layout.step_samples

    # -- saving ----------------------------------------------------------------------------

    def position(self, progress: Progress, batches: int, current: bool = True) -> dict[str, Any]:
        """The common entries plus ``consumed`` and the sampler's state there.

        A short last batch counts less than a full one: the count is capped at the epoch's
        end, known from where this reading began (not from the sampler's live state, which a
        trainer's own ``set_epoch`` may have moved). At the epoch's end, the position is the
        next epoch's start.
        """
        position = super().position(progress, batches)
        base = progress.base_consumed
        end = base + self.sampler.samples_left(base) * self.layout.num_replicas
        consumed = min(self.consumed(progress, batches), end)
        if self.epoch_limit is not None:
            consumed = min(consumed, max(self.epoch_limit, base))
        if self.batches_left(consumed) == 0:  # the epoch is over: say so
            position.update(epoch=progress.epoch + 1, batches_yielded=0)
            consumed = 0
        position["consumed"] = consumed
        position["sampler"] = self.sampler.state_at(position["epoch"], consumed)
        return position

    # -- restoring -------------------------------------------------------------------------

    def restore(self, state: dict[str, Any]) -> Restored:
        """Check the state's sampler part against its position and hand it to the sampler."""
        epoch, consumed, saved = state["epoch"], state["consumed"], state["sampler"]
        if saved.get("consumed") != consumed or saved.get("epoch") != epoch:
            raise StateMismatchError(
                f"Cannot load this state into {self.layout.kind}: its position (epoch "
                f"{epoch}, consumed {consumed}) and its sampler's (epoch "
                f"{saved.get('epoch')!r}, consumed {saved.get('consumed')!r}) disagree. The "
                "state is corrupted."
            )
        try:
            self.sampler.load_state_dict(saved)  # validates its fingerprint first
        except StateMismatchError as error:
            if self.strict:
                raise
            warnings.warn(
                f"Resuming under a changed configuration (strict_resume=False): {error} "
                "Only the epoch and position are restored.",
                ResumeWarning,
                stacklevel=3,
            )
        if hasattr(self.sampler, "lock_epoch"):  # the loader owns the restored epoch: a
            self.sampler.lock_epoch(epoch)  # trainer's set_epoch cannot discard it
        progress = Progress(epoch=epoch, batches_yielded=state["batches_yielded"])
        progress.resume_at = progress.base_consumed = consumed
        layout = self.layout
        change = None
        if (state["batch_size"], state["num_replicas"]) != (layout.batch_size, layout.num_replicas):
            # the position is global; the batches done are restated in this layout
            progress.batches_yielded = consumed // layout.step_samples
            change = (state["batches_yielded"], progress.batches_yielded)
        progress.base_batches = progress.batches_yielded
        saved_step = state["batch_size"] * state["num_replicas"]
        return Restored(progress, RestoredPosition(epoch, consumed, saved_step), change)

    def restore_torchdata(
        self, state: dict[str, Any], position: TorchdataPosition, epoch: int
    ) -> Restored:
        """A torchdata state's batch count, as a position in the sampler's epoch."""
        ours = self.torchdata_entries(position, epoch)
        step, replicas = self.layout.step_samples, self.layout.num_replicas
        consumed = min(ours["batches_yielded"] * step, self.sampler.samples_left(0) * replicas)
        if consumed and self.batches_left(consumed) == 0:  # the epoch is over
            ours.update(epoch=ours["epoch"] + 1, batches_yielded=0)
            consumed = 0
        ours["consumed"] = consumed
        ours["sampler"] = self.sampler.state_at(ours["epoch"], consumed)
        return self.restore(ours)
