"""The loaders a ``ResumableDataModule`` builds: training (resumable) and evaluation.

The training loader is a :class:`~lightning_resumable_data.StatefulDataLoader` over a
:class:`~lightning_resumable_data.DistributedSampler` (one dataset; for a
:class:`~lightning_resumable_data.DistributedShardedDataset` its own
:class:`~lightning_resumable_data.ShardedSampler`, shard by shard) or a
:class:`~lightning_resumable_data.MixtureSampler` (named sources, with the mixture phases
placed in it); a loader rebuilt by the same trainer continues from the live position, and a
restored position is applied to the loader it was restored for. The evaluation loaders are
plain torch loaders over unshuffled samplers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from lightning_resumable_data.datasets.mixture import MixtureDataset
from lightning_resumable_data.lightning._checks import check_dataset, check_weights_for
from lightning_resumable_data.lightning._module_state import mixture_sources
from lightning_resumable_data.lightning._phases import schedule_phases
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler
from lightning_resumable_data.shards.dataset import DistributedShardedDataset

if TYPE_CHECKING:
    from lightning_resumable_data.lightning.datamodule import ResumableDataModule

__all__ = ["eval_loader", "train_loader"]


def train_loader(dm: ResumableDataModule) -> StatefulDataLoader:
    """``dm``'s training loader; a rebuilt one continues from the live position."""
    if dm.train_dataset is None:
        raise ValueError(
            "ResumableDataModule has no train_dataset: pass one, or assign "
            "self.train_dataset in setup()."
        )
    check_dataset("train_dataset", dm.train_dataset)  # also when set in setup()
    check_weights_for(dm.train_dataset, dm.weights)
    num_replicas, rank = dm.world()
    sampler: DistributedSampler
    dataset: Any = dm.train_dataset
    if isinstance(dataset, Mapping):
        dataset = MixtureDataset(mixture_sources(dm), return_source=dm.return_source)
        sizes = {n: float(s) for n, s in zip(dataset.names, dataset.sizes, strict=True)}
        weights = dm.weights or {n: w for n, w in sizes.items() if n not in dataset.removed}
        sampler = MixtureSampler(
            dataset,
            weights,
            num_replicas,
            rank,
            seed=dm.seed,
            temperature=dm.temperature,
            samples_per_epoch=dm.samples_per_epoch,
            sample_keys=dm.sample_keys,
        )
        sampler.allow_schedule_change = dm.allow_config_change
        sampler.data_changes = dm.data_changes  # other weights or a removed source
        schedule_phases(
            sampler,
            dm.phases,
            batch_size=dm.batch_size,
            drop_last=dm.drop_last,
            trainer=dm.trainer,
            restored=dm._loader_state,
            saved_step=dm._saved_global_step,
        )
    else:
        if dm.phases:
            raise ValueError(
                "mixture phases need named sources: pass train_dataset as a mapping "
                "{'web': ..., 'code': ...}."
            )
        if dm.return_source:
            raise ValueError(
                "return_source=True needs named sources: pass train_dataset as a mapping "
                "{'web': ..., 'code': ...}, or leave return_source out."
            )
        if isinstance(dataset, DistributedShardedDataset):
            sampler = _sharded_sampler(dm, dataset, num_replicas, rank)
        else:
            sampler = DistributedSampler(
                dataset,
                num_replicas,
                rank,
                shuffle=dm.shuffle,
                seed=dm.seed,
                drop_last=dm.drop_last,
                algorithm=dm.algorithm,
                sample_keys=dm.sample_keys,
            )
            if getattr(dataset, "packing", None) is None:  # packed samples: not append-only
                sampler.data_changes = dm.data_changes
    max_epochs = dm.trainer.max_epochs if dm.trainer is not None else None
    if dm._loader_state is None and _reloading(dm):
        dm._loader_state = dm.train_loader.state_dict()  # type: ignore[union-attr]
    dm._loader_trainer = dm.trainer
    dm.train_loader = StatefulDataLoader(
        dataset,
        batch_size=dm.batch_size,
        sampler=sampler,
        drop_last=dm.drop_last,
        max_epochs=max_epochs if max_epochs is not None and max_epochs >= 0 else None,
        strict_resume=not dm.allow_config_change,
        **_loader_options(dm),
    )
    if dm._loader_state is not None:
        dm.train_loader.load_state_dict(dm._loader_state)
        dm._loader_state = None
    return dm.train_loader


def _sharded_sampler(
    dm: ResumableDataModule, dataset: DistributedShardedDataset[Any], num_replicas: int, rank: int
) -> DistributedSampler:
    """The dataset's own :class:`ShardedSampler`: shard by shard, as its prefetch expects.

    Raises:
        ValueError: The DataModule's seed is not the dataset's (its order and prefetch
            follow its own).
    """
    if dm.seed != dataset.seed % 2**64:
        raise ValueError(
            f"ResumableDataModule(seed={dm.seed}) and DistributedShardedDataset(seed="
            f"{dataset.seed}) disagree: a sharded dataset is read in its own order (shards, "
            "then samples, shuffled from its seed), which its prefetch follows. Pass "
            f"seed={dataset.seed} to ResumableDataModule."
        )
    sampler = dataset.sampler(num_replicas, rank, drop_last=dm.drop_last)
    sampler.sample_keys = dm.sample_keys
    return sampler


def _reloading(dm: ResumableDataModule) -> bool:
    """Whether the trainer that built the live loader asks for a new one.

    Lightning rebuilds the loader during a fit (``reload_dataloaders_every_n_epochs``),
    and a second ``trainer.fit`` on the same trainer continues its steps and epochs: in
    both cases the data continues from the live position. A new trainer starts afresh
    (or from its checkpoint).
    """
    return dm.train_loader is not None and dm._loader_trainer is dm.trainer


def eval_loader(dm: ResumableDataModule, dataset: Any) -> DataLoader[Any]:
    """An unshuffled, sharded validation or test loader over ``dataset``."""
    num_replicas, rank = dm.world()
    sampler = DistributedSampler(
        dataset, num_replicas, rank, shuffle=False, sample_keys=dm.sample_keys
    )
    return DataLoader(
        dataset, batch_size=dm.eval_batch_size, sampler=sampler, **_loader_options(dm)
    )


def _loader_options(dm: ResumableDataModule) -> dict[str, Any]:
    options: dict[str, Any] = {
        "num_workers": dm.num_workers,
        "pin_memory": dm.pin_memory,
        "persistent_workers": dm.persistent_workers,
        "collate_fn": dm.collate_fn,
    }
    if dm.num_workers > 0 and dm.prefetch_factor is not None:
        options["prefetch_factor"] = dm.prefetch_factor
    return options
