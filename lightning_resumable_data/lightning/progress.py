"""Lightning's loop counters and the data position: read them, check them, bring them in line.

The trainer's progress is the truth about what was trained. Lightning counts it in its fit
loop: epochs in ``fit_loop.epoch_progress`` and the batches of the current epoch in
``fit_loop.epoch_loop.batch_progress`` (``processed``: batches whose training step ran).
The data position is ``(epoch, consumed)``. Because every rank draws ``B`` samples a step,
``k`` batches of an epoch are exactly its first ``k * B * W`` samples, so the two must agree:

* :class:`TrainedBatches` hands the loader Lightning's own batch count at save time, so the
  position written into a checkpoint does not depend on which hook saves, or in which order
  callbacks run;
* :func:`~lightning_resumable_data.lightning.checkpoint_counters.match_epoch_counters`
  rewrites a checkpoint's epoch counters, before Lightning restores them, where they
  disagree with the data position it holds;
* :func:`resume_mismatch` compares the position a fit starts from with Lightning's restored
  counters, and :func:`align_progress` moves Lightning's counters to the data position where
  Lightning would otherwise count another epoch (a run stopped mid-epoch by ``max_time``,
  ``max_steps`` or ``should_stop`` has run its epoch-end hooks, so ``max_epochs`` would
  count the unfinished epoch as done);
* :class:`PositionGuard` checks at every training batch that the batch Lightning trains
  begins where its counters say it must, in O(1).

Example:
    >>> resume_mismatch(TrainedPosition(epoch=1, batches=3), (1, 24), step_samples=8, step=11)
    >>> print(resume_mismatch(TrainedPosition(1, 4), (1, 24), step_samples=8, step=12)[:74])
    The data position does not match the trainer's progress at global step 12:
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from lightning.pytorch.loops.fit_loop import RestartStage as FitStage
from lightning.pytorch.loops.training_epoch_loop import RestartStage as EpochStage
from lightning.pytorch.utilities import rank_zero_warn

from lightning_resumable_data._progress import BatchPosition
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.state import ResumeWarning

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_resumable_data.lightning.history import DataHistory

__all__ = [
    "TrainedBatches",
    "TrainedPosition",
    "align_progress",
    "record_batch",
    "resume_mismatch",
    "trained_position",
    "training_loader",
    "warn_no_loader",
]

_COUNTS = ("ready", "started", "processed", "completed")


class TrainedPosition(NamedTuple):
    """What Lightning's counters say was trained: an epoch and the batches trained in it."""

    epoch: int
    batches: int


class TrainedBatches:
    """The batches of the current epoch a trainer has trained: its ``processed`` counter.

    Given to :meth:`StatefulDataLoader.track_trained
    <lightning_resumable_data.StatefulDataLoader.track_trained>`; holds the trainer weakly.
    """

    def __init__(self, trainer: pl.Trainer) -> None:
        self._trainer = weakref.ref(trainer)

    def __call__(self) -> int | None:
        """Batches of the current epoch trained (``None`` once the trainer is gone)."""
        trainer = self._trainer()
        if trainer is None:
            return None
        counter: Any = trainer.fit_loop.epoch_loop.batch_progress.current
        return int(counter.processed)


def trained_position(trainer: pl.Trainer) -> TrainedPosition:
    """Lightning's count of what was trained, read from its fit loop (restored or live).

    ``epoch`` is Lightning's epoch (``current_epoch``) and ``batches`` the batches trained in
    the epoch its epoch loop ran last. The two can be one epoch apart: a checkpoint written
    after the epoch-end hooks of an epoch that ``max_steps`` or ``max_time`` cut short (or
    after the fit ended) already counts the next epoch, with the cut epoch's batch count.
    """
    epochs: Any = trainer.fit_loop.epoch_progress.current
    counted: Any = trainer.fit_loop.epoch_loop.batch_progress.current
    return TrainedPosition(int(epochs.completed), int(counted.processed))


