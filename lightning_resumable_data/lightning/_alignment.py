"""Lightning's epochs and counters lined up with the data position, for the callback.

Where Lightning ends an epoch (``limit_train_batches``) becomes the loader's epoch limit; a
checkpoint's epoch counters are mended to its data position before Lightning restores them;
at a fit's start the position it starts from is checked against Lightning's restored
counters, which are then brought to it; and every batch is checked to begin where they say.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn

from lightning_resumable_data._progress import BatchPosition
from lightning_resumable_data.lightning.checkpoint_counters import (
    data_position,
    match_epoch_counters,
)
from lightning_resumable_data.lightning.guard import PositionGuard
from lightning_resumable_data.lightning.progress import (
    align_progress,
    resume_mismatch,
    trained_position,
)
from lightning_resumable_data.loader import RestoredPosition, StatefulDataLoader
from lightning_resumable_data.state import StateMismatchError

__all__ = [
    "check_batch",
    "match_checkpoint",
    "restart_progress_bar",
    "set_epoch_limit",
    "start_at_lightnings_batch",
    "start_position",
]


def set_epoch_limit(trainer: pl.Trainer, loader: StatefulDataLoader) -> None:
    """Tell the loader where Lightning ends an epoch (``limit_train_batches``), in samples."""
    batches = trainer.num_training_batches
    try:
        whole = len(loader)
    except TypeError:
        return
    if math.isfinite(batches) and int(batches) < whole:
        loader.set_epoch_limit(int(batches) * loader.samples_per_step)
    else:
        loader.set_epoch_limit(None)


def restart_progress_bar(
    trainer: pl.Trainer, pl_module: pl.LightningModule, batch_idx: int = 0
) -> None:
    """Give the progress bar the epoch start Lightning skips when it resumes mid-epoch.

    The bar's own epoch start restores its title and its total; it counts that total from
    the epoch's start, capped at the optimizer steps left (``max_steps``) as if none of the
    epoch were done, so a resume at batch ``batch_idx`` would run past it (``21/?``). The cap
    is counted from ``batch_idx`` instead, and a TQDM bar starts there.
    """
    bar = trainer.progress_bar_callback
    if bar is None or not getattr(bar, "is_enabled", True):
        return
    bar.on_train_epoch_start(trainer, pl_module)  # restores its title and total
    tqdm = getattr(bar, "train_progress_bar", None)
    if not batch_idx or tqdm is None or not hasattr(tqdm, "initial"):
        return
    whole, total = trainer.num_training_batches, tqdm.total
    if isinstance(total, int) and math.isfinite(whole) and total < whole:  # capped by steps
        tqdm.total = min(int(whole), batch_idx + total)
    tqdm.initial = tqdm.n = batch_idx  # its rate counts the batches of this fit only
    tqdm.refresh()


def match_checkpoint(trainer: pl.Trainer, checkpoint: dict[str, Any], key: str | None) -> bool:
    """Rewrite a fit's checkpoint's epoch counters to its data position (DataModule ``key``).

    Returns whether the checkpoint holds a data position.
    """
    position = data_position(checkpoint, key)
    fitting = getattr(getattr(trainer, "state", None), "fn", None) == TrainerFn.FITTING
    if position is not None and fitting:
        match_epoch_counters(checkpoint, *position)
    return position is not None


def start_at_lightnings_batch(trainer: pl.Trainer, loader: StatefulDataLoader) -> bool:
    """Start a fresh loader at the batch Lightning resumes at, in Lightning's epoch.

    For a checkpoint without a data position that ``allow_config_change=True`` accepts:
    the data starts afresh where Lightning's restored counters say training goes on, so
    its epochs and steps follow Lightning's. Called at the fit's start, after the restore.
    Returns ``False`` (nothing is left to do).
    """
    if loader.restored is not None or loader.resume_mode != "position":
        return False
    fit = trainer.fit_loop
    loop = fit.epoch_loop
    epoch, batch = int(fit.epoch_progress.current.completed), 0
    if fit.restarted_mid_epoch:
        batch = int(loop.batch_progress.current.completed) + int(loop.restarted_on_train_batch_end)
        if batch >= trainer.num_training_batches:  # Lightning starts an epoch at batch 0
            batch = 0
    loader.load_state_dict(loader.state_at(epoch, batch))
    return False


def start_position(
    trainer: pl.Trainer,
    loader: StatefulDataLoader,
    restored: RestoredPosition | None,
    guard: PositionGuard,
) -> None:
    """Check the position this fit starts from, and align Lightning's counters with it."""
    step_samples = loader.samples_per_step
    if restored is not None:
        epoch, consumed = restored.epoch, restored.consumed
        _check_within_limit(trainer, loader, consumed, restored.step_samples)
        if consumed and loader.ends_epoch(consumed):  # cut by this layout's limit
            epoch, consumed = epoch + 1, 0
    else:  # a fresh fit, or one continuing the live position (the state counts what
        state = loader.state_dict()  # Lightning trained, whatever it fetched ahead)
        epoch, consumed = int(state["epoch"]), int(state["consumed"])
    # what was restored is checked in the layout that saved it
    saved = restored or RestoredPosition(epoch, consumed, step_samples)
    problem = resume_mismatch(
        trained_position(trainer),
        (saved.epoch, saved.consumed),
        step_samples=saved.step_samples,
        step=trainer.global_step,
    )
    if problem is not None:
        guard.report(problem)
    batch = align_progress(trainer, epoch, consumed, step_samples)
    guard.anchor(epoch, batch, consumed)
    if restored is None and consumed and not loader.ends_epoch(consumed):
        # a fit going on on the same trainer and loader (no checkpoint): its next pass
        # continues the live position, not torch's next epoch after a partial pass
        loader.load_state_dict(loader.state_dict())


def check_batch(
    guard: PositionGuard,
    trainer: pl.Trainer,
    loader: StatefulDataLoader,
    batch_idx: int,
    handed: BatchPosition | None,
) -> None:
    """Check that batch ``batch_idx``, about to be trained, begins where the counters say.

    ``handed``: where the loader's batch begins (its ``take_handed``), ``None`` if unknown.
    """
    epoch, step_samples = trainer.current_epoch, loader.samples_per_step
    if handed is not None and not guard.matches(
        handed, epoch, batch_idx, step_samples
    ):  # O(1); the step is read only for the message
        guard.check(
            handed,
            epoch=epoch,
            batch=batch_idx,
            step=trainer.global_step,
            step_samples=step_samples,
        )


def _check_within_limit(
    trainer: pl.Trainer, loader: StatefulDataLoader, consumed: int, saved_step_samples: int
) -> None:
    """Refuse a resumed epoch already past this layout's ``limit_train_batches`` cut.

    An int ``limit_train_batches`` counts batches of the current layout: after a change of
    batch or world size it cuts the epoch at another sample. A position past that cut
    cannot end the epoch where either run would have.
    """
    limit = loader.epoch_limit
    if limit is None or consumed <= limit:
        return
    raise StateMismatchError(
        f"Cannot resume: the checkpoint is {consumed} samples into its epoch "
        f"({consumed // saved_step_samples} batches of {saved_step_samples} samples), but "
        f"limit_train_batches={trainer.limit_train_batches} ends an epoch after {limit} "
        f"samples in this layout ({loader.samples_per_step} samples a batch). Resume with "
        "the saved batch and world size until the epoch ends, or give "
        "limit_train_batches as a fraction (the same samples in every layout)."
    )
