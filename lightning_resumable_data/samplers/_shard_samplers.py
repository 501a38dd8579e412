"""The composable shards: the items (or batches) ``i`` of an inner sampler with ``i % W == r``."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, TypeVar

from lightning_resumable_data.index.partition import check_rank
from lightning_resumable_data.samplers._composition import (
    Batch,
    Composable,
    Cursor,
    chunks_of,
    iter_from,
)

__all__ = ["ShardBatchSampler", "ShardSampler"]

T = TypeVar("T")


class _Shard(Composable[T]):
    def __init__(self, inner: Iterable[T], num_replicas: int, rank: int) -> None:
        super().__init__(inner)
        check_rank(num_replicas, rank)
        self.num_replicas, self.rank = int(num_replicas), int(rank)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The number of replicas (not the rank: every rank loads rank 0's state)."""
        return {"num_replicas": self.num_replicas}

    def __len__(self) -> int:
        """Return the items this rank yields from a finite inner (or one pass of a repeat)."""
        length = self._inner_length()
        return length // self.num_replicas + (self.rank < length % self.num_replicas)

    def _iterate(self) -> Iterator[T]:
        start = self._begin()
        source = iter_from(self.inner, start * self.num_replicas)
        mine = itertools.islice(source, self.rank, None, self.num_replicas)
        cursor = self._stream = Cursor()
        for chunk in chunks_of(mine):
            yield from cursor.enter(chunk)


class ShardSampler(_Shard[int]):
    """Yield the items ``i`` of an inner sampler with ``i % num_replicas == rank``.

    Shard after you repeat, so that every rank yields the same number of items. On a finite
    inner sampler rank ``r`` yields ``len // num_replicas + (r < len % num_replicas)``.
    ``set_skip(k)`` skips ``k * num_replicas`` inner items, in O(1) when the inner can.

    Args:
        sampler: The sampler to shard (the same on every rank).
        num_replicas: Number of shards, >= 1.
        rank: This shard, in ``[0, num_replicas)``.

    Example:
        >>> [list(ShardSampler(range(5), num_replicas=2, rank=r)) for r in range(2)]
        [[0, 2, 4], [1, 3]]
    """

    KIND: ClassVar[str] = "ShardSampler"

    def __init__(self, sampler: Iterable[int], num_replicas: int, rank: int) -> None:
        super().__init__(sampler, num_replicas, rank)


class ShardBatchSampler(_Shard[Batch]):
    """Yield the batches ``i`` of an inner batch sampler with ``i % num_replicas == rank``.

    Args:
        batch_sampler: The batch sampler to shard (the same on every rank).
        num_replicas: Number of shards, >= 1.
        rank: This shard, in ``[0, num_replicas)``.

    Example:
        >>> list(ShardBatchSampler([[0, 1], [2, 3], [4]], num_replicas=2, rank=0))
        [[0, 1], [4]]
    """

    KIND: ClassVar[str] = "ShardBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], num_replicas: int, rank: int) -> None:
        super().__init__(batch_sampler, num_replicas, rank)
