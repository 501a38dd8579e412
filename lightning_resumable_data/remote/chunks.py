"""Big remote files read by byte ranges, in chunks cached like shards.

A Megatron ``.bin`` or a Parquet file is often one object of hundreds of gigabytes, too big
to download (or to find the disk for) before the first sample. :class:`ChunkedRemoteFile`
reads ``[start, stop)`` of an object through the node's :class:`ShardCache`: the file is cut
into chunks of ``chunk_bytes`` (the last one short), each fetched once per node by one
ranged GET into a cache entry of its own (:meth:`ShardCache.fetch_range`: the same per-file
lock, byte bound, eviction order and length check as a shard), so the cache may be much
smaller than the file. Each read plans the chunks it touches (:meth:`ShardCache.follow`),
which download in parallel (at most ``prefetch_workers`` at once) and are evicted after the
unplanned entries; after a read that went forward through the file, the ``read_ahead``
chunks after it are planned, to download while the reader uses this one.

:class:`ChunkedRemoteFile` is also a read-only binary file object (``read``, ``seek``,
``tell``), which ``pyarrow`` reads a Parquet footer and column chunks from;
:class:`RemoteTokens` is a 1-D token array over it, indexed with arrays of positions like
a NumPy array (what :class:`~lightning_resumable_data.documents.DocumentCorpus` does).

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> source = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> np.arange(100, dtype=np.int32).tofile(source)
    >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=128)
    >>> file = ChunkedRemoteFile("file://" + source, cache, chunk_bytes=64)
    >>> tokens = RemoteTokens(file, np.int32)
    >>> len(tokens), tokens[np.array([99, 3, 40])].tolist()
    (100, [99, 3, 40])
    >>> cache.cached_bytes() <= 128
    True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from lightning_resumable_data.remote.cache import RemoteObject, RemoteRange, ShardCache
from lightning_resumable_data.remote.token_array import RemoteTokens
from lightning_resumable_data.remote.urls import redact

__all__ = ["DEFAULT_CHUNK_BYTES", "DEFAULT_READ_AHEAD", "ChunkedRemoteFile", "RemoteTokens"]

DEFAULT_CHUNK_BYTES: Final = 16 << 20
"""Bytes per chunk: one ranged GET and one cache entry (the last chunk of a file is short)."""
DEFAULT_READ_AHEAD: Final = 4
"""Chunks planned after the last one read while the reads go forward through the file."""
_ATTEMPTS: Final = 8  # a chunk evicted by another process between its fetch and its open


class ChunkedRemoteFile:
    """A remote file read by byte ranges through ``cache``, in chunks of ``chunk_bytes``.

    Args:
        url: The object's URL, or its :class:`RemoteObject` (size and ETag) if listed.
        cache: The node-local cache; ``default_cache()`` if ``None``.
        chunk_bytes: Bytes per chunk, a positive multiple of 8 (no token straddles two
            chunks). A read copies one chunk at a time out of the cache, which must hold
            ``prefetch_workers + 1`` chunks per process (one read, the prefetches in flight).
        read_ahead: Chunks planned ahead of a forward read (0: none).

    Raises:
        FileNotFoundError: No object at ``url``.
        ValueError: A bad ``chunk_bytes`` or ``read_ahead``.
    """

    def __init__(
        self,
        url: str | RemoteObject,
        cache: ShardCache | None = None,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        read_ahead: int = DEFAULT_READ_AHEAD,
    ) -> None:
        if isinstance(chunk_bytes, bool) or chunk_bytes < 8 or chunk_bytes % 8:
            raise ValueError(f"chunk_bytes={chunk_bytes!r} must be a positive multiple of 8.")
        if isinstance(read_ahead, bool) or read_ahead < 0:
            raise ValueError(f"read_ahead={read_ahead!r} must be an int >= 0.")
        from lightning_resumable_data.remote.tokens import default_cache

        self.cache = cache = cache or default_cache()
        self.remote = url if isinstance(url, RemoteObject) else cache.stat(url)
        self.chunk_bytes, self.read_ahead = int(chunk_bytes), int(read_ahead)
        self.chunks = -(-self.remote.size // self.chunk_bytes)
        self.closed = False
        self._position = 0
        self._planned: list[int] = [-1]  # the chunks of the last plan, read-ahead included
        self._last = -1  # the last chunk of the last read
        self._paths: dict[int, Path] = {}  # chunk files, by number (names cost a digest)

    @property
    def size(self) -> int:
        """The object's size in bytes."""
        return self.remote.size

    @property
    def name(self) -> str:
        """The object's URL, safe to print."""
        return redact(self.remote.url)

    def part(self, number: int) -> RemoteRange:
        """Chunk ``number``: its byte range of the object, the cache entry's identity."""
        start = number * self.chunk_bytes
        return RemoteRange(self.remote, start, min(start + self.chunk_bytes, self.remote.size))

    def plan(self, numbers: list[int]) -> None:
        """Before a read: tell the cache it needs chunks ``numbers`` (rising) now, in order.

        They download in parallel (prefetch) and are evicted last. Nothing is sent if they
        are planned already.
        """
        if not set(numbers) <= set(self._planned):
            self._follow(numbers)

    def advance(self, numbers: list[int]) -> None:
        """After a read of chunks ``numbers``: if it went forward, plan the next chunks.

        Forward: it started in or just after the last chunk of the last read. The
        ``read_ahead`` chunks after it then download while the reader uses this one.
        """
        first, last = numbers[0], numbers[-1]
        if self._last <= first <= self._last + 1:
            ahead = range(last + 1, min(last + 1 + self.read_ahead, self.chunks))
            if numbers + list(ahead) != self._planned:
                self._follow(numbers + list(ahead))
        self._last = last

    def _follow(self, numbers: list[int]) -> None:
        self.cache.follow([self.part(number) for number in numbers])
        self._planned = numbers

    def open_chunk(self, number: int) -> int:
        """A read-only descriptor of chunk ``number``, cached (downloaded) if needed.

        The descriptor keeps the bytes readable even if the chunk is evicted meanwhile.
        """
        part, path = self.part(number), self._paths.get(number)
        if path is None:
            path = self._paths[number] = self.cache.path_for(part)
        for _ in range(_ATTEMPTS):
            try:  # a cached chunk is complete (renamed into place): no lock, no request
                descriptor = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # not cached, or evicted since: fetch it
                self.cache.fetch_range(part)
                continue
            size = os.fstat(descriptor).st_size
            if size != part.size:
                os.close(descriptor)
                raise ValueError(
                    f"{str(path)!r} holds {size} bytes, but it caches bytes [{part.start}, "
                    f"{part.stop}) of {self.name!r}: the cache directory was modified. Delete it."
                )
            os.utime(descriptor)  # recently used: among the unplanned chunks, evicted last
            return descriptor
        where = str(self.cache.directory)
        raise RuntimeError(f"chunk {number} of {self.name!r} kept vanishing from {where!r}.")

    def pread(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the object (fewer past its end)."""
        start, stop = max(start, 0), min(stop, self.remote.size)
        if start >= stop:
            return b""
        numbers = list(range(start // self.chunk_bytes, (stop - 1) // self.chunk_bytes + 1))
        self.plan(numbers)
        pieces = []
        for number in numbers:  # one per chunk touched
            base = number * self.chunk_bytes
            begin, end = max(start, base) - base, min(stop, base + self.chunk_bytes) - base
            descriptor = self.open_chunk(number)
            try:
                pieces.append(os.pread(descriptor, end - begin, begin))
            finally:
                os.close(descriptor)
        self.advance(numbers)
        return b"".join(pieces)

    # -- a read-only binary file (what pyarrow.PythonFile calls) -------------------------

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position (all the rest if ``size < 0``)."""
        stop = self.remote.size if size is None or size < 0 else self._position + size
        data = self.pread(self._position, stop)
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the position (``SEEK_SET``, ``SEEK_CUR`` or ``SEEK_END``); return it."""
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.remote.size}
        position = base[whence] + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._position = position
        return position

    def tell(self) -> int:
        """The position."""
        return self._position

    def readable(self) -> bool:
        """``True``."""
        return True

    def seekable(self) -> bool:
        """``True``."""
        return True

    def writable(self) -> bool:
        """``False``: read-only."""
        return False

    def close(self) -> None:
        """Mark the file closed (the cache and its chunks stay)."""
        self.closed = True

    def __enter__(self) -> ChunkedRemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChunkedRemoteFile({self.name!r}, size={self.size}, chunk_bytes={self.chunk_bytes})"
