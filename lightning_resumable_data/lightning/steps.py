"""Where an optimizer step begins in the data: Lightning's step counting as pure arithmetic.

Lightning steps the optimizer after every ``accumulate`` batches *and* after the last batch
of an epoch, even if fewer were accumulated; an epoch has ``batches`` batches (the loader's
length, cut by ``limit_train_batches``). So optimizer step ``s`` does not always begin at
batch ``s * accumulate``. :func:`step_start` follows those rules from a known point (the
start of training, or a resume) to the batch where a later step begins, and
:func:`step_position` turns that batch into a global sample position: what a mixture phase
with ``start_step`` needs to start at exactly that step on every rank.

Example:
    >>> # 16 batches an epoch, accumulating 3: steps begin at batches 0, 3, ..., 15, then
    >>> # the next epoch; step 7 begins at epoch 1, batch 3.
    >>> step_start(7, batches=16, accumulate=3)
    (1, 3)
"""

from __future__ import annotations

__all__ = ["limited_batches", "step_position", "step_start"]


def limited_batches(batches: int, limit: int | float) -> int:
    """Batches Lightning trains per epoch: ``limit_train_batches`` applied to a length.

    Example:
        >>> limited_batches(16, 0.5), limited_batches(16, 5), limited_batches(16, 1.0)
        (8, 5, 16)
    """
    if isinstance(limit, int):
        return min(batches, limit)
    return int(batches * limit)


def _steps_from(batch: int, batches: int, accumulate: int) -> int:
    """Optimizer steps that begin in an epoch from ``batch`` on (the one at ``batch`` too)."""
    first_boundary = -(-(batch + 1) // accumulate)  # boundaries end at batch acc * m - 1
    inner = max(0, (batches - 1) // accumulate - first_boundary + 1)  # before the last batch
    return 1 + inner


def step_start(
    step: int,
    *,
    batches: int,
    accumulate: int = 1,
    from_step: int = 0,
    epoch: int = 0,
    batch: int = 0,
) -> tuple[int, int]:
    """``(epoch, batch)`` where optimizer step ``step`` begins.

    Args:
        step: The optimizer step (``trainer.global_step`` when it begins).
        batches: Batches per epoch (after ``limit_train_batches``), ``>= 1``.
        accumulate: ``accumulate_grad_batches``.
        from_step: A step known to begin at ``(epoch, batch)``: 0 at the start of training,
            or the global step of a resume.
        epoch: The epoch of that point.
        batch: Its batch index in the epoch.

    Raises:
        ValueError: ``step`` is before ``from_step``, or ``batches``/``accumulate`` < 1.
    """
    if batches < 1 or accumulate < 1:
        raise ValueError(f"batches={batches} and accumulate={accumulate} must be >= 1.")
    if step < from_step:
        raise ValueError(f"step={step} begins before the known point (step {from_step}).")
    if batch >= batches:  # the known point is past this epoch's end: the next one begins
        epoch, batch = epoch + 1, 0
    ahead = step - from_step
    here = _steps_from(batch, batches, accumulate)
    if ahead < here:
        if ahead == 0:
            return epoch, batch
        first_boundary = -(-(batch + 1) // accumulate)
        return epoch, accumulate * (first_boundary + ahead - 1)
    ahead -= here
    per_epoch = _steps_from(0, batches, accumulate)
    skipped, ahead = divmod(ahead, per_epoch)
    return epoch + 1 + skipped, accumulate * ahead


def step_position(
    step: int,
    *,
    batches: int,
    step_samples: int,
    accumulate: int = 1,
    from_step: int = 0,
    epoch: int = 0,
    batch: int = 0,
    consumed: int = 0,
) -> tuple[int, int]:
    """``(epoch, global position)`` of the first sample of optimizer step ``step``.

    ``(epoch, batch)`` is where ``from_step`` begins and ``consumed`` the global samples
    consumed there (after a resume under another layout it need not be a multiple of
    ``step_samples``); one batch consumes ``step_samples`` global samples.

    Example:
        >>> step_position(7, batches=16, accumulate=3, step_samples=8)
        (1, 24)
        >>> step_position(3, batches=16, step_samples=8, from_step=2, epoch=0, batch=5, consumed=44)
        (0, 52)
    """
    at_epoch, at_batch = step_start(
        step, batches=batches, accumulate=accumulate, from_step=from_step, epoch=epoch, batch=batch
    )
    if at_epoch == epoch:
        return at_epoch, consumed + (at_batch - batch) * step_samples
    return at_epoch, at_batch * step_samples
