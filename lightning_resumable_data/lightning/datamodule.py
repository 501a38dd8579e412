"""The LightningDataModule: samplers and loaders built from the trainer's strategy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lightning_resumable_data.datasets.mixture import MixtureDataset
from lightning_resumable_data.index.permutation import PermutationAlgorithm, check_algorithm
from lightning_resumable_data.lightning._checks import (
    check_dataset,
    check_keywords,
    check_weights_for,
    describe_sources,
)
from lightning_resumable_data.lightning._hooks import show_hook
from lightning_resumable_data.lightning.steps import limited_batches, step_position
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler, check_non_negative_int
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler, check_phases
from lightning_resumable_data.state import StateMismatchError

__all__ = ["ResumableDataModule"]

_STATE_VERSION = 1


class ResumableDataModule(pl.LightningDataModule):
    """Train, validation and test loaders that resume exactly under ``trainer.fit(ckpt_path=)``.

    The training loader is a :class:`~lightning_resumable_data.StatefulDataLoader` over a
    :class:`~lightning_resumable_data.DistributedSampler` (one dataset) or a
    :class:`~lightning_resumable_data.MixtureSampler` (a mapping of named sources). Rank and
    world size come from ``trainer.strategy.distributed_sampler_kwargs`` (DDP, FSDP,
    DeepSpeed, and model-parallel strategies with a data-parallel mesh), whatever launched
    the processes. The samplers subclass ``torch.utils.data.DistributedSampler``, so
    Lightning neither replaces nor wraps them, whatever ``use_distributed_sampler`` says.
    Lightning saves the loader's state in the checkpoint and restores it on resume. The
    module adds a :class:`~lightning_resumable_data.ResumableDataCallback` to the trainer
    when it has none (the callback tells the loader where Lightning's epochs end and which
    batch the model trained on); pass one yourself for mixture phases or its options. A
    loader rebuilt during a fit (``reload_dataloaders_every_n_epochs``) continues from the
    position of the one it replaces. See ``docs/lightning.md`` for what each Trainer setting
    does to the data order.

    Validation and test loaders are unshuffled and deterministic; with several ranks the
    last row is padded by wrapping around (``drop_last=False``), as torch does. Without a
    validation (test) dataset, Lightning sees no ``val_dataloader`` (``test_dataloader``),
    as for a DataModule that never defined it: no "no validation_step" warning (a subclass
    with its own ``setup()``, which may assign the dataset later, always shows them).

    Datasets can be passed in, or created by a subclass in :meth:`setup` (assign
    ``self.train_dataset`` and friends), which suits ``LightningCLI``: every other argument
    is a plain type-hinted value.

    Args:
        train_dataset: A map-style dataset, or a mapping of source names to datasets.
        val_dataset: Validation dataset.
        test_dataset: Test dataset.
        batch_size: Training samples per batch on each rank.
        eval_batch_size: Validation/test batch size (default: ``batch_size``).
        num_workers: Loader worker processes.
        seed: Seed of the order (and of the worker RNGs).
        shuffle: Shuffle the training order every epoch (single dataset).
        algorithm: ``"randperm"`` (torch's order) or ``"feistel"`` (O(1) memory).
        drop_last: Drop the ragged tail of an epoch (single dataset; mixtures always do).
        weights: Source weights for a mixture (default: proportional to source sizes).
        temperature: Temperature of the mixture weights.
        samples_per_epoch: Global samples per mixture epoch (default: all sources' sizes).
        pin_memory: Pin batches.
        persistent_workers: Keep workers between epochs.
        prefetch_factor: Batches each worker loads ahead.
        sample_keys: Give datasets :class:`~lightning_resumable_data.SampleKey` indices.
        collate_fn: Batch collation.
        return_source: Training samples of a mixture come as ``(sample, source_name)``
            (collated: ``[batch, names]``), for per-source metrics (see
            :func:`~lightning_resumable_data.lightning.mixing.log_source_values`).
        allow_config_change: Resume even if the seed or datasets changed (the position is
            kept; the order after it follows the new configuration).

    Example:
        >>> dm = ResumableDataModule(range(100), batch_size=8, seed=1)
        >>> dm.setup("fit")
        >>> loader = dm.train_dataloader()  # without a trainer: one process
        >>> len(loader), type(loader.sampler).__name__
        (13, 'DistributedSampler')
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> ResumableDataModule:
        """Check the keywords first, so that a misspelled one names its likely fix."""
        check_keywords(cls.__init__, cls.__name__, list(kwargs))
        return super().__new__(cls)

    def __init__(
        self,
        train_dataset: Dataset[Any]
        | Mapping[str, Dataset[Any]]
        | Sequence[Any]
        | Tensor
        | None = None,
        val_dataset: Dataset[Any] | Sequence[Any] | None = None,
        test_dataset: Dataset[Any] | Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        algorithm: PermutationAlgorithm = "randperm",
        drop_last: bool = False,
        weights: Mapping[str, float] | None = None,
        temperature: float = 1.0,
        samples_per_epoch: int | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        prefetch_factor: int | None = None,
        sample_keys: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        return_source: bool = False,
        allow_config_change: bool = False,
    ) -> None:
        super().__init__()
        for argument, value in (
            ("train_dataset", train_dataset),
            ("val_dataset", val_dataset),
            ("test_dataset", test_dataset),
        ):
            check_dataset(argument, value)
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.test_dataset = test_dataset
        if check_non_negative_int("batch_size", batch_size) == 0:
            raise ValueError("batch_size=0 must be >= 1.")
        self.batch_size = batch_size
        if (
            eval_batch_size is not None
            and check_non_negative_int("eval_batch_size", eval_batch_size) == 0
        ):
            raise ValueError("eval_batch_size=0 must be >= 1 (or None for batch_size).")
        self.eval_batch_size = batch_size if eval_batch_size is None else eval_batch_size
        self.num_workers = check_non_negative_int("num_workers", num_workers)
        self.seed = check_non_negative_int("seed", seed)
        self.shuffle = shuffle
        self.algorithm: PermutationAlgorithm = check_algorithm(algorithm)
        self.drop_last = drop_last
        self.weights = check_weights_for(train_dataset, weights)
        self.temperature = temperature
        self.samples_per_epoch = samples_per_epoch
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers and num_workers > 0
        self.prefetch_factor = prefetch_factor
        self.sample_keys = sample_keys
        self.collate_fn = collate_fn
        self.allow_config_change = allow_config_change
        if not isinstance(return_source, bool):
            raise TypeError(f"return_source={return_source!r} must be True or False.")
        self.return_source = return_source
        self.phases: tuple[MixturePhase, ...] = ()  # set by ResumableDataCallback.setup
        self.train_loader: StatefulDataLoader | None = None
        self._loader_state: dict[str, Any] | None = None  # restored, applied at build
        self._saved_global_step = 0  # the optimizer step the restored position belongs to
        self._loader_trainer: pl.Trainer | None = None  # the trainer that built train_loader

    @property
    def trainer(self) -> pl.Trainer | None:
        """The trainer this module is attached to (Lightning sets it in ``fit``)."""
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: pl.Trainer | None) -> None:
        self._trainer = trainer
        if trainer is not None:
            _ensure_callback(trainer)

    # -- where this process stands ----------------------------------------------------------

    def world(self) -> tuple[int, int]:
        """``(num_replicas, rank)`` of the data-parallel group, from the trainer's strategy."""
        trainer = self.trainer
        kwargs = getattr(trainer.strategy, "distributed_sampler_kwargs", None) if trainer else None
        if not kwargs:
            return 1, 0
        return int(kwargs["num_replicas"]), int(kwargs["rank"])

    @classmethod
    @override
    def from_datasets(
        cls,
        train_dataset: Any = None,
        val_dataset: Any = None,
        test_dataset: Any = None,
        predict_dataset: Any = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> ResumableDataModule:
        """Lightning's ``from_datasets``, resumable: the datasets become this module's.

        ``LightningDataModule.from_datasets`` would attach plain ``DataLoader`` hooks (no
        resumable position). Here it is ``cls(train, val, test, batch_size=...,
        num_workers=..., **datamodule_kwargs)``; a mapping of training datasets is a mixture
        of named sources (give ``weights``), not several loaders.

        Raises:
            ValueError: ``predict_dataset`` is given (this module has no predict loader).

        Example:
            >>> dm = ResumableDataModule.from_datasets(range(8), batch_size=4)
            >>> dm.train_dataset, dm.batch_size
            (range(0, 8), 4)
        """
        if predict_dataset is not None:
            raise ValueError(
                "ResumableDataModule has no predict loader; pass predict_dataset to a "
                "LightningDataModule of its own, or return its DataLoader from "
                "LightningModule.predict_dataloader."
            )
        return cls(
            train_dataset,
            val_dataset,
            test_dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            **datamodule_kwargs,
        )

    # -- loaders --------------------------------------------------------------------------

    @override
    def train_dataloader(self) -> StatefulDataLoader:
        """The training loader; a rebuilt one continues from the live position."""
        if self.train_dataset is None:
            raise ValueError(
                "ResumableDataModule has no train_dataset: pass one, or assign "
                "self.train_dataset in setup()."
            )
        check_dataset("train_dataset", self.train_dataset)  # also when set in setup()
        check_weights_for(self.train_dataset, self.weights)
        num_replicas, rank = self.world()
        sampler: DistributedSampler
        dataset: Any = self.train_dataset
        if isinstance(dataset, Mapping):
            dataset = MixtureDataset(dataset, return_source=self.return_source)
            weights = self.weights or dict(
                zip(dataset.names, map(float, dataset.sizes), strict=True)
            )
            sampler = MixtureSampler(
                dataset,
                weights,
                num_replicas,
                rank,
                seed=self.seed,
                temperature=self.temperature,
                samples_per_epoch=self.samples_per_epoch,
                sample_keys=self.sample_keys,
            )
            sampler.allow_schedule_change = self.allow_config_change
            self._schedule_phases(sampler)
        else:
            if self.phases:
                raise ValueError(
                    "mixture phases need named sources: pass train_dataset as a mapping "
                    "{'web': ..., 'code': ...}."
                )
            if self.return_source:
                raise ValueError(
                    "return_source=True needs named sources: pass train_dataset as a mapping "
                    "{'web': ..., 'code': ...}, or leave return_source out."
                )
            sampler = DistributedSampler(
                dataset,
                num_replicas,
                rank,
                shuffle=self.shuffle,
                seed=self.seed,
                drop_last=self.drop_last,
                algorithm=self.algorithm,
                sample_keys=self.sample_keys,
            )
        max_epochs = self.trainer.max_epochs if self.trainer is not None else None
        if self._loader_state is None and self._reloading():
            self._loader_state = self.train_loader.state_dict()  # type: ignore[union-attr]
        self._loader_trainer = self.trainer
        self.train_loader = StatefulDataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            drop_last=self.drop_last,
            max_epochs=max_epochs if max_epochs is not None and max_epochs >= 0 else None,
            strict_resume=not self.allow_config_change,
            **self._loader_options(),
        )
        if self._loader_state is not None:
            self.train_loader.load_state_dict(self._loader_state)
            self._loader_state = None
        return self.train_loader

    def _reloading(self) -> bool:
        """Whether the trainer that built the live loader asks for a new one.

        Lightning rebuilds the loader during a fit (``reload_dataloaders_every_n_epochs``),
        and a second ``trainer.fit`` on the same trainer continues its steps and epochs: in
        both cases the data continues from the live position. A new trainer starts afresh
        (or from its checkpoint).
        """
        return self.train_loader is not None and self._loader_trainer is self.trainer

    def _schedule_phases(self, sampler: MixtureSampler) -> None:
        """Install the phases as weight changes at exact (epoch, position)s, before any read.

        A ``start_step`` phase starts with the first batch of that optimizer step, counted as
        Lightning counts steps (``accumulate_grad_batches``, a step at every epoch's end,
        ``limit_train_batches``) in the current layout (batch size x world size). On a resume
        under another layout, the phases already passed keep the saved positions (they come
        with the restored state) and later ones are placed from the resume point on.
        """
        check_phases(self.phases)
        per_rank = len(sampler)
        batches = per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)
        trainer = self.trainer
        limit = getattr(trainer, "limit_train_batches", 1.0)
        batches = limited_batches(batches, limit if limit is not None else 1.0)
        if batches == 0:
            raise ValueError(
                f"batch_size={self.batch_size} is larger than a rank's share of a mixture "
                f"epoch ({per_rank}); lower it or raise samples_per_epoch."
            )
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        step_samples = self.batch_size * sampler.num_replicas
        known = self._resume_point(sampler, step_samples)
        if known:
            sampler.allow_schedule_change = True  # the phases were checked unchanged
        for phase in self.phases:
            if phase.start_epoch is not None:
                epoch, position = phase.start_epoch, 0
                if known and (epoch, position) <= (known["epoch"], known["consumed"]):
                    continue  # passed: the saved schedule has it
            else:
                assert phase.start_step is not None
                if known and phase.start_step < known["from_step"]:
                    continue  # passed: the saved schedule has it
                epoch, position = step_position(
                    phase.start_step,
                    batches=batches,
                    step_samples=step_samples,
                    accumulate=accumulate,
                    **known,
                )
            sampler.update_weights(phase.weights, phase.temperature, epoch=epoch, position=position)

    def _resume_point(self, sampler: MixtureSampler, step_samples: int) -> dict[str, int]:
        """Where the resumed step begins, for a resume under a changed layout, else ``{}``."""
        state = self._loader_state
        if state is None:
            return {}
        same_layout = (state.get("batch_size"), state.get("num_replicas")) == (
            self.batch_size,
            sampler.num_replicas,
        )
        if same_layout:
            return {}  # the phases land where they did: the schedules must agree exactly
        consumed = int(state["consumed"])
        return {
            "from_step": self._saved_global_step,
            "epoch": int(state["epoch"]),
            "batch": consumed // step_samples,
            "consumed": consumed,
        }

    def _eval_loader(self, dataset: Any) -> DataLoader[Any]:
        num_replicas, rank = self.world()
        sampler = DistributedSampler(
            dataset, num_replicas, rank, shuffle=False, sample_keys=self.sample_keys
        )
        return DataLoader(
            dataset, batch_size=self.eval_batch_size, sampler=sampler, **self._loader_options()
        )

    def _loader_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "collate_fn": self.collate_fn,
        }
        if self.num_workers > 0 and self.prefetch_factor is not None:
            options["prefetch_factor"] = self.prefetch_factor
        return options

    @property
    def val_dataset(self) -> Dataset[Any] | Sequence[Any] | None:
        """The validation dataset; while ``None``, Lightning sees no ``val_dataloader``."""
        return self._val_dataset

    @val_dataset.setter
    def val_dataset(self, dataset: Dataset[Any] | Sequence[Any] | None) -> None:
        self._val_dataset = dataset
        show_hook(self, "val_dataloader", dataset is not None, ResumableDataModule)

    @property
    def test_dataset(self) -> Dataset[Any] | Sequence[Any] | None:
        """The test dataset; while ``None``, Lightning sees no ``test_dataloader``."""
        return self._test_dataset

    @test_dataset.setter
    def test_dataset(self, dataset: Dataset[Any] | Sequence[Any] | None) -> None:
        self._test_dataset = dataset
        show_hook(self, "test_dataloader", dataset is not None, ResumableDataModule)

    @override
    def val_dataloader(self) -> DataLoader[Any] | list[Any]:
        """Unshuffled validation loader (empty list without a validation dataset)."""
        return [] if self.val_dataset is None else self._eval_loader(self.val_dataset)

    @override
    def test_dataloader(self) -> DataLoader[Any] | list[Any]:
        """Unshuffled test loader (empty list without a test dataset)."""
        return [] if self.test_dataset is None else self._eval_loader(self.test_dataset)

    # -- checkpoint -------------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """What a resume compares: sources, sizes, seed, world size, batch size, phases."""
        dataset = self.train_dataset
        if isinstance(dataset, Mapping):
            sources = {name: len(d) for name, d in dataset.items()}  # type: ignore[arg-type]
        else:
            sources = {"": len(dataset)} if dataset is not None else {}  # type: ignore[arg-type]
        num_replicas, _ = self.world()
        return {
            "sources": sources,
            "seed": self.seed,
            "num_replicas": num_replicas,
            "batch_size": self.batch_size,
            "phases": [_phase_dict(p) for p in self.phases],
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        """The configuration and the training loader's position (what the model trained on)."""
        state: dict[str, Any] = {"version": _STATE_VERSION, "config": self.config()}
        if self.train_loader is not None:
            state["train_loader"] = self.train_loader.state_dict()
            state["global_step"] = int(getattr(self.trainer, "global_step", 0))
        return state

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Compare the saved configuration with this one before training starts.

        A changed world size or batch size resumes elastically; a change of sources, sizes,
        seed or phases raises, unless ``allow_config_change=True``. Only a fit restores the
        position: what ``trainer.validate``, ``test`` or ``predict`` load with ``ckpt_path``
        is ignored, so evaluating a checkpoint never moves the data of a later fit.

        Raises:
            StateMismatchError: The configuration changed and the change was not allowed.
        """
        stage = getattr(getattr(self.trainer, "state", None), "fn", None)  # None: no trainer
        if stage is not None and stage != TrainerFn.FITTING:
            return
        saved = state_dict.get("config") if isinstance(state_dict, Mapping) else None
        if not isinstance(saved, Mapping):
            raise StateMismatchError(
                "Cannot resume ResumableDataModule: the checkpoint has no data configuration. "
                "It was written without this data module; start a fresh run."
            )
        now = self.config()
        changed = {
            k: (saved.get(k), now[k])
            for k in ("sources", "seed", "phases")
            if saved.get(k) != now[k]
        }
        if changed.get("phases") and not now["phases"] and not self.allow_config_change:
            raise StateMismatchError(
                f"Cannot resume: the checkpoint's data position follows mixture phases "
                f"{saved.get('phases')!r}, and this run has none. Add "
                "ResumableDataCallback(phases=[MixturePhase(...), ...]) with the same phases "
                "to the trainer's callbacks."
            )
        if changed and not self.allow_config_change:
            details = "; ".join(
                describe_sources(a, b) if k == "sources" else f"{k}: saved {a!r}, now {b!r}"
                for k, (a, b) in changed.items()
            )
            raise StateMismatchError(
                f"Cannot resume: the data configuration changed ({details}). The resumed run "
                "would not see the batches the interrupted run would have seen. Restore the "
                "saved configuration, or pass ResumableDataModule(allow_config_change=True) "
                "to accept the change."
            )
        loader_state = state_dict.get("train_loader")
        self._loader_state = dict(loader_state) if isinstance(loader_state, Mapping) else None
        self._saved_global_step = int(state_dict.get("global_step", 0))
        shape = [
            (k, saved.get(k), now[k])
            for k in ("num_replicas", "batch_size")
            if saved.get(k) != now[k]
        ]
        if shape:
            rank_zero_info(
                "Elastic resume: "
                + ", ".join(f"{k} {a} -> {b}" for k, a, b in shape)
                + ". The rest of the epoch is spread over the new layout; every sample is "
                "still seen once."
            )


def _ensure_callback(trainer: pl.Trainer) -> None:
    """Add a ``ResumableDataCallback`` to ``trainer`` unless it has one."""
    from lightning_resumable_data.lightning.callback import ResumableDataCallback

    callbacks = getattr(trainer, "callbacks", None)
    if isinstance(callbacks, list) and not any(
        isinstance(c, ResumableDataCallback) for c in callbacks
    ):
        callbacks.append(ResumableDataCallback())  # Lightning orders checkpointing last


def _phase_dict(phase: MixturePhase) -> dict[str, Any]:
    return {
        "start_step": phase.start_step,
        "start_epoch": phase.start_epoch,
        "weights": dict(phase.weights),
        "temperature": phase.temperature,
    }
