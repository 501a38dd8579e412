"""Which shards one process holds: at most ``max_resident`` (LRU), the next ones loading ahead.

:class:`ShardResidency` is the per-process state of a
:class:`~lightning_resumable_data.shards.DistributedShardedDataset`: the shards loaded or
loading (least recently read first), the thread that loads them in order, and the plan of
the ``prefetch`` shards read after the current one in the epoch's shard order (continuing
into the next epoch). The dataset builds one on first use in each process.

Example:
    >>> from lightning_resumable_data.shards import DatasetShardReader
    >>> readers = [DatasetShardReader(list(range(n))) for n in (2, 3, 4)]
    >>> residency = ShardResidency(readers, (2, 3, 4), max_resident=2, prefetch=1, seed=0,
    ...                            shuffle_shards=False)
    >>> residency.acquire(0, epoch=0).result()
    >>> residency.shutdown()
    >>> residency.stats.loads, residency.stats.prefetches
    (2, 1)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.sharding import shard_order
from lightning_resumable_data.shards.protocol import ShardReader

__all__ = ["ShardResidency", "ShardStats"]


@dataclass
class ShardStats:
    """What the dataset did in this process (each DataLoader worker counts its own).

    Attributes:
        loads: Shard loads started (on demand or by prefetch).
        prefetches: Of those, loads started ahead of the first read of the shard.
        evictions: Shards closed to stay within ``max_resident``.
        waits: Reads that had to wait for their shard's load to finish.
        peak_resident: Most shards resident (loaded or loading) at once.
    """

    loads: int = 0
    prefetches: int = 0
    evictions: int = 0
    waits: int = 0
    peak_resident: int = 0


class ShardResidency:
    """Per-process state: which shards are resident (LRU) and the loading thread.

    Args:
        readers: One reader per shard, in file order.
        shard_sizes: Samples per shard (an empty shard is never prefetched).
        max_resident: Most shards loaded (or loading) at once.
        prefetch: Shards loaded ahead of the one being read; 0 loads without a thread.
        seed: Seed of the shard order.
        shuffle_shards: Whether the shard order is shuffled every epoch.
    """

    def __init__(
        self,
        readers: Sequence[ShardReader[Any]],
        shard_sizes: Sequence[int],
        *,
        max_resident: int,
        prefetch: int,
        seed: int,
        shuffle_shards: bool,
    ) -> None:
        self.readers = readers
        self.shard_sizes = shard_sizes
        self.max_resident = max_resident
        self.prefetch = prefetch
        self.seed = seed
        self.shuffle_shards = shuffle_shards
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.cache: OrderedDict[int, Future[None]] = OrderedDict()
        self.executor = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
            if prefetch > 0
            else None
        )
        self.last: tuple[int, int] | None = None  # (epoch, shard) of the last read
        self.orders: dict[int, NDArray[np.int64]] = {}
        self.stats = ShardStats()
        self.warned_seed = False

    def submit(self, task: Callable[[], None]) -> Future[None]:
        """Run ``task`` on the loading thread (in order), or now without one."""
        if self.executor is not None:
            return self.executor.submit(task)
        future: Future[None] = Future()
        try:
            task()
            future.set_result(None)
        except Exception as error:
            future.set_exception(error)
        return future

    def acquire(self, shard: int, epoch: int) -> Future[None]:
        """Make ``shard`` resident and plan the prefetch after it; return its load."""
        with self.lock:
            # The shard being read, then the ones after it, become the most recently used
            # entries; at most prefetch + 1 <= max_resident of them, so eviction (from the
            # least recently used end) never touches them.
            future = self.cache.get(shard)
            if future is None:
                future = self._start_load(shard, ahead=False)
            else:
                self.cache.move_to_end(shard)
            if self.last != (epoch, shard):
                self.last = (epoch, shard)
                follow = getattr(self.readers[shard], "follow_order", None)
                if follow is not None:  # a remote reader downloads ahead in this order
                    follow(epoch, shard, self.seed, self.shuffle_shards, self.readers)
                for upcoming in self._upcoming(epoch, shard):
                    if upcoming in self.cache:
                        self.cache.move_to_end(upcoming)
                    else:
                        self._start_load(upcoming, ahead=True)
        return future

    def _start_load(self, shard: int, ahead: bool) -> Future[None]:
        # Evict first: its close is queued before this load, so the loading thread never
        # holds more than max_resident shards, even for a moment.
        while len(self.cache) >= self.max_resident:
            evicted, pending = self.cache.popitem(last=False)
            self.stats.evictions += 1
            if not pending.cancel():  # loading or loaded: close it after its load
                self.submit(self.readers[evicted].close)
        self.stats.loads += 1
        self.stats.prefetches += ahead
        future = self.submit(self.readers[shard].load)
        self.cache[shard] = future
        self.stats.peak_resident = max(self.stats.peak_resident, len(self.cache))
        return future

    def _upcoming(self, epoch: int, shard: int) -> list[int]:
        """The ``prefetch`` non-empty shards after ``shard`` in the epoch order (and beyond)."""
        if self.prefetch == 0:
            return []
        order = self._order(epoch)
        slot = int(np.flatnonzero(order == shard)[0])
        upcoming: list[int] = []
        while len(upcoming) < self.prefetch:
            slot += 1
            if slot == len(order):  # continue into the next epoch's order
                epoch, slot = epoch + 1, 0
                order = self._order(epoch)
            candidate = int(order[slot])
            if candidate == shard or candidate in upcoming:
                break  # fewer shards than prefetch + 1: all are planned
            if self.shard_sizes[candidate]:
                upcoming.append(candidate)
        return upcoming

    def _order(self, epoch: int) -> NDArray[np.int64]:
        order = self.orders.get(epoch)
        if order is None:
            if len(self.orders) > 2:
                self.orders.pop(min(self.orders))
            order = shard_order(len(self.readers), self.seed, epoch, self.shuffle_shards)
            self.orders[epoch] = order
        return order

    def shutdown(self) -> None:
        """Stop the loading thread, cancelling the loads not started."""
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
