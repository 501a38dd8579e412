"""WebDataset shards in object storage: ``open_webdataset("s3://b/shard-{0000..0099}.tar")``.

A tar has no index of its own: its header-only index (:mod:`._wds_index`) is built once per
node, from the shard downloaded into the cache, and kept as a sidecar in the cache
directory (``<cache>/.wds-index/<object key>.index.npz``, outside the byte bound: a few
bytes per member), never written into the bucket. The sidecar's name holds the object's
size and ETag, so a rewritten object is indexed afresh. Later opens read only the sidecars
and the listing; a shard downloads again when it is loaded, if the cache evicted it.

URL patterns are what ``webdataset.WebDataset`` takes (brace patterns, ``::`` lists, lists of
URLs), plus a glob in the file name (``s3://b/train/*.tar``) or a folder (its ``*.tar``),
both from one listing of the folder.

Example:
    >>> import io, tarfile, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for shard in range(2):
    ...     with tarfile.open(f"{folder}/part-{shard}.tar", "w") as tar:
    ...         for key in range(3):
    ...             info = tarfile.TarInfo(f"{shard}{key}.cls")
    ...             info.size = 1
    ...             tar.addfile(info, io.BytesIO(str(key).encode()))
    >>> cache = ShardCache(tempfile.mkdtemp())
    >>> readers = open_remote_webdataset(["file://" + folder + "/part-{0..1}.tar"], cache=cache)
    >>> [len(r) for r in readers], readers[1].read(2)["cls"], readers[1].name
    ([3, 3], b'2', 'part-1.tar')
"""

from __future__ import annotations

import fnmatch
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from urllib.parse import urlsplit

from lightning_resumable_data.formats._remote import RemoteFolder, RemoteShard, open_workers
from lightning_resumable_data.formats._wds_decode import Decoders
from lightning_resumable_data.formats._wds_index import (
    INDEX_SUFFIX,
    FileStat,
    Stamp,
    TarIndex,
    build_index,
    read_sidecar,
    read_stamp,
    write_sidecar,
)
from lightning_resumable_data.formats._wds_paths import brace_expand
from lightning_resumable_data.formats._wds_reader import WebDatasetShardReader
from lightning_resumable_data.remote.cache import RemoteObject, ShardCache
from lightning_resumable_data.remote.urls import redact, url_name

__all__ = ["SIDECARS", "RemoteWebDatasetShardReader", "expand_urls", "open_remote_webdataset"]

SIDECARS = ".wds-index"
"""The cache directory's folder of WebDataset sidecar indexes."""


class _Listed(NamedTuple):
    """What the stamp of a shard in a store compares: its size (the ETag names the sidecar)."""

    st_size: int
    st_mtime_ns: int = 0


class RemoteWebDatasetShardReader(RemoteShard, WebDatasetShardReader):
    """A :class:`~lightning_resumable_data.formats.WebDatasetShardReader` of a ``.tar`` at a URL.

    Built by ``open_webdataset(url, cache=...)``. Opening reads the shard's sidecar index from
    the cache directory, or downloads the shard into the cache and scans its headers (then
    saves the sidecar there). :meth:`load` downloads the shard (if the cache evicted it) and
    reads it into memory (``preload``) or keeps it open. A sample's ``__url__`` is the URL.

    Args:
        remote: The shard's object, as listed (URL, size, ETag, version).
        cache: Where the shard and its sidecar index are kept.
        decode: See :class:`~lightning_resumable_data.formats.WebDatasetShardReader`.
        preload: See :class:`~lightning_resumable_data.formats.WebDatasetShardReader`.
        save_index: Save the sidecar in the cache directory (``False``: in memory only).
    """

    def __init__(
        self,
        remote: RemoteObject,
        cache: ShardCache,
        *,
        decode: bool | Decoders = False,
        preload: bool = True,
        save_index: bool = True,
    ) -> None:
        self.cache, self.remote = cache, remote
        super().__init__(redact(remote.url), decode=decode, preload=preload, save_index=save_index)

    @property
    def name(self) -> str:
        """The shard's file name (the last component of the URL)."""
        return url_name(self.remote.url)

    def _index_shard(self, save: bool) -> tuple[Stamp, TarIndex | None, str | None]:
        sidecars = self.cache.directory / SIDECARS
        sidecar = str(sidecars / (self.remote.key + INDEX_SUFFIX))
        stamp = read_stamp(sidecar, _Listed(self.remote.size))
        if stamp is not None:
            return stamp, None, sidecar
        index = self._scan()
        if save:
            sidecars.mkdir(parents=True, exist_ok=True)
        written = save and write_sidecar(sidecar, index)
        return index.stamp, index, sidecar if written else None

    def _scan(self) -> TarIndex:
        """The index from the headers of the shard, downloaded into the cache for it."""
        with self.cache.local(self.remote) as path:
            return build_index(str(path), _Listed(self.remote.size), self.path)

    def _read_index(self) -> TarIndex:
        sidecar = self.index_file
        index = None if sidecar is None else read_sidecar(sidecar, self._stamp)
        if index is None:  # the sidecar was deleted (the cache directory with it) or damaged
            index = self._scan()
            if index.stamp != self._stamp:
                raise self._stamp.changed(self.path, _Listed(self.remote.size), "")
            if sidecar is not None:
                os.makedirs(os.path.dirname(sidecar), exist_ok=True)
                write_sidecar(sidecar, index)
        return index

    def _matches(self, stat: FileStat) -> bool:
        return stat.st_size == self._stamp.size  # a cached copy: verified, its mtime is its own

    def __repr__(self) -> str:
        return f"RemoteWebDatasetShardReader({self.path!r}, samples={len(self)})"


