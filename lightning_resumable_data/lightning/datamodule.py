"""The LightningDataModule: its arguments, checked, and the hooks Lightning calls.

The loaders are built in :mod:`._loaders` (the mixture phases placed by :mod:`._phases`),
and the checkpoint entry is written and checked in :mod:`._module_state`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lightning_resumable_data.index.permutation import PermutationAlgorithm, check_algorithm
from lightning_resumable_data.lightning._checks import (
    check_batch_sizes,
    check_data_changes,
    check_dataset,
    check_weights_for,
)
from lightning_resumable_data.lightning._contract import PhasedDataModule
from lightning_resumable_data.lightning._hooks import show_hook
from lightning_resumable_data.lightning._loaders import eval_loader, train_loader
from lightning_resumable_data.lightning._module_state import (
    data_config,
    load_module_state,
    module_state,
)
from lightning_resumable_data.lightning.callback import ResumableDataCallback
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers._arguments import check_key_seed, check_keywords
from lightning_resumable_data.samplers.data_changes import DataChangePolicy
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.samplers.schedule import MixturePhase

__all__ = ["ResumableDataModule"]


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
        return_source: Mixture samples come as ``(sample, source_name)``, for per-source
            metrics (:func:`~lightning_resumable_data.lightning.mixing.log_source_values`).
        allow_config_change: Resume even if the seed or datasets changed (the position is
            kept; the order after it follows the new configuration).
        data_changes: What resuming over changed data (grown, shrunk, replaced; mixture
            sources reweighted, added, removed) does; ``None`` refuses it.

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
        data_changes: DataChangePolicy | None = DataChangePolicy(),  # noqa: B008 (frozen)
    ) -> None:
        super().__init__()
        datasets = {"train": train_dataset, "val": val_dataset, "test": test_dataset}
        for name, value in datasets.items():
            check_dataset(f"{name}_dataset", value)
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.test_dataset = test_dataset
        self.eval_batch_size = check_batch_sizes(batch_size, eval_batch_size)
        self.batch_size = batch_size
        self.num_workers = check_non_negative_int("num_workers", num_workers)
        self.seed = check_key_seed(seed)
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
        self.data_changes = check_data_changes(data_changes)
        if not isinstance(return_source, bool):
            raise TypeError(f"return_source={return_source!r} must be True or False.")
        self.return_source = return_source
        self.phases: tuple[MixturePhase, ...] = ()  # set by ResumableDataCallback.setup
        self.train_loader: StatefulDataLoader | None = None
        self._loader_state: dict[str, Any] | None = None  # restored, applied at build
        self._saved_global_step = 0  # the optimizer step the restored position belongs to
        self._loader_trainer: pl.Trainer | None = None  # the trainer that built train_loader
        self._removed_sources: dict[str, int] | None = None  # the saved sources, if some left

    @property
    def trainer(self) -> pl.Trainer | None:
        """The trainer this module is attached to (Lightning sets it in ``fit``)."""
        return self._trainer

    @trainer.setter
    def trainer(self, trainer: pl.Trainer | None) -> None:
        self._trainer = trainer
        if trainer is not None:
            _ensure_callback(trainer)

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
                "ResumableDataModule has no predict loader; return one from "
                "LightningModule.predict_dataloader (or another LightningDataModule)."
            )
        return cls(
            train_dataset,
            val_dataset,
            test_dataset,
            batch_size=batch_size,
            num_workers=num_workers,
            **datamodule_kwargs,
        )

    @override
    def train_dataloader(self) -> StatefulDataLoader:
        """The training loader; a rebuilt one continues from the live position."""
        return train_loader(self)

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
        return [] if self.val_dataset is None else eval_loader(self, self.val_dataset)

    @override
    def test_dataloader(self) -> DataLoader[Any] | list[Any]:
        """Unshuffled test loader (empty list without a test dataset)."""
        return [] if self.test_dataset is None else eval_loader(self, self.test_dataset)

    def config(self) -> dict[str, Any]:
        """What a resume compares: sources, sizes, seed, world size, batch size, phases."""
        return data_config(self)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The configuration and the training loader's position (what the model trained on)."""
        return module_state(self)

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
        load_module_state(self, state_dict)


PhasedDataModule.register(ResumableDataModule)  # what the callback recognises it by


def _ensure_callback(trainer: pl.Trainer) -> None:
    """Add a ``ResumableDataCallback`` to ``trainer`` unless it has one."""
    callbacks = getattr(trainer, "callbacks", None)
    if isinstance(callbacks, list) and not any(
        isinstance(c, ResumableDataCallback) for c in callbacks
    ):
        callbacks.append(ResumableDataCallback())  # Lightning orders checkpointing last
