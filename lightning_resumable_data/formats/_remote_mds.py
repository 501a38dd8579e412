"""MDS shards in object storage: ``open_mds("s3://bucket/mds", cache=...)``.

:func:`open_remote_mds` reads the dataset's ``index.json`` once and lists its folder once;
each :class:`RemoteMDSShardReader` downloads its shard file (the compressed one where the
index names one, as ``MDSWriter`` uploads them) into the cache when it is loaded, and reads
it as :class:`~lightning_resumable_data.formats.MDSShardReader` reads a local one. Its name
is the index's ``raw_data`` basename, as for a local copy, so a run saved over the bucket
resumes over a local copy and back; its ``identity`` (ETag, version) is pinned in a state.

Example:
    >>> import json, os, tempfile
    >>> import numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> sample = np.array([2], "<u4").tobytes() + b"hi" + np.int64(7).tobytes()
    >>> offsets = np.array([1, 12, 12 + len(sample)], "<u4").tobytes()  # count, offsets
    >>> with open(os.path.join(folder, "shard.00000.mds"), "wb") as file:
    ...     _ = file.write(offsets + sample)
    >>> shard = {
    ...     "format": "mds", "version": 2, "samples": 1, "compression": None,
    ...     "column_names": ["s", "x"], "column_encodings": ["str", "int"],
    ...     "column_sizes": [None, 8], "zip_data": None,
    ...     "raw_data": {"basename": "shard.00000.mds", "bytes": 26}}
    >>> with open(os.path.join(folder, "index.json"), "w") as file:
    ...     _ = file.write(json.dumps({"version": 2, "shards": [shard]}))
    >>> cache = ShardCache(tempfile.mkdtemp())
    >>> readers = open_remote_mds("file://" + folder, cache=cache)
    >>> readers[0].name, cache.downloads, readers[0].read(0), cache.downloads
    ('shard.00000.mds', 0, {'s': 'hi', 'x': 7}, 1)
"""

from __future__ import annotations

from pathlib import Path

from lightning_resumable_data.formats._mds_index import INDEX_FILE, MDSShardInfo, parse_mds_index
from lightning_resumable_data.formats._mds_reader import MDSShardReader
from lightning_resumable_data.formats._remote import RemoteFolder, RemoteShard
from lightning_resumable_data.remote.cache import RemoteObject, ShardCache
from lightning_resumable_data.remote.urls import redact, url_name

__all__ = ["RemoteMDSShardReader", "open_remote_mds"]


class RemoteMDSShardReader(RemoteShard, MDSShardReader):
    """An :class:`~lightning_resumable_data.formats.MDSShardReader` of a shard at a URL.

    Built by ``open_mds(url, cache=...)``. :meth:`load` downloads the shard file into
    ``cache`` (verified: size, and MD5 where the store lists one), decompresses or reads it
    as a local shard, and releases the cached file (with ``preload=False`` it is mapped,
    which keeps its bytes readable if the cache evicts it meanwhile).

    Args:
        url: The dataset's folder URL.
        shard: The shard's entry of ``index.json``.
        remote: The shard file read: the compressed one if the index names one and the
            store has it, else the raw one (as listed: size, ETag, version).
        cache: Where the shard is downloaded.
        preload: See :class:`~lightning_resumable_data.formats.MDSShardReader`.
        allow_unsafe_types: Decode ``pkl`` columns (unpickling runs code named by the data).
    """

    def __init__(
        self,
        url: str,
        shard: MDSShardInfo,
        remote: RemoteObject,
        cache: ShardCache,
        *,
        preload: bool = True,
        allow_unsafe_types: bool = False,
    ) -> None:
        self.cache, self.remote = cache, remote
        super().__init__(redact(url), shard, preload=preload, allow_unsafe_types=allow_unsafe_types)

    @property
    def path(self) -> Path:
        """Where the shard file is (or will be) cached."""
        return self.cache.path_for(self.remote)

    def _source(self) -> tuple[str, int, str | None]:
        zipped = url_name(self.remote.url) == self.info.zip_basename
        compression = self.info.compression if zipped else None
        return redact(self.remote.url), self.remote.size, compression

    def open(self) -> None:
        """Nothing to do: the listing checked the file's size against the index at opening."""

    def __repr__(self) -> str:
        return f"RemoteMDSShardReader({self._source()[0]!r}, samples={len(self)})"


def open_remote_mds(
    url: str,
    *,
    cache: ShardCache | None = None,
    preload: bool = True,
    allow_unsafe_types: bool = False,
    verify: bool = False,
) -> list[RemoteMDSShardReader]:
    """``open_mds`` of a URL: the dataset's folder or its ``index.json``.

    Reads the index (one request) and lists the folder (one request): every shard file's
    size is checked against the index now, and no shard is downloaded. Without a listing
    (a plain HTTP server) the sizes are checked at download, or now with ``verify`` (a
    request per shard).

    Raises:
        FileNotFoundError: No ``index.json``, or a shard file listed in it is missing.
        ValueError: A malformed index, or a shard file whose size is not the index's.
        RemoteReadError: The store stayed unreachable through every retry.
    """
    base = url[: -len(INDEX_FILE)] if url.endswith("/" + INDEX_FILE) else url
    folder = RemoteFolder(base, cache)
    where = redact(folder.join(INDEX_FILE))
    text = folder.read_text(
        INDEX_FILE,
        f"no MDS index at {where!r}. Pass the URL of an MDS dataset's folder (MDSWriter "
        f"writes its {INDEX_FILE} when it finishes, or uploads it with out=(local, remote)).",
    )
    readers = []
    for info in parse_mds_index(text, where):
        remote = _shard_file(folder, info, verify)
        readers.append(
            RemoteMDSShardReader(
                folder.url, info, remote, folder.cache,
                preload=preload, allow_unsafe_types=allow_unsafe_types,
            )
        )  # fmt: skip
    return readers


def _shard_file(folder: RemoteFolder, info: MDSShardInfo, verify: bool) -> RemoteObject:
    """The file to read: the compressed one the index names, unless only the raw one is there."""
    what = "MDS shard file"
    if info.zip_basename is not None and info.zip_bytes is not None:
        zipped = folder.find(folder.join(info.zip_basename), info.zip_bytes)
        if zipped is not None or folder.find(folder.join(info.raw_basename)) is None:
            return folder.get(info.zip_basename, info.zip_bytes, what, verify=verify)
    return folder.get(info.raw_basename, info.raw_bytes, what, verify=verify)
