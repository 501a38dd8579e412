"""Skipped steps: the data of optimizer steps ``[A, B)`` cut from the order, never read.

``ResumableDataCallback(skip_steps=[(A, B)])`` (and ``lrd skip``) turns trainer steps into
positions of the epochs' orders, from where the fit starts: step ``A`` then trains what
step ``B`` would have, and the model's step counter goes on (steps are counted as the
trainer counts them). The cut is made in the sampler's order
(:meth:`~lightning_resumable_data.DistributedSampler.skip_positions`), so the position
stays a prefix of what is read, the skip is saved with the data state, and every later
resume, on any world or batch size, keeps it. Lightning's batch count of an epoch is
restated to the epoch that remains.

Example:
    >>> check_cuts([(5, 8)], [3, 1])
    ([(5, 8)], [1, 3])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from lightning_resumable_data.lightning._step_ranges import (
    Start,
    check_new_cuts,
    check_skip_steps,
    cut_steps,
    epoch_batches,
)

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_resumable_data.lightning.history import DataHistory
    from lightning_resumable_data.loader import StatefulDataLoader

__all__ = ["apply_cuts", "apply_quarantine", "apply_skips", "check_cuts", "restate_epoch"]


def check_cuts(
    skip_steps: Iterable[Any], quarantine: Iterable[Any]
) -> tuple[list[tuple[int, int]], list[int]]:
    """The callback's ``skip_steps`` and ``quarantine``, checked; a ``ValueError`` if bad."""
    indices = list(quarantine)
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices):
        raise ValueError(
            f"quarantine: {indices!r:.200} is not a list of dataset indices (ints >= 0); "
            "e.g. quarantine=[1032, 77105]."
        )
    return check_skip_steps(skip_steps), sorted(set(indices))


def apply_cuts(
    trainer: pl.Trainer,
    loader: StatefulDataLoader,
    skip_steps: Sequence[tuple[int, int]],
    quarantine: Sequence[int],
    history: DataHistory,
) -> None:
    """:func:`apply_skips`, then :func:`apply_quarantine`, at the fit's start."""
    apply_skips(trainer, loader, skip_steps, history)
    apply_quarantine(trainer, loader, quarantine, history)


def _batches_of(
    loader: StatefulDataLoader, limit: bool = True, cut: bool = True
) -> Callable[[int, int], int]:
    """(epoch, consumed) -> batches the loader's layout takes from there (with the limit).

    ``cut=False``: of the whole epoch, as if nothing were cut from it.
    """
    sampler: Any = loader.position_sampler

    def batches(epoch: int, consumed: int) -> int:
        return epoch_batches(
            sampler.epoch_size(epoch) if cut else sampler.base_length(epoch),
            world=sampler.num_replicas,
            batch_size=int(loader.batch_size or 1),
            drop_last=loader.drop_last,
            sampler_drop_last=sampler.drop_last,
            limit=loader.epoch_limit if limit else None,
            consumed=consumed,
        )

    return batches


def apply_skips(
    trainer: pl.Trainer,
    loader: StatefulDataLoader,
    requested: Sequence[tuple[int, int]],
    history: DataHistory,
) -> None:
    """Cut the data of the requested steps not cut yet, from where the fit starts.

    Called at the fit's start, after the position is restored and Lightning's counters are
    aligned with it, before anything is read; ``history`` records what is cut.

    Raises:
        ValueError: A step before the fit's start, or a loader whose sampler cannot skip.
    """
    todo = [steps for steps in requested if list(steps) not in history.skipped_steps]
    check_new_cuts(todo, history.skipped_steps)
    sampler: Any = loader.position_sampler
    if not todo:
        return
    if sampler is None or not hasattr(sampler, "skip_positions"):
        raise ValueError(
            "skip_steps needs the training loader of a ResumableDataModule (or a "
            "StatefulDataLoader over this package's DistributedSampler or ShardedSampler)."
        )
    state = loader.state_dict()
    epoch, consumed = int(state["epoch"]), int(state["consumed"])
    where = Start(int(trainer.global_step), epoch, consumed, loader.samples_per_step)
    epochs = (
        trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
    )
    accumulate = int(trainer.accumulate_grad_batches)
    cut_steps(sampler, todo, where, accumulate, _batches_of(loader), epochs)
    for cut_epoch in sorted(sampler.skips):
        history.note_skips(cut_epoch, sampler.skips[cut_epoch])
    history.skipped_steps.extend(list(steps) for steps in todo)
    _restate(trainer, loader, epoch)


def apply_quarantine(
    trainer: pl.Trainer, loader: StatefulDataLoader, indices: Sequence[int], history: DataHistory
) -> None:
    """Quarantine the ``indices`` not quarantined yet, from where the fit starts.

    Raises:
        ValueError: An index outside the dataset, or a loader whose sampler cannot do it.
    """
    new = sorted(set(indices) - history.quarantined)
    sampler: Any = loader.position_sampler
    if not new:
        return
    if sampler is None or not hasattr(sampler, "quarantine"):
        raise ValueError(
            "quarantine needs the training loader of a ResumableDataModule (or a "
            "StatefulDataLoader over this package's DistributedSampler)."
        )
    epoch = int(loader.state_dict()["epoch"])
    if sampler.epoch != epoch:  # the position is the next epoch's start
        sampler.lock_epoch(epoch)
    sampler.quarantine(new)
    history.quarantine.append(sampler.quarantined[-1])
    _restate(trainer, loader, epoch)


def restate_epoch(trainer: pl.Trainer, loader: StatefulDataLoader, history: DataHistory) -> None:
    """At an epoch's start: Lightning's batch count of it, if the run cut or changed data."""
    if history.skips or history.quarantine or getattr(loader.position_sampler, "changes", None):
        _restate(trainer, loader, loader.epoch)


def _restate(trainer: pl.Trainer, loader: StatefulDataLoader, epoch: int) -> None:
    """Lightning's batch count of ``epoch``, restated to the epoch that remains after skips.

    Lightning measures an epoch's length once per fit; an epoch with a cut is shorter, the
    ones after it are whole again. Under ``limit_train_batches`` (an int or a fraction) the
    epoch takes the limit's batches of the whole epoch, from the order that remains. The
    sampler moves to ``epoch`` now (it would at the epoch's first read), so the loader's
    ``len`` is that epoch's too.
    """
    from lightning.pytorch.trainer.connectors.data_connector import _parse_num_batches
    from lightning.pytorch.trainer.states import RunningStage

    sampler: Any = loader.position_sampler
    if sampler.epoch != epoch:
        sampler.lock_epoch(epoch)
    whole = _batches_of(loader, limit=False)(epoch, 0)
    uncut = _batches_of(loader, limit=False, cut=False)(epoch, 0)
    limit = _parse_num_batches(RunningStage.TRAINING, uncut, trainer.limit_train_batches)
    count = min(whole, int(limit))
    fit: Any = trainer.fit_loop
    combined = getattr(fit, "_combined_loader", None)
    if combined is None or len(combined.flattened) != 1:
        return
    combined.limits = [count]
    fit.max_batches = count
    if isinstance(trainer.val_check_interval, float) and trainer.val_check_batch is not None:
        trainer.val_check_batch = max(1, int(count * trainer.val_check_interval))
