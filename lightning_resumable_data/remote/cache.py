"""A node-local cache of remote shards: atomic, verified, bounded, shared by processes.

Every rank and DataLoader worker of a node may share one cache directory. A shard is
downloaded by one process at a time (an exclusive ``flock`` on its lock file; the others
wait and then find it there), written to a temporary file and renamed into place, so a
reader never sees half a shard. The download is checked against the size the index or the
listing gave and, where the store lists an MD5 (S3's single-part ETag, GCS's ``md5Hash``,
Azure's content MD5), against that checksum: a truncated or replaced object is an error
naming the URL, never wrong tokens.
The cached file's name includes the size and ETag, so a replaced object is never served
from a stale copy.

``max_bytes`` bounds the files plus the downloads in flight (a temporary file is created
under the cache lock before its download starts and counts at its full size). To make
room, the cache deletes the files this process will not need soonest: first those outside
the upcoming order (:meth:`ShardCache.follow`, fed from the epoch order), oldest first, then
the upcoming ones from the farthest back. Files being read (a shared lock) are never
deleted. Nothing here is part of a checkpoint: a resume on other nodes, another cache
directory or none at all reads the same samples.

Example:
    >>> import tempfile
    >>> source = os.path.join(tempfile.mkdtemp(), "a.bin")
    >>> with open(source, "wb") as file:
    ...     _ = file.write(b"12345678")
    >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=1 << 20)
    >>> remote = cache.stat("file://" + source)
    >>> with cache.local(remote) as path:
    ...     path.read_bytes()
    b'12345678'
    >>> cache.cached_bytes()
    8
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from lightning_resumable_data.remote._directory import CacheDirectory, CacheLockTimeoutError
from lightning_resumable_data.remote.client import RemoteClient
from lightning_resumable_data.remote.objects import RemoteObject, RemoteRange
from lightning_resumable_data.remote.retry import RetryPolicy
from lightning_resumable_data.remote.urls import redact

__all__ = ["CacheLockTimeoutError", "RemoteObject", "RemoteRange", "ShardCache"]

_CHUNK: Final = 64 << 20  # one ranged GET per 64 MiB


class ShardCache:
    """Downloads remote files into ``directory`` and keeps at most ``max_bytes`` there.

    Args:
        directory: The node-local cache directory (created if needed), shared by every
            process of the node that reads the same data.
        max_bytes: Bound on the bytes of cached files plus downloads in flight; ``None``
            for no bound. Must hold the shards being read at once (with the default
            ``DistributedShardedDataset(max_resident=2)``, two shards per process).
        storage_options: fsspec filesystem options (endpoint, credentials, ...). They are
            never written to a state, a log or an error message.
        retry: Retries of transient errors (see :class:`RetryPolicy`).
        prefetch_bytes: Bound on the bytes of prefetch downloads in flight.
        prefetch_workers: Concurrent prefetch downloads per process.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int | None = None,
        storage_options: dict[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        prefetch_bytes: int = 512 << 20,
        prefetch_workers: int = 4,
    ) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or max_bytes < 1):
            raise ValueError(f"max_bytes={max_bytes!r} must be a positive int or None.")
        if prefetch_bytes < 0 or prefetch_workers < 1:
            raise ValueError(
                f"prefetch_bytes={prefetch_bytes} must be >= 0 and "
                f"prefetch_workers={prefetch_workers} >= 1."
            )
        self.directory = Path(directory).absolute()
        self.max_bytes = max_bytes
        self.storage_options = dict(storage_options or {})
        self.retry = retry or RetryPolicy()
        # A download that is alive writes a range at least every try's timeout.
        patience = self.retry.attempts * (self.retry.timeout_s + self.retry.cap_s)
        self._disk = CacheDirectory(self.directory, max_bytes, patience_s=patience)
        self.prefetch_bytes = prefetch_bytes
        self.prefetch_workers = prefetch_workers
        self.downloads = 0  # downloads this process completed (for tests and stats)
        self._client = RemoteClient(self.storage_options, self.retry)
        self._priority: dict[str, int] = {}
        self._planner: Any = None
        self._lock = threading.Lock()

    # -- remote requests -----------------------------------------------------------------

    def stat(self, url: str) -> RemoteObject:
        """Size and ETag of ``url`` (one request, retried)."""
        return self._client.stat(url)

    def listing(self, url: str) -> dict[str, RemoteObject]:
        """The files directly under the directory ``url`` by name (one request, retried).

        Backends without listings (a plain HTTP server without an index page) give ``{}``.
        """
        return self._client.listing(url)

    def read_bytes(self, url: str, start: int | None = None, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of ``url`` (the whole object by default), retried.

        A range request where the server supports one; a server that ignores ``Range``
        (``python -m http.server``) sends the whole object, which is sliced here.
        """
        return self._client.read_bytes(url, start, stop)

    def check_unchanged(self, remote: RemoteObject) -> None:
        """Raise ``ValueError`` if the object of ``remote`` now has another size or identity.

        One request (a stat), retried: what a reader's ``check()`` asks before a resume.
        """
        now = self.stat(remote.url)
        if (now.size, now.identity) != (remote.size, remote.identity):
            raise ValueError(
                f"{redact(remote.url)!r} now has {now.size} bytes ({now.identity}); it had "
                f"{remote.size} bytes ({remote.identity}) when it was opened: it was rewritten "
                "or truncated."
            )

    def _download(self, remote: RemoteObject, temporary: Path) -> None:
        """Write ``remote`` into ``temporary`` range by range, then verify it.

        The file grows as the ranges arrive: a process waiting for it sees the progress.
        """
        digest = hashlib.md5(usedforsecurity=False)
        with temporary.open("wb") as file:
            for start in range(0, remote.size, _CHUNK):
                part = self.read_bytes(remote.url, start, min(start + _CHUNK, remote.size))
                file.write(part)
                file.flush()
                digest.update(part)
        if remote.md5 is not None:
            actual = digest.hexdigest()
            if actual != remote.md5:
                raise ValueError(
                    f"{redact(remote.url)!r} has MD5 {actual}, but it was listed with MD5 "
                    f"{remote.md5}: the object changed after the shards were opened, or was "
                    "corrupted in transit. Restore it, or reopen the shards over the new data."
                )

    # -- the local files -----------------------------------------------------------------

    def path_for(self, remote: RemoteObject | RemoteRange) -> Path:
        """Where ``remote`` is (or will be) cached."""
        return self._disk.path(remote.key)

    def cached_bytes(self) -> int:
        """Bytes of the cached files and the downloads in flight (all processes)."""
        return self._disk.cached_bytes()

    def fetch(self, remote: RemoteObject, *, rank: int | None = None) -> Path | None:
        """Download ``remote`` unless it is cached; return its local path.

        ``rank=None``: needed now; any file not being read may be evicted for it, and an
        error is raised if there is no room. A prefetch passes its ``rank`` in the order
        ahead: it evicts only files needed later than it, and returns ``None`` if that
        does not make room.
        """
        hint = (
            "at least the largest shard times the shards resident per process, times the "
            "processes sharing the cache"
        )
        return self._fill(remote, rank, hint, lambda path: self._download(remote, path))

    def fetch_range(self, part: RemoteRange, *, rank: int | None = None) -> Path | None:
        """:meth:`fetch` for a byte range: one ranged GET into an entry of its own.

        The same lock, bound, eviction order and atomic rename as a whole file; the length
        is verified (an ETag is the whole object's checksum, so no MD5 here).
        """

        def write(path: Path) -> None:
            path.write_bytes(self.read_bytes(part.url, part.start, part.stop))

        return self._fill(part, rank, "or lower chunk_bytes", write)

    def _fill(
        self,
        entry: RemoteObject | RemoteRange,
        rank: int | None,
        hint: str,
        write: Callable[[Path], None],
    ) -> Path | None:
        """The entry's cached path, written by ``write`` into a reserved temporary first."""
        target = self.path_for(entry)
        if target.exists():
            return target
        with self._disk.locked(target, fcntl.LOCK_EX):
            if target.exists():  # another process downloaded it while we waited
                return target
            temporary = self._disk.reserve(target, entry.size, rank, self._priority)
            if temporary is None:
                if rank is not None:
                    return None
                raise ValueError(
                    f"ShardCache(max_bytes={self.max_bytes}) cannot hold {redact(entry.url)!r} "
                    f"({entry.size} bytes) next to the {self.cached_bytes()} bytes being read "
                    f"or downloaded in {str(self.directory)!r}. Raise max_bytes ({hint})."
                )
            try:
                write(temporary)
                self._disk.commit(temporary, target)
                self.downloads += 1
            finally:
                temporary.unlink(missing_ok=True)
        return target

    @contextlib.contextmanager
    def local(self, remote: RemoteObject) -> Iterator[Path]:
        """The cached path of ``remote`` (downloaded if needed), kept while the block runs.

        The shared lock held meanwhile keeps other processes from evicting the file.
        """
        for _ in range(8):
            planner = self._planner
            if planner is not None and planner.pid == os.getpid():  # not a forked parent's
                planner.wait(remote)
            target = self.fetch(remote)
            if target is None:  # pragma: no cover - fetch() without rank raises instead
                continue
            with self._disk.locked(target, fcntl.LOCK_SH):
                try:  # not evicted (or the directory deleted) meanwhile
                    os.utime(target)
                except FileNotFoundError:
                    continue  # deleted between the download and now: fetch it again
                yield target
                return
        raise RuntimeError(f"{redact(remote.url)!r} kept vanishing from {str(self.directory)!r}.")

    # -- the order ahead -----------------------------------------------------------------

    def follow(self, upcoming: Sequence[RemoteObject | RemoteRange]) -> None:
        """Plan by the order ahead: ``upcoming[0]`` is read now, the rest next, in order.

        Eviction keeps the nearest of them; the prefetcher downloads them in order within
        ``max_bytes`` and ``prefetch_bytes``.
        """
        from lightning_resumable_data.remote.prefetch import Prefetcher

        with self._lock:
            self._priority = {}
            for rank, remote in enumerate(upcoming):
                self._priority.setdefault(remote.key, rank)  # its first use counts
            planner = self._planner
            if planner is None or planner.pid != os.getpid():
                planner = self._planner = Prefetcher(self)
        planner.plan(list(upcoming))

    def close(self) -> None:
        """Stop the prefetch downloads of this process (a later read restarts them)."""
        planner, self._planner = self._planner, None
        if planner is not None:
            planner.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration only: a worker opens its own connections and threads."""
        state = {**self.__dict__, "_planner": None, "_priority": {}}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardCache({str(self.directory)!r}, max_bytes={self.max_bytes})"