def _glob(pattern: str) -> bool:
    return any(char in pattern for char in "*?[")


def _signed(url: str) -> bool:
    """An HTTP(S) URL with a query string (a presigned URL): one object, named as it is."""
    return url.lower().startswith(("http://", "https://")) and bool(urlsplit(url).query)


def expand_urls(parts: list[str], folder: RemoteFolder) -> list[RemoteObject]:
    """The shards that the URL patterns ``parts`` name, in order, as listed.

    Each part is brace-expanded; a URL whose file name holds ``*``, ``?`` or ``[`` is a
    glob (its folder's matches, sorted); one that ends with ``/``, or names no file of its
    folder's listing (nor a ``.tar`` where the store gives no listing), stands for the
    folder's ``*.tar`` files (sorted). A folder is listed once.

    Raises:
        FileNotFoundError: A shard, glob or folder matches nothing.
        ValueError: A glob in a folder name (only file names are matched).
    """
    found: list[RemoteObject] = []
    for part in parts:
        for url in brace_expand(part):
            matches = _shards(url, folder)
            if not matches:
                raise FileNotFoundError(
                    f"{redact(url)!r} names no WebDataset shard: no such object, no folder of "
                    f".tar files, no match of a glob (from {redact(part)!r}). Check the URL, "
                    "the storage_options, or upload the shards."
                )
            found += matches
    return found


def _shards(url: str, folder: RemoteFolder) -> list[RemoteObject]:
    """The shards one brace-expanded URL names (see :func:`expand_urls`)."""
    if _signed(url):
        return [folder.cache.stat(url)]
    parent, _, name = url.rpartition("/")
    if _glob(parent.partition("://")[2]):
        raise ValueError(
            f"{redact(url)!r} has a glob in a folder name; only the file name is matched in "
            "a store. Name the folders (a brace pattern: {train,val}/*.tar)."
        )
    listed = folder.listing(parent) if name else {}
    if _glob(name):
        return [listed[n] for n in sorted(listed) if fnmatch.fnmatchcase(n, name)]
    if name in listed:
        return [listed[name]]
    if name.endswith(".tar") and not listed:  # no listing: the object itself, if it is there
        shard = folder.find(url)
        return [] if shard is None else [shard]
    inside = folder.listing(url.rstrip("/"))  # a folder
    return [inside[n] for n in sorted(inside) if n.endswith(".tar")]


def open_remote_webdataset(
    parts: list[str],
    *,
    cache: ShardCache | None = None,
    decode: bool | Decoders = False,
    preload: bool = True,
    save_index: bool = True,
) -> list[RemoteWebDatasetShardReader]:
    """``open_webdataset`` of URL patterns ``parts`` (a ``::`` list split, or a list of URLs).

    The shards are listed (one request per folder); each shard without a sidecar in the
    cache is downloaded and indexed, on as many threads as the cache's bound allows (8 at
    most, see :func:`~lightning_resumable_data.formats._remote.open_workers`).

    Raises:
        FileNotFoundError: A shard, glob or folder matches nothing.
        ValueError: A shard is corrupt or compressed (see ``WebDatasetShardReader``).
        RemoteReadError: The store stayed unreachable through every retry.
    """
    folder = RemoteFolder(parts[0] if parts else "", cache)
    remotes = expand_urls(parts, folder)
    if not remotes:
        raise ValueError(f"{parts!r} names no shard; pass a URL, a brace pattern or a list.")
    open_one = functools.partial(
        RemoteWebDatasetShardReader, cache=folder.cache, decode=decode, preload=preload,
        save_index=save_index,
    )  # fmt: skip
    workers = min(len(remotes), open_workers(folder.cache, [r.size for r in remotes]))
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(open_one, remotes))
