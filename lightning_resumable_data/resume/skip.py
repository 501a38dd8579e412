"""Resuming a skippable sampler: the batches yielded, replayed by ``set_skip``.

For samplers that can start an epoch after some samples (``set_skip``/``set_epoch``: the
composable samplers, or a ``batch_sampler=`` that skips batches) but hold no global
position. The state holds the batches yielded and the sampler's own state where the
reading began; the world size must not change.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lightning_resumable_data._batching import SkippableSampler
from lightning_resumable_data._progress import CountingIterator, Progress
from lightning_resumable_data.resume.base import Layout, Restored, ResumeStrategy
from lightning_resumable_data.resume.torchdata_state import TorchdataPosition
from lightning_resumable_data.state import StateMismatchError

__all__ = ["SkipResume"]


class SkipResume(ResumeStrategy):
    """The strategy of a :class:`~lightning_resumable_data._batching.SkippableSampler`.

    Args:
        sampler: The skippable sampler.
        layout: The loader's layout.
        strict: Unused: the sampler checks its own state.
        skips_batches: ``set_skip`` counts batches (a custom batch sampler), not samples.

    Example:
        >>> from lightning_resumable_data import ReproducibleShuffleSampler
        >>> sampler = ReproducibleShuffleSampler(range(8), seed=0)
        >>> layout = Layout("demo", batch_size=2, num_replicas=1, drop_last=False)
        >>> strategy = SkipResume(sampler, layout, strict=True, skips_batches=False)
        >>> restored = strategy.restore(strategy.save(Progress(1, batches_yielded=2), 2, {}))
        >>> restored.progress.epoch, restored.progress.batches_yielded
        (1, 2)
    """

    mode: ClassVar = "skip"
    sampler: SkippableSampler

    def __init__(
        self, sampler: SkippableSampler, layout: Layout, strict: bool, skips_batches: bool
    ) -> None:
        super().__init__(sampler, layout, strict)
        self.skips_batches = skips_batches

    def begin(self, progress: Progress, iterator: CountingIterator) -> None:
        """Set the epoch, and keep the sampler's state where this reading begins.

        A resume loads that state and skips the batches yielded since (the sampler's live
        state runs ahead of the batches yielded by the workers' prefetch).
        """
        super().begin(progress, iterator)
        if hasattr(self.sampler, "state_dict"):
            progress.origin = self.sampler.state_dict()

    def position(self, progress: Progress, batches: int, current: bool = True) -> dict[str, Any]:
        """The common entries plus the sampler's state where the reading began.

        ``current``: ``progress`` is the loader's live record (not the epoch before); when
        it has not begun reading, the sampler's pending state is the origin.
        """
        position = super().position(progress, batches)
        origin = progress.origin
        if origin is None and current and hasattr(self.sampler, "state_dict"):
            origin = self.sampler.state_dict()  # not iterating: the pending position
        if origin is not None:
            position["sampler"] = origin
        return position

    def restore(self, state: dict[str, Any]) -> Restored:
        """Load the sampler's saved state and skip the batches yielded after it."""
        sampler = self.sampler
        if state["num_replicas"] != self.layout.num_replicas:
            raise StateMismatchError(
                f"Cannot load this state into {self.layout.kind}: it was saved with "
                f"num_replicas={state['num_replicas']}, now {self.layout.num_replicas}, and "
                f"{type(sampler).__name__} cannot change world size mid-epoch. Use "
                "lightning_resumable_data.DistributedSampler for elastic resume."
            )
        if hasattr(sampler, "load_state_dict"):
            if not isinstance(state.get("sampler"), dict):
                raise StateMismatchError(
                    f"Cannot load this state into {self.layout.kind}: it has no 'sampler' "
                    f"state for the stateful {type(sampler).__name__}; it is truncated."
                )
            sampler.load_state_dict(state["sampler"])
        progress = Progress(epoch=state["epoch"], batches_yielded=state["batches_yielded"])
        progress.origin = state.get("sampler")
        sampler.set_epoch(state["epoch"])
        unit = 1 if self.skips_batches else state["batch_size"]
        sampler.set_skip(progress.batches_yielded * unit)
        return Restored(progress)

    def restore_torchdata(
        self, state: dict[str, Any], position: TorchdataPosition, epoch: int
    ) -> Restored:
        """The batch count of a torchdata state, skipped in the epoch the sampler is set to."""
        ours = self.torchdata_entries(position, epoch)
        if hasattr(self.sampler, "state_dict"):
            self.sampler.set_epoch(ours["epoch"])
            ours["sampler"] = self.sampler.state_dict()
        return self.restore(ours)