def resume_mismatch(
    trained: TrainedPosition, data: tuple[int, int], *, step_samples: int, step: int
) -> str | None:
    """Why a data position is not the one Lightning's counters describe; ``None`` if it is.

    The batches Lightning counts belong to its epoch or to the one before (see
    :func:`trained_position`); the data position must be that many batches into one of
    them, or the start of the epoch after a counted one.

    Args:
        trained: Lightning's restored (or live) count, :func:`trained_position`.
        data: ``(epoch, consumed)`` the loader will continue from.
        step_samples: Global samples per batch of the layout that saved ``data``.
        step: The trainer's global step, for the message.

    Returns:
        The message of a :class:`~lightning_resumable_data.DataPositionError`, or ``None``.
    """
    epoch, consumed = data
    for counted in {trained.epoch, max(0, trained.epoch - 1)}:
        if consumed > 0:
            if counted == epoch and consumed // step_samples == trained.batches:
                return None
        elif (counted, trained.batches) == (epoch, 0) or (
            counted == epoch - 1 and trained.batches > 0
        ):  # the start of an epoch: nothing of it trained, or the one before finished
            return None
    return (
        f"The data position does not match the trainer's progress at global step {step}: "
        f"Lightning counts {trained.batches} batches trained in epoch {trained.epoch} (or, "
        f"after a stop, in epoch {max(0, trained.epoch - 1)}), that is sample "
        f"{trained.batches * step_samples} of that epoch, but the loader would continue "
        f"from epoch {epoch}, sample {consumed}. Training on would replay or skip data. "
        "This happens when a data position from another checkpoint reached this fit (e.g. "
        "restored by hand, or by an older version of this library), or when this trainer "
        "trained before with another loader; resume with trainer.fit(..., ckpt_path=...) "
        "from one checkpoint (or fit on a new Trainer), or pass "
        "ResumableDataCallback(verify='warn') to go on regardless."
    )


def align_progress(trainer: pl.Trainer, epoch: int, consumed: int, step_samples: int) -> int:
    """Make Lightning's next batch the data's next batch; return its index in the epoch.

    Called at the start of a fit, after Lightning restored its counters and before its
    first batch. Three cases, each with the smallest change to Lightning's state:

    * Lightning continues the data's epoch: its batch count is shifted to the data's,
      ``consumed // step_samples`` (only differs after a change of batch or world size);
    * the data starts an epoch after a checkpoint of the previous epoch's last batch:
      Lightning starts that epoch at batch 0 (it kept the last epoch's count, in the saved
      layout), or, if it has yet to finish the last one, its count is moved to the end of
      an epoch in this layout;
    * Lightning would start a later epoch while the data is in the middle of one (a fit
      stopped mid-epoch, whose epoch-end hooks ran): Lightning's counters are set to that
      epoch, ``consumed // step_samples`` batches in, as if the checkpoint had been written
      after that batch, so ``max_epochs`` counts whole data epochs.

    Args:
        trainer: The trainer, between its restore and its first batch.
        epoch: The data's epoch.
        consumed: Global samples of that epoch already trained.
        step_samples: Global samples per batch now (batch size x world size).
    """
    fit = trainer.fit_loop
    loop = fit.epoch_loop
    batches = loop.batch_progress
    lightning_epoch = int(fit.epoch_progress.current.completed)
    upcoming = int(batches.current.completed) + int(loop.restarted_on_train_batch_end)
    target = consumed // step_samples
    if consumed > 0 and lightning_epoch == epoch:
        _shift(batches, target - upcoming)
        return target
    if consumed == 0 and upcoming > 0 and lightning_epoch == epoch:
        # A checkpoint of an epoch's last batch: Lightning has moved to the next epoch but
        # still holds the finished epoch's batch count (counted in the saved layout).
        limit = trainer.num_training_batches
        if limit == float("inf"):
            _restart_epoch(loop)
        else:  # at the epoch's end in this layout Lightning starts the epoch at batch 0
            _shift(batches, int(limit) - upcoming)
        return 0
    if consumed == 0 and upcoming > 0 and lightning_epoch == epoch - 1:
        # The same, before Lightning moved on: it finishes that epoch with no batch when
        # its count is at the epoch's end in this layout.
        limit = trainer.num_training_batches
        if limit != float("inf"):
            _shift(batches, int(limit) - upcoming)
            if loop.restarted_on_train_batch_end and fit.restarted_mid_epoch:
                _end_epoch_at_last_batch(fit)
            elif loop.restarted_on_last and fit.restarted_mid_epoch:
                # saved at the validation of the epoch's last batch (val_check_interval):
                # Lightning would fetch a batch past the epoch's end; it starts the next one
                _end_epoch_at_last_batch(fit)
                _restart_epoch(loop)
        return 0
    if consumed > 0 and lightning_epoch > epoch:
        _restart_mid_epoch(trainer, epoch, target)
    return target


