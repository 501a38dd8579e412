"""The parts of a sharded loader, built or checked against each other.

:func:`sharded_dataset` and :func:`sharded_sampler` take what the user gave (shard readers
or a dataset, a sampler or the rank and world size) and return parts that agree; an
explicit argument that disagrees with a given part is an error naming both.
:func:`check_loader` checks that a factory's DataLoader batches in the sampler's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch.utils.data

from lightning_resumable_data.shards.dataset import DistributedShardedDataset
from lightning_resumable_data.shards.protocol import ShardReader
from lightning_resumable_data.shards.sampler import ShardedSampler

__all__ = ["check_loader", "sharded_dataset", "sharded_sampler"]


def _agree(name: str, given: Any, actual: Any, owner: str) -> Any:
    """``actual``, after checking that an explicitly ``given`` value agrees with it."""
    if given is not None and given != actual:
        raise ValueError(
            f"{name}={given!r} disagrees with the {owner}, which has {name}={actual!r}. Leave "
            f"{name} out (it is taken from the {owner}) or pass a matching {owner}."
        )
    return actual


def sharded_dataset(
    shards: Sequence[ShardReader[Any]] | DistributedShardedDataset[Any],
    seed: int | None,
    prefetches: int | None,
    max_resident: int | None,
) -> DistributedShardedDataset[Any]:
    """The given dataset (checked against the arguments), or one built over ``shards``."""
    if isinstance(shards, DistributedShardedDataset):
        _agree("seed", seed, shards.seed, "dataset")
        _agree("num_shard_prefetches", prefetches, shards.prefetch, "dataset")
        _agree("max_resident", max_resident, shards.max_resident, "dataset")
        return shards
    prefetches = 1 if prefetches is None else prefetches
    return DistributedShardedDataset(
        shards,
        max_resident=prefetches + 1 if max_resident is None else max_resident,
        prefetch=prefetches,
        seed=0 if seed is None else seed,
    )


def sharded_sampler(
    dataset: DistributedShardedDataset[Any],
    sampler: ShardedSampler | None,
    rank: int | None,
    world: int | None,
    drop_last: bool | None,
) -> ShardedSampler:
    """The given sampler (checked against ``dataset`` and the arguments), or the dataset's."""
    if sampler is None:
        return dataset.sampler(world, rank, drop_last=bool(drop_last))
    if not isinstance(sampler, ShardedSampler):
        raise TypeError(
            f"shard_sampler must be a ShardedSampler, got {type(sampler).__name__}; build "
            "it with dataset.sampler(num_replicas, rank)."
        )
    expected = dataset.sampler(sampler.num_replicas, sampler.rank, sampler.drop_last)
    if sampler.fingerprint != expected.fingerprint:
        raise ValueError(
            f"shard_sampler does not match the shards: its fingerprint is "
            f"{sampler.fingerprint}, the dataset's would be {expected.fingerprint}. Build it "
            "with dataset.sampler(num_replicas, rank)."
        )
    _agree("dp_rank", rank, sampler.rank, "shard_sampler")
    _agree("num_replicas", world, sampler.num_replicas, "shard_sampler")
    _agree("drop_last", drop_last, sampler.drop_last, "shard_sampler")
    return sampler


def check_loader(loader: Iterable[Any], sampler: ShardedSampler, batch_size: int) -> None:
    """A torch DataLoader from the factory must batch in the sampler's order."""
    if not isinstance(loader, torch.utils.data.DataLoader):
        return
    batch_sampler = loader.batch_sampler
    used = getattr(batch_sampler, "sampler", loader.sampler)
    size = getattr(batch_sampler, "batch_size", loader.batch_size)
    if used is not sampler or size != batch_size:
        raise ValueError(
            f"dataloader_factory built a DataLoader with batch_size={size} over "
            f"{type(used).__name__}; it must use the sampler it is given and "
            f"batch_size={batch_size}, because the position is counted in those "
            "batches."
        )
