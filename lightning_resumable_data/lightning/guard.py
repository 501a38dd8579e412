"""The run-time exactness check: every training batch begins where the trainer's counters say.

The order is a pure function of the state, and ``k`` batches of an epoch are exactly its
first ``k * B * W`` samples. So the position of the batch Lightning trains as batch ``b`` of
epoch ``e`` is known in advance: ``b * B * W``, or, in an epoch resumed under another layout,
the resume position plus ``(b - b0) * B * W``. The loader records where every batch it hands
out begins (:meth:`StatefulDataLoader.take_handed
<lightning_resumable_data.StatefulDataLoader.take_handed>`); :class:`PositionGuard`
compares the two, in O(1), before the batch is trained. A mismatch means data would be
replayed or skipped: a :class:`~lightning_resumable_data.DataPositionError` (or a warning).

Example:
    >>> from lightning_resumable_data._progress import BatchPosition
    >>> guard = PositionGuard("raise")
    >>> guard.anchor(epoch=1, batch=2, consumed=20)  # resumed at sample 20, batch size 8
    >>> guard.check(BatchPosition(1, 28), epoch=1, batch=3, step=3, step_samples=8)
    >>> guard.check(BatchPosition(1, 20), epoch=1, batch=3, step=3, step_samples=8)
    Traceback (most recent call last):
    ...
    lightning_resumable_data.state.DataPositionError: Data position check failed at ...
"""

from __future__ import annotations

import warnings
from typing import Literal

from lightning_resumable_data._progress import BatchPosition
from lightning_resumable_data.state import DataPositionError, ResumeWarning

__all__ = ["PositionGuard", "Verify"]

Verify = Literal["raise", "warn", "off"]
_MODES = ("raise", "warn", "off")


class PositionGuard:
    """Compares each trained batch's data position with the one the trainer's counters imply.

    Args:
        mode: ``"raise"`` a :class:`~lightning_resumable_data.DataPositionError`, ``"warn"``
            (a :class:`~lightning_resumable_data.ResumeWarning`, once), or ``"off"``.
    """

    __slots__ = ("_anchor", "_warned", "mode")

    def __init__(self, mode: Verify = "raise") -> None:
        if mode not in _MODES:
            raise ValueError(f"verify={mode!r} must be one of {', '.join(map(repr, _MODES))}.")
        self.mode: Verify = mode
        self._anchor = (0, 0, 0)  # (epoch, batch index, consumed) known to agree
        self._warned = False

    def anchor(self, epoch: int, batch: int, consumed: int) -> None:
        """Batch ``batch`` of ``epoch`` begins at sample ``consumed`` (a fit's start)."""
        self._anchor = (epoch, batch, consumed)

    def expected(self, epoch: int, batch: int, step_samples: int) -> int:
        """Where batch ``batch`` of ``epoch`` begins, by the trainer's counters."""
        anchor_epoch, anchor_batch, anchor_consumed = self._anchor
        if epoch == anchor_epoch:
            return anchor_consumed + (batch - anchor_batch) * step_samples
        return batch * step_samples

    def matches(self, handed: BatchPosition, epoch: int, batch: int, step_samples: int) -> bool:
        """Whether batch ``batch`` of the trainer's ``epoch`` begins at ``handed``."""
        return handed == (epoch, self.expected(epoch, batch, step_samples))

    def check(
        self, handed: BatchPosition, *, epoch: int, batch: int, step: int, step_samples: int
    ) -> None:
        """Report unless batch ``batch`` of the trainer's ``epoch`` begins at ``handed``."""
        expected = self.expected(epoch, batch, step_samples)
        if handed == (epoch, expected):
            return
        self.report(
            f"Data position check failed at global step {step}: the trainer is about to "
            f"train batch {batch} of epoch {epoch}, which begins at sample {expected} of "
            f"epoch {epoch} by its counters, but the loader handed out the batch at sample "
            f"{handed.consumed} of epoch {handed.epoch}. Training on would replay or skip "
            "data. Please report this with the trainer's settings; "
            "ResumableDataCallback(verify='warn') goes on regardless."
        )

    def report(self, message: str) -> None:
        """Raise or warn with ``message``, as the mode says."""
        if self.mode == "raise":
            raise DataPositionError(message)
        if self.mode == "warn" and not self._warned:
            self._warned = True
            warnings.warn(message, ResumeWarning, stacklevel=3)
