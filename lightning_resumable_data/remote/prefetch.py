"""Download the shards ahead of the reader, in the order it will read them.

The sampler's epoch order is known in advance (:func:`upcoming_shards`), so the cache can
download exactly the shards this rank reads next, in that order, instead of guessing from
the access pattern. :class:`Prefetcher` keeps at most ``prefetch_workers`` downloads and
``prefetch_bytes`` bytes in flight, and plans no further ahead than ``max_bytes`` allows
(the nearest shards first), so prefetching never pushes out a shard needed sooner.

A prefetch that fails is forgotten: the reader's own fetch of that shard retries it and
raises the error where it belongs, in the read.

A reader of a remote shard calls :func:`follow_readers` when the sharded dataset enters its
shard: every reader of the list with a ``remote`` object in the same cache (token shards,
MDS, LitData and WebDataset shards alike) is planned in the epoch order.

Example:
    >>> list(upcoming_shards(4, seed=0, shuffle=False, epoch=0, shard=2))  # into epoch 1
    [3, 0, 1]
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lightning_resumable_data.index.sharding import shard_order
from lightning_resumable_data.remote.objects import RemoteObject, RemoteRange

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = ["Prefetcher", "follow_readers", "upcoming_shards"]


def upcoming_shards(
    num_shards: int, seed: int, shuffle: bool, epoch: int, shard: int
) -> Iterator[int]:
    """The ``num_shards - 1`` shards read after ``shard`` of ``epoch``, in order.

    Continues into the next epoch's order (a shard read again soon after the epoch ends
    is listed at its place there).
    """
    order = shard_order(num_shards, seed, epoch, shuffle).tolist()
    slot = order.index(shard)
    following = order[slot + 1 :]
    if len(following) < num_shards - 1:
        following += shard_order(num_shards, seed, epoch + 1, shuffle).tolist()
    yield from following[: num_shards - 1]


def follow_readers(
    cache: ShardCache,
    remote: RemoteObject,
    order: tuple[int, int, int, bool],
    readers: Sequence[Any],
) -> None:
    """Hand ``cache`` the shard ``remote`` being read, then the remote shards read after it.

    ``order`` is ``(epoch, shard, seed, shuffle)`` of the read that enters ``readers[shard]``
    (what ``follow_order`` receives from the sharded dataset). A reader is planned if it has
    a ``remote`` object in this same ``cache``; the others (local files) are skipped.
    """
    epoch, shard, seed, shuffle = order
    ahead = [remote]
    for number in upcoming_shards(len(readers), seed, shuffle, epoch, shard):
        reader = readers[number]
        other = getattr(reader, "remote", None)
        if isinstance(other, RemoteObject) and getattr(reader, "cache", None) is cache:
            ahead.append(other)
    cache.follow(ahead)


class Prefetcher:
    """Background downloads into a :class:`ShardCache`, for one process."""

    def __init__(self, cache: ShardCache) -> None:
        self.pid = os.getpid()
        self.cache = cache
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            cache.prefetch_workers, thread_name_prefix="remote-prefetch"
        )
        self._plan: list[RemoteObject | RemoteRange] = []
        self._inflight: dict[str, Future[None]] = {}
        self._inflight_bytes = 0
        self._closed = False
        self.started = 0  # prefetch downloads started (for tests and stats)

    def plan(self, upcoming: list[RemoteObject | RemoteRange]) -> None:
        """Replace the order ahead (``upcoming[0]`` is being read) and start downloads."""
        with self._lock:
            self._plan = upcoming
            self._pump()

    def _pump(self) -> None:
        """Start the next downloads of the plan within the bounds (holding the lock)."""
        cache = self.cache
        if self._closed or cache.prefetch_bytes == 0:
            return
        budget = cache.max_bytes if cache.max_bytes is not None else float("inf")
        planned = 0
        for rank, remote in enumerate(self._plan):
            planned += remote.size
            if planned > budget:
                break  # not room for it without evicting a nearer shard
            if rank == 0 or remote.key in self._inflight or cache.path_for(remote).exists():
                continue
            if len(self._inflight) >= cache.prefetch_workers:
                break
            if self._inflight and self._inflight_bytes + remote.size > cache.prefetch_bytes:
                break
            self._inflight_bytes += remote.size
            self.started += 1
            self._inflight[remote.key] = self._executor.submit(self._download, remote, rank)

    def _download(self, remote: RemoteObject | RemoteRange, rank: int) -> None:
        try:
            if hasattr(remote, "whole"):  # a RemoteRange: a chunk of a file read by ranges
                self.cache.fetch_range(remote, rank=rank)  # type: ignore[arg-type]
            else:
                self.cache.fetch(remote, rank=rank)
        except Exception:
            pass
        finally:
            with self._lock:
                self._inflight.pop(remote.key, None)
                self._inflight_bytes -= remote.size
                self._pump()

    def wait(self, remote: RemoteObject) -> None:
        """Wait for a prefetch download of ``remote`` in flight, if any."""
        future = self._inflight.get(remote.key)
        if future is not None:
            with contextlib.suppress(CancelledError):  # closed meanwhile: fetch it ourselves
                future.result()

    def close(self) -> None:
        """Cancel the queued downloads and wait for the running ones."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
