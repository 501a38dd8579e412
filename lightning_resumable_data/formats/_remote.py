"""Peers' formats in object storage: the index fetched once, each shard through the cache.

``open_mds``, ``open_litdata`` and ``open_webdataset`` take a URL (``s3://``, ``gs://``,
``az://``, ``http(s)://``, ``file://``) wherever they take a local directory or pattern, and
read it through the remote layer (:mod:`lightning_resumable_data.remote`), as
``open_token_shards(url, cache=...)`` does:

* the index (``index.json``) is read once, whole, and not cached (the cache's byte bound
  counts shards); each folder is listed once (:class:`RemoteFolder`) for every file's size,
  ETag and version, so opening 10^4 shards costs two requests;
* a shard is downloaded into the node's :class:`~lightning_resumable_data.remote.ShardCache`
  (verified, within ``max_bytes``) when it is loaded, then read as a local file; the sharded
  dataset's order plans the downloads ahead (:meth:`RemoteShard.follow_order`);
* each reader's ``identity`` is its object's ETag and version: the sampler's state pins it,
  and a resume over an object rewritten since is refused;
* every request is bounded and retried (:class:`~lightning_resumable_data.remote.RetryPolicy`):
  a stalled or failing server ends in a ``RemoteReadError``, never a hang.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "index.json"), "w") as file:
    ...     _ = file.write('{"version": 2}')
    >>> remote = RemoteFolder("file://" + folder, ShardCache(tempfile.mkdtemp()))
    >>> remote.read_text("index.json", "no index"), remote.get("index.json", 14, "index").size
    ('{"version": 2}', 14)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from lightning_resumable_data.remote.cache import RemoteObject, ShardCache
from lightning_resumable_data.remote.prefetch import follow_readers
from lightning_resumable_data.remote.tokens import default_cache
from lightning_resumable_data.remote.urls import join_url, redact

__all__ = ["RemoteFolder", "RemoteShard", "open_workers"]


class RemoteFolder:
    """A dataset's folder at ``url``, read through ``cache``: small files whole, listed once.

    Args:
        url: The folder's URL (a trailing ``/`` is ignored).
        cache: The node's cache; :func:`~lightning_resumable_data.remote.default_cache` if
            ``None``.
    """

    def __init__(self, url: str, cache: ShardCache | None = None) -> None:
        self.url = url.rstrip("/")
        self.cache = cache or default_cache()
        self._listings: dict[str, dict[str, RemoteObject]] = {}
        self._lock = threading.Lock()  # shards are opened on threads

    def join(self, name: str) -> str:
        """The URL of ``name`` (a path relative to the folder)."""
        return join_url(self.url, name)

    def read_text(self, name: str, missing: str) -> str:
        """The text of the file ``name``, read whole (one request, retried).

        Raises:
            FileNotFoundError: No such file; the message is ``missing``.
            ValueError: The file is not UTF-8 text.
        """
        url = self.join(name)
        try:
            data = self.cache.read_bytes(url)
        except FileNotFoundError:
            raise FileNotFoundError(missing) from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{redact(url)!r} is not an index: not UTF-8 text ({error})."
            ) from None

    def listing(self, url: str) -> dict[str, RemoteObject]:
        """The files directly in the folder ``url`` by name, listed once per folder.

        ``{}`` where the store gives no listing (a plain HTTP server) or the folder is empty.
        """
        with self._lock:
            listed = self._listings.get(url)
        if listed is None:
            listed = self.cache.listing(url)
            with self._lock:
                self._listings[url] = listed
        return listed

    def find(self, url: str, size: int | None = None) -> RemoteObject | None:
        """The object at ``url`` from its folder's listing, or ``None`` if it is not there.

        Without a listing: ``RemoteObject(url, size)`` when the index gave the ``size`` (no
        request; the download checks it), else a stat.
        """
        parent, _, name = url.rpartition("/")
        listed = self.listing(parent)
        if listed:
            return listed.get(name)
        if size is not None:
            return RemoteObject(url, size)
        try:
            return self.cache.stat(url)
        except FileNotFoundError:
            return None

    def get(self, name: str, size: int | None, what: str, *, verify: bool = False) -> RemoteObject:
        """The object of the file ``name``, checked against the ``size`` its index gives.

        ``verify``: without a listing, stat the file now (else its download checks it).

        Raises:
            FileNotFoundError: The index lists the file, the store does not have it.
            ValueError: Its size is not the index's.
        """
        url = self.join(name)
        found = self.find(url, None if verify else size)
        if found is None:
            raise FileNotFoundError(
                f"{what} {redact(url)!r} is listed in the dataset's index but does not exist. "
                "Upload it (the whole folder, as the writer wrote it), or rewrite the dataset."
            )
        if size is not None and found.size != size:
            raise ValueError(
                f"{what} {redact(url)!r} has {found.size} bytes, but the dataset's index says "
                f"{size}: it was truncated or rewritten after the index. Restore it, or "
                "rewrite the dataset."
            )
        return found


def open_workers(cache: ShardCache, sizes: Sequence[int], most: int = 8) -> int:
    """Threads to open shards that download whole at once: at most ``most``, within the bound.

    Each thread holds one shard in ``cache`` while it opens it, so a bounded cache limits
    them to the shards it holds at once (leaving half of it to the others of the node).

    Example:
        >>> import tempfile
        >>> bounded = ShardCache(tempfile.mkdtemp(), max_bytes=1200)
        >>> open_workers(bounded, [100, 300]), open_workers(ShardCache(tempfile.mkdtemp()), [100])
        (2, 8)
    """
    if cache.max_bytes is None or not sizes:
        return most
    return max(1, min(most, cache.max_bytes // (2 * max(max(sizes), 1))))


class RemoteShard:
    """What every reader of a shard at a URL shares: its object, pin, check and order.

    A reader class lists this first among its bases (it overrides the local reader's
    ``opened``, ``check`` and ``_local``); the reader sets ``cache`` and ``remote``.

    Attributes:
        cache: Where the shard is downloaded.
        remote: The shard file's object (URL, size, ETag, version) as listed at opening.
    """

    cache: ShardCache
    remote: RemoteObject
    _fetched: bool = False

    @property
    def identity(self) -> str | None:
        """The ETag and version the file had when it was listed (pinned in a state)."""
        return self.remote.identity

    @property
    def opened(self) -> bool:
        """Whether the shard was downloaded since it was listed (``check`` compares it then)."""
        return self._fetched

    @contextlib.contextmanager
    def _local(self, location: str) -> Iterator[str]:
        """The shard's cached file (downloaded if needed), kept while the block runs."""
        with self.cache.local(self.remote) as path:
            self._fetched = True
            yield str(path)

    def check(self) -> None:
        """Raise ``ValueError`` if the object changed size or identity since it was listed.

        A shard not downloaded yet was listed when it was opened: nothing to compare.
        """
        if self._fetched:
            self.cache.check_unchanged(self.remote)

    def follow_order(
        self, epoch: int, shard: int, seed: int, shuffle: bool, readers: list[Any]
    ) -> None:
        """Called when a read enters this shard: plan its download and the ones after it."""
        follow_readers(self.cache, self.remote, (epoch, shard, seed, shuffle), readers)
