"""The Callback: mixture phases, the trained position, logging, and a config check on resume."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_resumable_data.lightning.checkpoint_counters import (
    data_position,
    match_epoch_counters,
)
from lightning_resumable_data.lightning.datamodule import ResumableDataModule, _phase_dict
from lightning_resumable_data.lightning.guard import PositionGuard, Verify
from lightning_resumable_data.lightning.mixing import OnlineMixer, Policy
from lightning_resumable_data.lightning.progress import (
    TrainedBatches,
    align_progress,
    resume_mismatch,
    trained_position,
)
from lightning_resumable_data.loader import RestoredPosition, StatefulDataLoader
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler, check_phases
from lightning_resumable_data.seeding import (
    data_parallel_rank,
    run_seed,
    seed_training_step,
    seed_validation_batch,
)
from lightning_resumable_data.state import ResumeWarning, StateMismatchError

__all__ = ["ResumableDataCallback"]

_STATE_VERSION = 1


class ResumableDataCallback(pl.Callback):
    """Keeps the data position exact through checkpoints, and runs the mixture schedule.

    * **Phases**: hands its :class:`~lightning_resumable_data.MixturePhase` list to the
      :class:`ResumableDataModule`, which installs each phase in the sampler as a weight
      change at the exact global position of its step, before any batch is read — so the
      phase starts at that step on every rank, however far the workers prefetch.
    * **Position**: the position written into a checkpoint is Lightning's own count of the
      batches trained (its fit loop's counters, read when the checkpoint is written), so it
      is exact whichever hook saves it, in any order of the callbacks, and however far
      Lightning fetches ahead.
    * **Resume**: at the start of a fit, checks the restored position against Lightning's
      restored counters, and brings Lightning's epoch and batch counters to the data
      position (after a ``max_time``, ``max_steps`` or ``should_stop`` stop mid-epoch, whose
      epoch-end hooks ran, ``max_epochs`` then counts whole data epochs).
    * **Check** (``verify="raise"``, the default): at every training batch, in O(1), the
      batch Lightning trains must begin where its counters say; otherwise a
      :class:`~lightning_resumable_data.DataPositionError` names the step, the expected and
      the actual position.
    * **Logging**: every ``log_every_n_steps`` steps, logs the weights in force and the
      samples drawn per source this epoch (``data/weight/<source>``,
      ``data/drawn/<source>``) through the trainer's logger.
    * **Epochs**: ends the data epoch where Lightning ends it (``limit_train_batches``),
      and after a resume under another batch or world size restates Lightning's batch count
      of the resumed epoch in the new layout (see ``docs/lightning.md``).
    * **Training randomness** (``seed_training=True``): at the start of every training
      batch of ``fit``, reseeds torch (CPU and every CUDA device), NumPy's global RNG and
      ``random`` from (training seed, global step, data-parallel rank, micro-batch), and
      every validation batch of ``fit`` (sanity check included) from a stream of its own:
      dropout and other draws are the same after a resume (see ``docs/randomness.md``).
    * **Checkpoint**: saves its phases, training seed and the online mixer's memory of the
      per-source values a policy reads (under the stable ``state_key``
      ``"ResumableDataCallback"``) and, on resume, refuses changed phases unless the
      :class:`ResumableDataModule` was built with ``allow_config_change=True``.

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
        seed_training: Reseed the global RNGs at every training and validation batch of
            ``fit``; ``False`` leaves them to you (``seed_everything`` and your own code).
        training_seed: The training seed; ``None`` takes the DataModule's ``seed`` (0
            without a :class:`ResumableDataModule`), keyed with ``seed_everything``'s seed
            when one is set, and on resume the checkpoint's.
        verify: What a data position that disagrees with the trainer's counters does:
            ``"raise"`` a :class:`~lightning_resumable_data.DataPositionError`, ``"warn"``
            once, or ``"off"``.
    """

    def __init__(
        self,
        phases: Sequence[MixturePhase] = (),
        *,
        log_every_n_steps: int | None = None,
        seed_training: bool = True,
        training_seed: int | None = None,
        policy: Policy | None = None,
        policy_every_n_steps: int | None = None,
        verify: Verify = "raise",
    ) -> None:
        self.phases = tuple(phases)
        for phase in self.phases:
            if not isinstance(phase, MixturePhase):
                raise TypeError(
                    f"phases must be MixturePhase values, got {phase!r}; write "
                    "MixturePhase(start_step=..., weights={...})."
                )
        check_phases(self.phases)
        self.log_every_n_steps = log_every_n_steps
        if not isinstance(seed_training, bool):
            raise TypeError(
                f"seed_training={seed_training!r} must be True or False; pass "
                "training_seed=... to choose the seed."
            )
        if training_seed is not None and (
            isinstance(training_seed, bool)
            or not isinstance(training_seed, int)
            or not 0 <= training_seed < 2**64
        ):
            raise ValueError(
                f"training_seed={training_seed!r} must be an int in [0, 2**64), or None for "
                "the DataModule's seed."
            )
        self.seed_training = seed_training
        self.training_seed = training_seed
        self._seed: int | None = None  # the run's training seed, resolved in setup/restore
        self._rank = 0
        self._datamodule: ResumableDataModule | None = None
        self._epoch_started = True
        self._trainer: pl.Trainer | None = None  # while fitting: what state_dict reads
        self.mixer = OnlineMixer(policy, policy_every_n_steps)
        self.guard = PositionGuard(verify)

    def set_weights(self, weights: object, temperature: float | None = None) -> None:
        """Change the mixture weights during ``fit``, from any hook (see ``docs/mixing.md``).

        Checked now; applied at the next sync point (the next optimizer step with one rank,
        every ``policy_every_n_steps`` with several, rank 0's request winning), from the
        first step no rank has handed out, and recorded in the checkpoint.

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
        if isinstance(datamodule, ResumableDataModule):
            datamodule.phases = self.phases
            self._datamodule = datamodule
        elif self.phases:
            raise ValueError(
                "ResumableDataCallback(phases=...) needs a ResumableDataModule: pass "
                "trainer.fit(model, datamodule=ResumableDataModule(...))."
            )
        if stage == "fit" and not getattr(trainer, "global_step", 0):
            # a fit from scratch: Lightning's callback_metrics start empty, so does the
            # memory (a checkpoint's replaces it: load_state_dict; a fit continuing on the
            # same trainer keeps it, as one uninterrupted fit would)
            self.mixer.load_state_dict(None)
        if self.seed_training and stage == "fit":
            strategy = getattr(trainer, "strategy", None)  # None: a stand-in trainer
            self._rank = data_parallel_rank(trainer) if strategy is not None else 0
            seed = self.training_seed
            if seed is None:
                base = datamodule.seed if isinstance(datamodule, ResumableDataModule) else 0
                seed = run_seed(base)
            # one seed for all ranks (a restored checkpoint's replaces it: load_state_dict)
            self._seed = seed if strategy is None else int(strategy.broadcast(seed, src=0))

    @staticmethod
    def train_loader(trainer: pl.Trainer) -> StatefulDataLoader | None:
        """The training loader of this package, if the trainer uses one."""
        loader = getattr(trainer.fit_loop, "_combined_loader", None)
        for candidate in getattr(loader, "flattened", []):
            if isinstance(candidate, StatefulDataLoader):
                return candidate
        return None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = self.train_loader(trainer)
        self._epoch_started = False
        self._trainer = trainer
        if loader is None:
            rank_zero_warn(
                "ResumableDataCallback found no lightning_resumable_data.StatefulDataLoader "
                "among the training loaders, so it cannot keep the data position exact: a "
                "resume replays or skips what a plain DataLoader does. Use "
                "ResumableDataModule, or return a lightning_resumable_data.StatefulDataLoader "
                "from train_dataloader.",
                category=ResumeWarning,
            )
            return
        self.mixer.loader = loader
        self._set_limit(trainer, loader)  # before the position: it may end the epoch
        restored, loader.restored = loader.restored, None
        loader.track_trained(TrainedBatches(trainer))
        if loader.resume_mode == "position":
            self._start_position(trainer, loader, restored)

    def _start_position(
        self, trainer: pl.Trainer, loader: StatefulDataLoader, restored: RestoredPosition | None
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
            self.guard.report(problem)
        batch = align_progress(trainer, epoch, consumed, step_samples)
        self.guard.anchor(epoch, batch, consumed)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_started = True
        loader = self.train_loader(trainer)
        if loader is not None:
            self._set_limit(trainer, loader)  # a reloaded loader may have another length

    @staticmethod
    def _set_limit(trainer: pl.Trainer, loader: StatefulDataLoader) -> None:
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

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        loader = self.train_loader(trainer)
        if loader is not None and self.guard.mode != "off":
            handed = loader.take_handed()
            epoch, step_samples = trainer.current_epoch, loader.samples_per_step
            if handed is not None and not self.guard.matches(
                handed, epoch, batch_idx, step_samples
            ):  # O(1); the step is read only for the message
                self.guard.check(
                    handed,
                    epoch=epoch,
                    batch=batch_idx,
                    step=trainer.global_step,
                    step_samples=step_samples,
                )
        if not self._epoch_started:  # resumed mid-epoch: Lightning skipped the epoch start
            self._epoch_started = True
            bar = trainer.progress_bar_callback
            if bar is not None and getattr(bar, "is_enabled", True):
                bar.on_train_epoch_start(trainer, pl_module)  # restores its total and title
        if self._seed is not None:  # last: nothing this hook does draws after it
            seed_training_step(
                self._rank,
                self._seed,
                trainer.global_step,
                _micro_batch(trainer, pl_module, batch_idx),
            )

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
            seed_validation_batch(
                self._rank, self._seed, trainer.global_step, batch_idx, dataloader_idx
            )

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
        period = self.log_every_n_steps
        if period is None:  # the trainer's setting (set by its logger connector)
            period = int(getattr(trainer, "log_every_n_steps", 50))
        if period and (batch_idx + 1) % period == 0:
            self._log(loader, pl_module)

    @staticmethod
    def _log(loader: StatefulDataLoader, pl_module: pl.LightningModule) -> None:
        sampler = loader.position_sampler
        if not isinstance(sampler, MixtureSampler):
            return
        consumed = loader.state_dict()["consumed"]
        metrics = {
            f"data/weight/{k}": v for k, v in sampler.weights_at(loader.epoch, consumed).items()
        }
        drawn = sampler.source_counts(consumed, loader.epoch)
        metrics |= {f"data/drawn/{k}": float(v) for k, v in drawn.items()}
        pl_module.log_dict(metrics, rank_zero_only=True)

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

        A checkpoint of a fit stopped mid-epoch counts the epoch as done (its epoch-end hooks
        ran), and one written after a resume from an epoch's last batch counts the next
        epoch as not started; the loop counters are rewritten, before Lightning restores
        them, to where the data is (:func:`~.checkpoint_counters.match_epoch_counters`).
        """
        datamodule = getattr(trainer, "datamodule", None)
        key = type(datamodule).__qualname__ if isinstance(datamodule, ResumableDataModule) else None
        position = data_position(checkpoint, key)
        fitting = getattr(getattr(trainer, "state", None), "fn", None) == TrainerFn.FITTING
        if position is not None and fitting:
            match_epoch_counters(checkpoint, *position)
        if not isinstance(datamodule, ResumableDataModule) or datamodule.allow_config_change:
            return
        state = checkpoint.get(type(datamodule).__qualname__)
        if not isinstance(state, dict) or "train_loader" not in state:
            raise StateMismatchError(
                "Cannot resume: the checkpoint holds no data position (no "
                f"{type(datamodule).__qualname__} state with a train_loader). Resuming would "
                "start the epoch again and replay what was trained. Resume from a checkpoint "
                "written with ResumableDataModule, or pass "
                "ResumableDataModule(allow_config_change=True) to start the data afresh."
            )

    @override
    def state_dict(self) -> dict[str, Any]:
        trainer = self._trainer
        if trainer is not None and not getattr(trainer, "sanity_checking", False):
            # what was logged since the last batch end (an epoch's end, a validation)
            self.mixer.remember(trainer)
        return {
            "version": _STATE_VERSION,
            "phases": [_phase_dict(p) for p in self.phases],
            "training_seed": self._seed,
            "source_metrics": self.mixer.state_dict(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict):
            raise TypeError(
                f"ResumableDataCallback.load_state_dict expected the dict its state_dict() "
                f"wrote, got {type(state_dict).__name__}."
            )
        saved = state_dict.get("phases")
        now = [_phase_dict(p) for p in self.phases]
        allowed = self._datamodule is not None and self._datamodule.allow_config_change
        if saved == now or allowed:
            # both added later: may be absent (no memory: the policy sees what is logged anew)
            self.mixer.load_state_dict(state_dict.get("source_metrics"))
            self._restore_seed(state_dict.get("training_seed"))
            return
        if not now:
            raise StateMismatchError(
                f"Cannot resume: the checkpoint's data follows mixture phases {saved}, and this "
                "ResumableDataCallback has none. Pass "
                "ResumableDataCallback(phases=[MixturePhase(...), ...]) with the same phases."
            )
        raise StateMismatchError(
            f"Cannot resume: the mixture phases changed (saved {saved}, now {now}). The "
            "resumed run would not mix what the interrupted run mixed. Restore the saved "
            "phases, or pass ResumableDataModule(allow_config_change=True) to accept the "
            "change."
        )

    def _restore_seed(self, saved: object) -> None:
        """Continue with the checkpoint's training seed unless one was passed explicitly."""
        explicit = self.training_seed is not None
        if self._seed is None or explicit or isinstance(saved, bool) or not isinstance(saved, int):
            return
        if saved != self._seed:
            rank_zero_info(
                f"Resuming with the checkpoint's training seed {saved} (this run derived "
                f"{self._seed}: the DataModule's or seed_everything's seed changed), so the "
                "training randomness continues the interrupted run's. Pass "
                "ResumableDataCallback(training_seed=...) to choose another."
            )
            self._seed = saved


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


def _micro_batch(trainer: pl.Trainer, pl_module: pl.LightningModule, batch_idx: int) -> int:
    """The batch's index within its optimizer step: what tells its key from its step's others.

    Automatic optimization steps every ``accumulate_grad_batches`` batches of an epoch. Under
    manual optimization the step counter moves only when the module steps an optimizer, so
    the batch's index in the epoch tells apart batches that share a step.
    """
    if not pl_module.automatic_optimization:
        return batch_idx
    return batch_idx % max(1, int(trainer.accumulate_grad_batches))
