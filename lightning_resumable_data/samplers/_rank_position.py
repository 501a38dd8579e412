"""Where a rank is in its epoch's global order: the restored start, the claim, the live count."""

from __future__ import annotations

import warnings
from collections.abc import Callable

from lightning_resumable_data.samplers._chunks import BatchCount, ChunkStream
from lightning_resumable_data.state import ResumeWarning

__all__ = ["RankPosition"]


class RankPosition:
    """The position a :class:`DistributedSampler` holds, in global samples of its epoch.

    A one-shot start (``resume_at``: restored or skipped to) is *claimed* by the next
    iteration (``pending`` until that iteration reads), which then counts what it has
    computed and handed out (``stream``) from where it started (``started_at``). A
    ``restart`` or ``skip`` (``set_epoch``, ``load_state_dict``, ``set_skip``) supersedes
    every iterator claimed before it: such an iterator still yields the order it claimed, as
    torch's do, but no longer moves the position.

    Example:
        >>> position = RankPosition()
        >>> position.skip(6)
        >>> position.claim(0), position.consumed(2)
        ((0, 6, 1), 6)
    """

    __slots__ = ("generation", "pending", "resume_at", "started_at", "stream")

    def __init__(self) -> None:
        self.resume_at = 0  # global position the next __iter__ starts from (one-shot)
        self.started_at = 0  # global position where the live iteration started
        self.stream: ChunkStream | BatchCount | None = None
        self.pending: tuple[int, int] | None = None  # (epoch, start) of an unread iterator
        self.generation = 0  # bumped by restart and skip: older claims no longer count

    def consumed(self, step: int) -> int:
        """Global samples consumed, ranks advancing ``step`` samples per sample handed out."""
        if self.stream is None:
            return self.pending[1] if self.pending is not None else self.resume_at
        return self.started_at + self.stream.yielded * step

    def frontier(self, step: int) -> int:
        """Global position up to which the live iteration has computed the order."""
        if self.stream is None:
            return self.pending[1] if self.pending is not None else self.resume_at
        return self.started_at + self.stream.produced * step

    @property
    def engaged(self) -> bool:
        """Whether an iteration is claimed or live, or the next one starts past 0."""
        return self.stream is not None or self.resume_at > 0 or self.pending is not None

    def claim(self, epoch: int) -> tuple[int, int, int]:
        """The (epoch, start, generation) of a new iteration; the restored start is used up."""
        # The epoch and start are fixed here, so a later ``set_epoch`` cannot change an
        # iterator already handed out (Lightning may call it after the loader's ``iter``).
        # torch's multi-worker DataLoader calls ``iter(sampler)`` twice and discards the
        # first iterator: a start no iterator has begun reading is handed out again.
        if self.pending is not None and self.pending[0] == epoch:
            epoch, start = self.pending
        else:
            start = self.resume_at
        self.resume_at = 0
        self.pending = (epoch, start)
        self.stream = None
        return epoch, start, self.generation

    def begin(
        self, start: int, counter: BatchCount | Callable[[], ChunkStream]
    ) -> BatchCount | None:
        """A claimed iteration reads from ``start``, counted by ``counter`` (or its stream).

        It becomes the live iteration unless a ``restart`` or ``skip`` came after its claim
        (the counter's ``claim``). Returns ``counter`` if it is a :class:`BatchCount` (a
        batched iteration), else ``None``.
        """
        stream = counter if isinstance(counter, BatchCount) else counter()
        if stream.claim == self.generation:
            self.pending = None
            self.started_at = start
            self.stream = stream
        return counter if isinstance(counter, BatchCount) else None

    def skip(self, samples: int) -> None:
        """Move the next iteration's start ``samples`` global samples further."""
        self.resume_at += samples
        self.stream = self.pending = None
        self.generation += 1

    def restart(self, resume_at: int = 0) -> None:
        """Start the next iteration at ``resume_at``; forget the live and claimed ones."""
        self.resume_at = resume_at
        self.started_at = 0
        self.stream = self.pending = None
        self.generation += 1

    def warn_discarded(self, epoch: int, current: int) -> None:
        """Warn (at ``set_epoch``'s caller) that moving to ``epoch`` drops a restored start."""
        if self.resume_at:
            warnings.warn(
                f"set_epoch({epoch}) discards the restored position (epoch {current}, "
                f"{self.resume_at} samples consumed). If this run should continue epoch "
                f"{current}, call set_epoch({current}) instead.",
                ResumeWarning,
                stacklevel=3,
            )
