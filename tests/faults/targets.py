"""Small instances of every stateful object of the package, for the bad-input and fuzz tests.

``TARGETS`` maps a name to a factory; :func:`advance` moves an object a few items into its
epoch the way training would, and :func:`take` reads what it yields next, as plain data, so
that two objects can be compared by behaviour.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch.utils.data import BatchSampler

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    RepeatBatchSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableSequentialSampler,
    ShardBatchSampler,
    ShardedDataLoader,
    ShardedSampler,
    ShardSampler,
    SkipBatchSampler,
    SkipSampler,
    StatefulDataLoader,
)

N = 10


class Target(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def mixture() -> MixtureDataset:
    return MixtureDataset({"a": range(6), "b": range(4), "c": range(3)})


def distributed(seed: int = 3, n: int = N, **kwargs: Any) -> DistributedSampler:
    return DistributedSampler(range(n), 2, 0, seed=seed, **kwargs)


def mixture_sampler(seed: int = 1, **kwargs: Any) -> MixtureSampler:
    """A mixture with a schedule: a change mid-epoch 0 and one at the start of epoch 1."""
    sampler = MixtureSampler(
        mixture(), {"a": 1.0, "b": 1.0, "c": 0.5}, 2, 0, seed=seed, samples_per_epoch=12, **kwargs
    )
    sampler.update_weights({"a": 0.0, "b": 1.0, "c": 1.0}, epoch=0, position=6)
    sampler.update_weights({"a": 1.0, "b": 0.0, "c": 1.0}, 2.0, epoch=1, position=0)
    return sampler


def sequential(n: int = N) -> ResumableSequentialSampler:
    return ResumableSequentialSampler(range(n))


def shuffle(seed: int = 1) -> ReproducibleShuffleSampler:
    return ReproducibleShuffleSampler(sequential(), seed)


def shuffle_batch() -> ReproducibleShuffleBatchSampler:
    return ReproducibleShuffleBatchSampler(BatchSampler(sequential(), 3, False), 2)


def repeat() -> RepeatSampler:
    return RepeatSampler(shuffle())


def repeat_batch() -> RepeatBatchSampler:
    return RepeatBatchSampler(BatchSampler(shuffle(), 3, False))


def shard(num_replicas: int = 2) -> ShardSampler:
    return ShardSampler(repeat(), num_replicas, 1)


def shard_batch() -> ShardBatchSampler:
    return ShardBatchSampler(repeat_batch(), 2, 0)


def skip() -> SkipSampler:
    return SkipSampler(shard(), 2)


def skip_batch() -> SkipBatchSampler:
    return SkipBatchSampler(shard_batch(), 1)


def sharded(seed: int = 2) -> ShardedSampler:
    return ShardedSampler([4, 0, 3, 3], 2, 0, seed=seed)


def loader_position() -> StatefulDataLoader:
    return StatefulDataLoader(range(N), batch_size=2, sampler=distributed())


def loader_mixture() -> StatefulDataLoader:
    return StatefulDataLoader(mixture(), batch_size=2, sampler=mixture_sampler())


def loader_skip() -> StatefulDataLoader:
    return StatefulDataLoader(range(N), batch_size=2, sampler=skip())


TARGETS: dict[str, Callable[[], Target]] = {
    "DistributedSampler": distributed,
    "DistributedSampler-feistel": lambda: DistributedSampler(
        range(N), 3, 1, seed=5, algorithm="feistel", drop_last=True
    ),
    "MixtureSampler": mixture_sampler,
    "ResumableSequentialSampler": sequential,
    "ReproducibleShuffleSampler": shuffle,
    "ReproducibleShuffleBatchSampler": shuffle_batch,
    "RepeatSampler": repeat,
    "RepeatBatchSampler": repeat_batch,
    "ShardSampler": shard,
    "ShardBatchSampler": shard_batch,
    "SkipSampler": skip,
    "SkipBatchSampler": skip_batch,
    "ShardedSampler": sharded,
    "StatefulDataLoader-position": loader_position,
    "StatefulDataLoader-mixture": loader_mixture,
    "StatefulDataLoader-skip": loader_skip,
}


def plain(item: Any) -> Any:
    """Batches and indices as plain JSON-like data (tensors to lists, keys to ints)."""
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, (list, tuple)):
        return [plain(i) for i in item]
    return int(item) if isinstance(item, int) else item


def advance(target: Target, items: int, epoch: int = 0) -> Iterator[Any] | None:
    """Set the epoch and read ``items``; return the live iterator (none for a loader).

    A loader refuses to load a state while an iterator is live: a ``StatefulDataLoader``'s
    iterator is dropped (as when an epoch is cut short), a ``ShardedDataLoader``'s epoch is
    read to its end.
    """
    set_epoch = getattr(target, "set_epoch", None)
    if set_epoch is not None and epoch:
        set_epoch(epoch)
    iterator = iter(target)
    list(itertools.islice(iterator, items))
    if isinstance(target, StatefulDataLoader):
        del iterator
        return None
    if isinstance(target, ShardedDataLoader):
        for _ in iterator:
            pass
        return None
    return iterator


def take(iterable: Any, items: int = 6) -> list[Any]:
    return [plain(i) for i in itertools.islice(iterable, items)]