def _shift(progress: Any, delta: int) -> None:
    if delta:
        for counter in (progress.current, progress.total):
            for name in _COUNTS:
                setattr(counter, name, max(0, getattr(counter, name) + delta))


def _end_epoch_at_last_batch(fit: Any) -> None:
    """What Lightning does when it restores a checkpoint of an epoch's last batch.

    Its fit loop counts that epoch as done before ``on_train_start`` (``is_last_batch`` was
    saved ``True``); a checkpoint saved at a batch that is the last one only in this layout
    (another batch or world size, an int ``limit_train_batches``) is brought to that state.
    """
    fit.epoch_loop.batch_progress.is_last_batch = True
    fit.epoch_progress.increment_processed()
    fit.epoch_progress.increment_completed()


def _restart_epoch(loop: Any) -> None:
    """The epoch loop starts its epoch at batch 0 (its restored counts were the last one's)."""
    batches = loop.batch_progress
    batches.is_last_batch = False
    for name in _COUNTS:
        setattr(batches.current, name, 0)
    loop._restart_stage = EpochStage.NONE


def _restart_mid_epoch(trainer: pl.Trainer, epoch: int, batch: int) -> None:
    """Lightning's state after ``batch`` batches of ``epoch``, as if saved at a batch's end.

    The counters of a checkpoint written by ``ModelCheckpoint`` at a validation end in the
    middle of an epoch: the epoch started and not processed, ``batch`` batches completed.
    Lightning resumes such a state without calling the epoch-start hooks again, from batch
    ``batch``, and without validating again at that batch.
    """
    fit = trainer.fit_loop
    loop = fit.epoch_loop
    epochs: Any = fit.epoch_progress
    for counter in (epochs.current, epochs.total):
        counter.ready = counter.started = epoch + 1
        counter.processed = counter.completed = epoch
    batches: Any = loop.batch_progress
    batches.is_last_batch = False
    for name in _COUNTS:
        setattr(batches.current, name, batch)
        setattr(batches.total, name, int(batches.total.processed))
    fit._restart_stage = FitStage.RESTARTED_MID_EPOCH
    loop._restart_stage = EpochStage.RESTARTED_ON_LAST
    loop._restarting = True  # the epoch loop keeps these counts instead of zeroing them


def training_loader(trainer: pl.Trainer) -> StatefulDataLoader | None:
    """The trainer's training loader of this package, if it uses one."""
    loader = getattr(trainer.fit_loop, "_combined_loader", None)
    for candidate in getattr(loader, "flattened", []):
        if isinstance(candidate, StatefulDataLoader):
            return candidate
    return None


def warn_no_loader() -> None:
    """Warn that the trainer's training loaders hold none of this package's loaders."""
    rank_zero_warn(
        "ResumableDataCallback found no lightning_resumable_data.StatefulDataLoader "
        "among the training loaders, so it cannot keep the data position exact: a "
        "resume replays or skips what a plain DataLoader does. Use "
        "ResumableDataModule, or return a lightning_resumable_data.StatefulDataLoader "
        "from train_dataloader.",
        category=ResumeWarning,
    )


def record_batch(
    history: DataHistory, trainer: pl.Trainer, loader: StatefulDataLoader
) -> BatchPosition | None:
    """Note in ``history`` the batch ``trainer`` is about to train; return where it begins.

    The position is the one the loader handed out with that batch (``take_handed``: exact
    however far Lightning fetches ahead, and for a loader rebuilt every epoch); ``None``
    for a loader without a position sampler, which is not recorded.
    """
    handed = loader.take_handed()
    sampler = loader.position_sampler
    if handed is None or sampler is None or loader.batch_size is None:
        return handed
    history.observe(
        int(trainer.global_step),
        handed.epoch,
        handed.consumed,
        world=int(getattr(sampler, "num_replicas", 1)),
        batch_size=int(loader.batch_size),
        accumulate=int(trainer.accumulate_grad_batches),
        limit=loader.epoch_limit,
    )
    return handed
