"""The Callback: Lightning's hooks, each handing its work to the module that does it.

It never imports the DataModule (which installs it): it knows one as a
:class:`~._contract.PhasedDataModule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from typing_extensions import override

from lightning_resumable_data.lightning._alignment import (
    check_batch,
    match_checkpoint,
    restart_progress_bar,
    set_epoch_limit,
    start_at_lightnings_batch,
    start_position,
)
from lightning_resumable_data.lightning._callback_state import (
    callback_state,
    check_saved_state,
    checked_phases,
    require_data_position,
)
from lightning_resumable_data.lightning._contract import PhasedDataModule, checkpoint_key
from lightning_resumable_data.lightning._data_metrics import log_data_metrics
from lightning_resumable_data.lightning._training_seed import (
    check_seed_options,
    fit_seed,
    restored_seed,
    seed_step,
    seed_validation,
)
from lightning_resumable_data.lightning.guard import PositionGuard, Verify
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.mixing import OnlineMixer, Policy
from lightning_resumable_data.lightning.progress import (
    TrainedBatches,
    record_batch,
    training_loader,
    warn_no_loader,
)
from lightning_resumable_data.lightning.skipping import apply_cuts, check_cuts, restate_epoch
from lightning_resumable_data.samplers.schedule import MixturePhase

__all__ = ["ResumableDataCallback"]


class ResumableDataCallback(pl.Callback):
    """Keeps the data position exact through checkpoints, and runs the mixture schedule.

    * **Phases**: hands its :class:`~lightning_resumable_data.MixturePhase` list to the
      :class:`ResumableDataModule`, which installs each phase in the sampler at the exact
      global position of its step, before any read: it starts at that step on every rank.
    * **Position**: the position written into a checkpoint is Lightning's own count of the
      batches trained (its fit loop's counters, read when the checkpoint is written): exact
      whichever hook saves it, in any order of the callbacks, however far Lightning fetches.
    * **Resume**: at the start of a fit, checks the restored position against Lightning's
      restored counters, and brings Lightning's epoch and batch counters to the data
      position (after a ``max_time``, ``max_steps`` or ``should_stop`` stop mid-epoch, whose
      epoch-end hooks ran, ``max_epochs`` then counts whole data epochs).
    * **Check** (``verify="raise"``, the default): at every training batch, in O(1), the
      batch Lightning trains must begin where its counters say; otherwise a
      :class:`~lightning_resumable_data.DataPositionError` names the step, the expected and
      the actual position.
    * **Logging**: every ``log_every_n_steps`` steps, logs the weights in force and the
      samples drawn per source this epoch (``data/weight/<source>``, ``data/drawn/<source>``).
    * **History**: notes at every training batch its step and where its data begins (a few
      runs per epoch: :mod:`~.history`), so ``lrd trace`` names the samples of any step.
    * **Cuts** (``skip_steps``, ``quarantine``): the data of those steps, or those samples,
      is never read again, and every resume keeps the cut (:mod:`~.skipping`).
    * **Epochs**: ends the data epoch where Lightning does (``limit_train_batches``); after a
      resume under another layout restates Lightning's batch count of the resumed epoch.
    * **Training randomness** (``seed_training=True``): at the start of every training
      batch of ``fit``, reseeds torch (CPU and every CUDA device; NumPy's global RNG and
      ``random`` too with ``seed_training=("torch", "numpy", "random")``) from (training
      seed, global step, data-parallel rank, micro-batch), and every validation batch of
      ``fit`` from a stream of its own: dropout is the same after a resume.
    * **Checkpoint**: saves its phases, training seed, data history and the online mixer's
      memory (under the stable ``state_key`` ``"ResumableDataCallback"``) and, on resume,
      refuses changed phases unless the DataModule has ``allow_config_change=True``.

    :class:`ResumableDataModule` adds one (without phases) to a trainer that has none.

    Example::

        dm = ResumableDataModule({"web": web, "code": code}, weights={"web": 0.8, "code": 0.2})
        callback = ResumableDataCallback(
            phases=[MixturePhase(start_step=1000, weights={"web": 0.5, "code": 0.5})]
        )
        trainer = Trainer(callbacks=[callback], ...)
        trainer.fit(model, datamodule=dm, ckpt_path="last")

    Args:
        phases: Weight changes by ``start_step`` (optimizer steps) or ``start_epoch``.
        log_every_n_steps: Logging period; ``None`` uses the trainer's, ``0`` disables.
        policy: Online mixing: ``(trainer, module, stats) -> weights | None``, run every
            ``policy_every_n_steps`` optimizer steps on every rank; rank 0's result is
            applied on every rank (see ``docs/mixing.md``).
        policy_every_n_steps: Period of the policy and of :meth:`set_weights`'s sync points.
        seed_training: Reseed torch's generators at every training and validation batch of
            ``fit``; a tuple from ``("torch", "numpy", "random")`` picks the generators;
            ``False`` leaves them to you (``seed_everything`` and your own code).
        training_seed: The training seed; ``None`` takes the DataModule's ``seed`` (0
            without a :class:`ResumableDataModule`), keyed with ``seed_everything``'s seed
            when one is set, and on resume the checkpoint's.
        verify: What a data position that disagrees with the trainer's counters does:
            ``"raise"`` a :class:`~lightning_resumable_data.DataPositionError`, ``"warn"``
            once, or ``"off"``.
        skip_steps: ``(start, stop)`` ranges of optimizer steps whose data is cut (stop
            excluded), counted as the trainer counts steps from the step the fit starts at.
        quarantine: Dataset indices left out of every draw from where the fit starts.
    """

    def __init__(
        self,
        phases: Sequence[MixturePhase] = (),
        *,
        log_every_n_steps: int | None = None,
        seed_training: bool | tuple[str, ...] = True,
        training_seed: int | None = None,
        policy: Policy | None = None,
        policy_every_n_steps: int | None = None,
        verify: Verify = "raise",
        skip_steps: Sequence[tuple[int, int] | range] = (),
        quarantine: Sequence[int] = (),
    ) -> None:
        self.phases = checked_phases(phases)
        self.skip_steps, self.quarantine = check_cuts(skip_steps, quarantine)
        self.log_every_n_steps = log_every_n_steps
        self._generators = check_seed_options(seed_training, training_seed)
        self.seed_training = seed_training
        self.training_seed = training_seed
        self._seed: int | None = None  # the run's training seed, resolved in setup/restore
        self._rank = 0
        self._datamodule: PhasedDataModule | None = None
        self._epoch_started, self._afresh = True, False  # see on_train_start
        self._trainer: pl.Trainer | None = None  # while fitting: what state_dict reads
        self.history = DataHistory()  # which data each step trained (the mixer notes changes)
        self.mixer = OnlineMixer(policy, policy_every_n_steps, self.history)
        self.guard = PositionGuard(verify)

    def set_weights(self, weights: object, temperature: float | None = None) -> None:
        """Change the mixture weights during ``fit``, from any hook (see ``docs/mixing.md``).

        Checked now; applied at the next sync point (the next step with one rank, every
        ``policy_every_n_steps`` with several, rank 0's request winning), and recorded.

        Raises:
            RuntimeError: Called outside ``fit``, or without a mixture.
            TypeError: Weights of the wrong type (nothing is queued).
            ValueError: Bad weights or temperature (nothing is queued).
        """
        self.mixer.set_weights(weights, temperature)

    @property
    @override
    def state_key(self) -> str:
        return "ResumableDataCallback"

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        datamodule = getattr(trainer, "datamodule", None)
        if isinstance(datamodule, PhasedDataModule):
            datamodule.phases = self.phases
            self._datamodule = datamodule
        elif self.phases:
            raise ValueError(
                "ResumableDataCallback(phases=...) needs a ResumableDataModule: pass "
                "trainer.fit(model, datamodule=ResumableDataModule(...))."
            )
        if stage == "fit" and not getattr(trainer, "global_step", 0):
            # a fit from scratch: Lightning's callback_metrics start empty, so does the memory
            # (a checkpoint's replaces it; a fit going on on the same trainer keeps it)
            self.mixer.load_state_dict(None)
            self.history.load()
        if self.seed_training and stage == "fit":
            self._rank, self._seed = fit_seed(trainer, self.training_seed, datamodule)

    train_loader = staticmethod(training_loader)  # the trainer's loader of this package

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = self.train_loader(trainer)
        self._epoch_started = False
        self._trainer = trainer
        if loader is None:
            warn_no_loader()
            return
        self.mixer.attach(loader)  # notes a reweight of the resume in the history
        set_epoch_limit(trainer, loader)  # before the position: it may end the epoch
        if self._afresh:  # a checkpoint without data position (allow_config_change)
            self._afresh = start_at_lightnings_batch(trainer, loader)
        restored, loader.restored = loader.restored, None
        loader.track_trained(TrainedBatches(trainer))
        if loader.resume_mode == "position":
            start_position(trainer, loader, restored, self.guard)
            apply_cuts(trainer, loader, self.skip_steps, self.quarantine, self.history)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_started = True
        loader = self.train_loader(trainer)
        if loader is not None:
            restate_epoch(trainer, loader, self.history)  # if cut: its length changes
            set_epoch_limit(trainer, loader)  # a reloaded loader may have another length

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        loader = self.train_loader(trainer)
        if loader is not None:
            handed = record_batch(self.history, trainer, loader)  # where this batch begins
            if self.guard.mode != "off":
                check_batch(self.guard, trainer, loader, batch_idx, handed)
        if not self._epoch_started:  # resumed mid-epoch: Lightning skipped the epoch start
            self._epoch_started = True
            restart_progress_bar(trainer, pl_module, batch_idx)
        if self._seed is not None:  # last: nothing this hook does draws after it
            seed_step(self._generators, self._rank, self._seed, trainer, pl_module, batch_idx)

    @override
    def on_validation_batch_start(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._seed is not None and trainer.state.fn == TrainerFn.FITTING:
            seeding = self._generators, self._rank, self._seed
            seed_validation(*seeding, trainer.global_step, batch_idx, dataloader_idx)

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        loader = self.train_loader(trainer)
        if loader is None:
            return
        self.mixer.loader = loader  # a reloaded loader replaces the old one
        self.mixer.step_end(trainer, pl_module)
        if batch_idx + 1 >= trainer.num_training_batches:
            # Lightning ends the epoch here, maybe before the data runs out
            # (limit_train_batches): say so before a checkpoint of this batch is written.
            loader.end_epoch()
        log_data_metrics(loader, trainer, pl_module, batch_idx, self.log_every_n_steps)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.mixer.remember(trainer)  # what the last epoch's end logged
        self.mixer.loader = None  # set_weights after fit is refused
        self._trainer = None

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Match Lightning's epoch counters to the data; refuse a checkpoint without data.

        The loop counters are rewritten, before Lightning restores them, to where the data
        is (:func:`~.checkpoint_counters.match_epoch_counters`: a fit stopped mid-epoch counts
        that epoch as done). Without data (``allow_config_change``), the data starts where
        Lightning goes on.
        """
        datamodule = getattr(trainer, "datamodule", None)
        known = isinstance(datamodule, PhasedDataModule)
        held = match_checkpoint(trainer, checkpoint, checkpoint_key(datamodule) if known else None)
        require_data_position(checkpoint, datamodule)
        self._afresh = known and not held

    @override
    def state_dict(self) -> dict[str, Any]:
        trainer = self._trainer
        if trainer is not None and not getattr(trainer, "sanity_checking", False):
            # what was logged since the last batch end (an epoch's end, a validation)
            self.mixer.remember(trainer)
        history = self.history.state_dict(getattr(trainer, "global_step", None))
        return callback_state(self.phases, self._seed, self.mixer.state_dict(), history)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        allowed = self._datamodule is not None and self._datamodule.allow_config_change
        check_saved_state(state_dict, self.phases, allowed)
        # both added later: may be absent (no memory: the policy sees what is logged anew)
        self.mixer.load_state_dict(state_dict.get("source_metrics"))
        self.history.load_state(state_dict.get("data_history"))
        self._seed = restored_seed(self._seed, self.training_seed, state_dict.get("training_seed"))
