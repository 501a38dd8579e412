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

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lightning_resumable_data.remote._directory import CacheDirectory, CacheLockTimeoutError
from lightning_resumable_data.remote.retry import RetryPolicy, with_retries
from lightning_resumable_data.remote.urls import filesystem, redact, url_name

__all__ = ["CacheLockTimeoutError", "RemoteObject", "RemoteRange", "ShardCache"]

_CHUNK: Final = 64 << 20  # one ranged GET per 64 MiB
_MD5: Final = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class RemoteObject:
    """One remote file as listed: URL, size, ETag and version (``None`` where unknown).

    The version is the store's own: S3's ``VersionId`` (versioned buckets), GCS's
    ``generation``, Azure's ``version_id``.
    """

    url: str
    size: int
    etag: str | None = None
    version: str | None = None
    md5: str | None = None  # hex MD5 of the bytes where the store gives it (checked)

    @property
    def identity(self) -> str | None:
        """What identifies the bytes (``"etag=..."``, ``"version=..."``), or ``None``.

        Example:
            >>> RemoteObject("s3://b/a.bin", 8, "9a0364b9", "3").identity
            'etag=9a0364b9 version=3'
        """
        named = (("etag", self.etag), ("version", self.version))
        return " ".join(f"{name}={value}" for name, value in named if value) or None

    @property
    def key(self) -> str:
        """The cache file name: the object's name, prefixed by a digest of URL, size, ETag."""
        digest = hashlib.sha1(f"{redact(self.url)}|{self.size}|{self.etag}".encode())
        return f"{digest.hexdigest()[:16]}-{url_name(self.url)}"


@dataclass(frozen=True, slots=True)
class RemoteRange:
    """Bytes ``[start, stop)`` of a remote object, cached as an entry of their own.

    Example:
        >>> part = RemoteRange(RemoteObject("s3://b/a.bin", 100, "9a03"), 64, 100)
        >>> part.size, part.key.endswith("-a.bin@64-100")
        (36, True)
    """

    whole: RemoteObject
    start: int
    stop: int

    @property
    def url(self) -> str:
        """The object's URL."""
        return self.whole.url

    @property
    def size(self) -> int:
        """Bytes in the range."""
        return self.stop - self.start

    @property
    def key(self) -> str:
        """The cache file name: the object's, then the range (a new object: new names)."""
        return f"{self.whole.key}@{self.start}-{self.stop}"


def _first(info: dict[str, Any], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = info.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value).strip('"')
    return None


def _md5(info: dict[str, Any], etag: str | None) -> str | None:
    """The MD5 of the bytes: S3's single-part ETag, GCS's ``md5Hash``, Azure's content MD5."""
    if etag and _MD5.match(etag):
        return etag
    gcs = info.get("md5Hash")
    if isinstance(gcs, str):
        with contextlib.suppress(ValueError):
            digest = base64.b64decode(gcs, validate=True)
            if len(digest) == 16:
                return digest.hex()
    settings = info.get("content_settings")
    azure = (
        settings.get("content_md5")
        if isinstance(settings, dict)
        else getattr(settings, "content_md5", None)
    )
    if isinstance(azure, (bytes, bytearray)) and len(azure) == 16:
        return bytes(azure).hex()
    return None


def _remote(url: str, info: dict[str, Any]) -> RemoteObject:
    etag = _first(info, ("ETag", "etag", "md5"))
    version = _first(info, ("VersionId", "version_id", "generation"))
    return RemoteObject(url, int(info["size"]), etag, version, _md5(info, etag))


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
        self._fs: dict[str, tuple[Any, int]] = {}
        self._priority: dict[str, int] = {}
        self._planner: Any = None
        self._lock = threading.Lock()

    # -- remote requests -----------------------------------------------------------------

    def _filesystem(self, url: str) -> tuple[Any, str]:
        scheme = url.split("://", 1)[0]
        entry = self._fs.get(scheme)
        if entry is None or entry[1] != os.getpid():  # a forked worker opens its own
            fs, _ = filesystem(
                url, self.storage_options, connect_timeout_s=self.retry.connect_timeout_s
            )
            self._fs[scheme] = entry = (fs, os.getpid())
        return entry[0], type(entry[0])._strip_protocol(url)

    def _request(self, fs: Any, method: str, path: str, **kwargs: Any) -> Any:
        """``fs.<method>(path, **kwargs)``, cancelled after ``retry.timeout_s`` seconds."""
        from fsspec.asyn import AsyncFileSystem, FSTimeoutError, sync

        timeout = self.retry.timeout_s
        if not isinstance(fs, AsyncFileSystem):  # local and in-memory files: no network
            return getattr(fs, method)(path, **kwargs)
        try:
            return sync(fs.loop, getattr(fs, "_" + method), path, timeout=timeout, **kwargs)
        except (FSTimeoutError, asyncio.TimeoutError) as error:
            raise TimeoutError(
                f"no complete answer within timeout_s={timeout:g} s (RetryPolicy)"
            ) from error

    def stat(self, url: str) -> RemoteObject:
        """Size and ETag of ``url`` (one request, retried)."""
        fs, path = self._filesystem(url)
        with contextlib.suppress(Exception):  # listings cached earlier may be stale; some
            fs.invalidate_cache(path)  # backends (adlfs) answer info() from the parent's
            fs.invalidate_cache(path.rstrip("/").rsplit("/", 1)[0])
        info = with_retries(lambda: self._request(fs, "info", path), url, self.retry, "stat")
        if info.get("size") is None:
            raise ValueError(f"{redact(url)!r} has no known size; the server must send one.")
        return _remote(url, info)

    def listing(self, url: str) -> dict[str, RemoteObject]:
        """The files directly under the directory ``url`` by name (one request, retried).

        Backends without listings (a plain HTTP server without an index page) give ``{}``.
        """
        fs, path = self._filesystem(url)
        with contextlib.suppress(Exception):
            fs.invalidate_cache(path)  # listed afresh: objects may have changed since
        try:
            entries = with_retries(
                lambda: self._request(fs, "ls", path, detail=True), url, self.retry, "list"
            )
        except (FileNotFoundError, NotImplementedError, PermissionError):
            return {}
        out = {}
        for info in entries:
            if info.get("type") == "file" and info.get("size") is not None:
                child = url.rstrip("/") + "/" + str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
                out[url_name(child)] = _remote(child, info)
        return out

    def read_bytes(self, url: str, start: int | None = None, stop: int | None = None) -> bytes:
        """Bytes ``[start, stop)`` of ``url`` (the whole object by default), retried.

        A range request where the server supports one; a server that ignores ``Range``
        (``python -m http.server``) sends the whole object, which is sliced here.
        """
        fs, path = self._filesystem(url)

        def attempt() -> bytes:
            data: bytes = self._request(fs, "cat_file", path, start=start, end=stop)
            if start is not None and stop is not None:
                if len(data) > stop - start:  # the whole object: the server ignored Range
                    data = data[start:stop]
                if len(data) < stop - start:  # a complete answer, short: not retried
                    raise ValueError(
                        f"{redact(url)!r} sent {len(data)} bytes of the range [{start}, {stop})"
                        " asked for: the object is truncated or was replaced after it was "
                        "listed. Restore it (or reopen the shards if the change is intended)."
                    )
            return data

        return with_retries(attempt, url, self.retry)

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
                if target.exists():  # not evicted (or the directory deleted) meanwhile
                    os.utime(target)
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
        state = {**self.__dict__, "_fs": {}, "_planner": None, "_priority": {}}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ShardCache({str(self.directory)!r}, max_bytes={self.max_bytes})"
