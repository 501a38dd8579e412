"""A map-style dataset over shards: few shards resident, the next ones loaded in the background.

The dataset maps global sample indices to shards and reads them; which shards are resident
in each process, and which load ahead, is :mod:`~lightning_resumable_data.shards.residency`.
"""

from __future__ import annotations

import bisect
import os
import warnings
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

import numpy as np
import torch.utils.data

from lightning_resumable_data._rows import gather_rows
from lightning_resumable_data.index.sharding import check_shard_sizes, shard_runs, shard_starts
from lightning_resumable_data.pins import shard_pins
from lightning_resumable_data.randomness import KeyedBatch, SampleKey
from lightning_resumable_data.samplers._arguments import check_key_seed
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.shards.protocol import (
    ShardReader,
    check_readers,
    check_readers_unchanged,
)
from lightning_resumable_data.shards.residency import ShardResidency, ShardStats
from lightning_resumable_data.shards.sampler import ShardedSampler

__all__ = ["DistributedShardedDataset", "ShardStats"]

T = TypeVar("T")


class DistributedShardedDataset(torch.utils.data.Dataset[T], Generic[T]):
    """Samples of many shards as one map-style dataset, with few shards resident at a time.

    Index ``i`` is the global sample index in file order (shard 0's samples, then shard
    1's, ...). The order, and the split over ranks, belong to the sampler:
    :meth:`sampler` returns the matching :class:`ShardedSampler`, which visits the shards in
    a per-epoch shuffled order with each shard's samples shuffled, and strides that order
    over ranks so that every rank reads the same shard at the same time.

    Residency: at most ``max_resident`` shards are loaded (or loading) in each process
    (least recently read evicted first). When a read reaches a new shard, the next
    ``prefetch`` shards of the epoch's order (continuing into the next epoch) start loading
    on a background thread, so a sampler crossing a shard boundary finds the next shard
    ready. The dataset learns the epoch from the :class:`~lightning_resumable_data.SampleKey`
    indices the sampler yields, which reach DataLoader workers (persistent or not) intact;
    plain ``int`` indices use :meth:`set_epoch` instead (main process only).

    Departures from the llm-pytorch seed: ranks are not given contiguous chunks of the
    dataset; the sampler strides the global order, so a resume can change the world size and
    all ranks need the same one or two shards at a time. The tail is the sampler's
    ``drop_last``/padding rule, not a cut of the last shard.

    Args:
        readers: One reader per shard, in file order (e.g. from ``open_token_shards``).
        max_resident: Most shards loaded at once per process; at least ``prefetch + 1``.
        prefetch: Shards to load ahead of the one being read; 0 loads on demand only.
        seed: Seed of the shard and sample orders (the sampler's).
        shuffle_shards: Shuffle the shard order every epoch (passed to :meth:`sampler`).
        shuffle_samples: Shuffle the samples within each shard every epoch.

    Example:
        >>> from lightning_resumable_data.shards import DatasetShardReader
        >>> shards = [DatasetShardReader(list(range(s, s + 3)), name=f"s{s}") for s in (0, 3)]
        >>> dataset = DistributedShardedDataset(shards, max_resident=2, prefetch=1)
        >>> len(dataset), dataset[4]
        (6, 4)
        >>> sampler = dataset.sampler(num_replicas=1, rank=0)
        >>> sorted(dataset[i] for i in sampler)
        [0, 1, 2, 3, 4, 5]
        >>> dataset.close()
    """

    def __init__(
        self,
        readers: Sequence[ShardReader[T]],
        *,
        max_resident: int = 2,
        prefetch: int = 1,
        seed: int = 0,
        shuffle_shards: bool = True,
        shuffle_samples: bool = True,
    ) -> None:
        self.readers = readers = check_readers(readers, "DistributedShardedDataset")
        self.prefetch = check_non_negative_int("prefetch", prefetch)
        self.max_resident = check_non_negative_int("max_resident", max_resident)
        if self.max_resident < self.prefetch + 1:
            raise ValueError(
                f"max_resident={max_resident} cannot hold the shard being read plus "
                f"prefetch={prefetch} shards loaded ahead; use max_resident >= {prefetch + 1} "
                "or a smaller prefetch."
            )
        self.seed = check_key_seed(seed)
        self.shuffle_shards = bool(shuffle_shards)
        self.shuffle_samples = bool(shuffle_samples)
        sizes = check_shard_sizes([len(reader) for reader in readers])
        self.shard_sizes: tuple[int, ...] = tuple(int(n) for n in sizes)
        self.shard_names: tuple[str, ...] = tuple(reader.name for reader in readers)
        # What identifies each shard's bytes where the storage says (ETag, version): pinned
        # in a state, compared on resume. None for local files.
        self.shard_identities: tuple[str | None, ...] = tuple(
            getattr(reader, "identity", None) for reader in readers
        )
        self.pins = shard_pins(self.shard_names, self.shard_identities)  # pins.py
        self._starts: list[int] = shard_starts(sizes).astype(np.int64).tolist()
        self.epoch = 0
        self._residency: ShardResidency | None = None

    def __len__(self) -> int:
        return self._starts[-1]

    # -- the sampler ---------------------------------------------------------------------

    def sampler(
        self, num_replicas: int | None = None, rank: int | None = None, drop_last: bool = False
    ) -> ShardedSampler:
        """The :class:`ShardedSampler` of this dataset's seed and shuffle settings."""
        return ShardedSampler(
            self,
            num_replicas,
            rank,
            seed=self.seed,
            shuffle_shards=self.shuffle_shards,
            shuffle_samples=self.shuffle_samples,
            drop_last=drop_last,
        )

    def set_epoch(self, epoch: int) -> None:
        """Epoch used to plan prefetching for plain ``int`` indices (keys carry their own)."""
        self.epoch = check_non_negative_int("epoch", epoch)

    def check_shards(self) -> None:
        """Raise ``StateMismatchError`` if a shard's storage vanished or changed.

        Called when a state is loaded: a shard deleted or rewritten between save and resume
        is reported before any batch is read.
        """
        check_readers_unchanged(self.readers, self.shard_sizes)

    # -- reading -------------------------------------------------------------------------

    def locate(self, index: int) -> tuple[int, int]:
        """Return (shard, index within the shard) of global sample ``index``.

        Example:
            >>> from lightning_resumable_data.shards import DatasetShardReader
            >>> dataset = DistributedShardedDataset(
            ...     [DatasetShardReader([0] * n) for n in (2, 0, 3)])
            >>> dataset.locate(1), dataset.locate(2)
            ((0, 1), (2, 0))
        """
        if not 0 <= index < self._starts[-1]:
            raise IndexError(
                f"index {int(index)} is out of range for a sharded dataset of "
                f"{self._starts[-1]} samples."
            )
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, int(index) - self._starts[shard]

    def __getitem__(self, index: int) -> T:
        shard, local = self.locate(index)
        epoch = self.epoch
        if isinstance(index, SampleKey):
            epoch = index.epoch
            self._check_key_seed(index)
        self._wait(shard, epoch)
        return self.readers[shard].read(local)

    def __getitems__(self, indices: Sequence[int]) -> list[T]:
        """Read a batch: one shard lookup and one gather per run of samples of one shard.

        torch's fetcher calls it with a batch of indices (a
        :class:`~lightning_resumable_data.KeyedBatch` from this package's loader, which
        carries the epoch). Returns the samples in the order of ``indices``.

        Example:
            >>> from lightning_resumable_data.shards import DatasetShardReader
            >>> dataset = DistributedShardedDataset(
            ...     [DatasetShardReader(list(range(s, s + 3))) for s in (0, 3)])
            >>> dataset.__getitems__([4, 0, 5])
            [4, 0, 5]
            >>> dataset.close()
        """
        epoch = self.epoch
        if isinstance(indices, KeyedBatch):
            epoch = indices.epoch
            if indices.seed != self.seed:
                self._check_key_seed(SampleKey(0, seed=indices.seed, epoch=epoch, position=0))
            plain: Sequence[int] = indices[:]
        else:
            plain = indices
            if len(indices) and isinstance(indices[0], SampleKey):
                epoch = indices[0].epoch
                self._check_key_seed(indices[0])
        wanted = np.asarray(plain, dtype=np.int64)
        if not wanted.size:
            return []
        runs = shard_runs(self._starts, wanted)  # in range (or an IndexError naming one)
        rows = gather_rows(self.readers, runs, lambda s: self._wait(s, epoch), checked=True)
        if rows is not None:
            return cast(list[T], rows)
        out: list[T] = []
        for shard, local in runs:
            self._wait(shard, epoch)
            reader = self.readers[shard]
            read_many = getattr(reader, "read_many", None)
            if read_many is not None:
                out += read_many(local)
            else:
                out += [reader.read(i) for i in local.tolist()]
        return out

    def _wait(self, shard: int, epoch: int) -> None:
        """Make ``shard`` resident (and plan the prefetch after it); wait for its load."""
        future = self._state().acquire(shard, epoch)
        if not future.done():
            self._state().stats.waits += 1
        try:
            future.result()
        except BaseException:
            residency = self._state()
            with residency.lock:  # forget the failed load, so that a later read retries it
                if residency.cache.get(shard) is future:
                    del residency.cache[shard]
            raise

    def _check_key_seed(self, key: SampleKey) -> None:
        residency = self._state()
        if key.seed != self.seed and not residency.warned_seed:
            residency.warned_seed = True
            warnings.warn(
                f"DistributedShardedDataset(seed={self.seed}) is read through a sampler with "
                f"seed={key.seed}: prefetching follows seed {self.seed}'s shard order and loads "
                "the wrong shards. Build the sampler with dataset.sampler(...).",
                UserWarning,
                stacklevel=3,
            )

    # -- residency -----------------------------------------------------------------------

    @property
    def stats(self) -> ShardStats:
        """Counters of this process (see :class:`ShardStats`)."""
        return self._state().stats

    @property
    def resident_shards(self) -> tuple[int, ...]:
        """Shards loaded or loading in this process, least recently read first."""
        return tuple(self._state().cache)

    def _state(self) -> ShardResidency:
        residency = self._residency
        if residency is None or residency.pid != os.getpid():
            # First use, or a forked worker: the parent's loaded shards are copies here that
            # nothing tracks; release them and start an empty cache with its own thread.
            if residency is not None:
                for reader in self.readers:
                    reader.close()
            residency = self._residency = ShardResidency(
                self.readers,
                self.shard_sizes,
                max_resident=self.max_resident,
                prefetch=self.prefetch,
                seed=self.seed,
                shuffle_shards=self.shuffle_shards,
            )
        return residency

    def close(self) -> None:
        """Stop the loading thread and release every shard (in this process)."""
        residency, self._residency = self._residency, None
        if residency is not None:
            residency.shutdown()
        for reader in self.readers:
            reader.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration and readers, not the threads or the cache."""
        return {**self.__dict__, "_residency": None}

    def __repr__(self) -> str:
        return (
            f"DistributedShardedDataset({len(self.readers)} shards, {len(self)} samples, "
            f"max_resident={self.max_resident}, prefetch={self.prefetch}, seed={self.seed})"
        )
