"""Token shards in object storage: ``open_token_shards("s3://...")`` and its reader.

:func:`open_remote_token_shards` fetches ``index.json`` first (into the cache, so the usual
validation applies), lists the directory once for sizes and ETags, and returns one
:class:`RemoteTokenShardReader` per shard without downloading any. A reader downloads its
shard into the :class:`~lightning_resumable_data.remote.ShardCache` when it is loaded and
then reads it like a local one. The readers' names are the file names, as for a local
directory, so a run saved over local shards resumes over the same shards in a bucket (and
back): the state holds no URL, cache or download information.

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> from lightning_resumable_data.shards import write_token_shards
    >>> directory = tempfile.mkdtemp()
    >>> _ = write_token_shards(directory, [np.arange(16)], seq_len=4, tokens_per_shard=8)
    >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=1 << 20)
    >>> readers = open_remote_token_shards("file://" + directory, cache=cache)
    >>> [r.name for r in readers], readers[1].read(0).tolist()
    (['shard_00000.bin', 'shard_00001.bin'], [8, 9, 10, 11])
"""

from __future__ import annotations

import fnmatch
import io
import os
import tempfile
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import DTypeLike

from lightning_resumable_data.remote.cache import RemoteObject, ShardCache
from lightning_resumable_data.remote.prefetch import follow_readers
from lightning_resumable_data.remote.urls import join_url, redact, url_name
from lightning_resumable_data.shards._urls import register_url_token_shards
from lightning_resumable_data.shards.token_index import INDEX_FILE, read_token_index
from lightning_resumable_data.shards.token_reader import TokenShardReader

__all__ = ["RemoteTokenShardReader", "default_cache", "open_remote_token_shards"]

_HEADER_BYTES = 1 << 16  # enough for any .npy header written by numpy


def default_cache() -> ShardCache:
    """The cache used when none is given: ``$LRD_CACHE_DIR`` or ``~/.cache/...``, unbounded."""
    directory = os.environ.get("LRD_CACHE_DIR") or Path.home() / ".cache" / "lrd-remote"
    return ShardCache(directory)


class RemoteTokenShardReader(TokenShardReader):
    """A :class:`~lightning_resumable_data.shards.TokenShardReader` of a file at a URL.

    ``TokenShardReader("s3://bucket/shard.bin", seq_len)`` builds one. The file's size
    (and ETag) is read at construction (or given by ``remote``, from a listing); ``load()``
    downloads it into ``cache`` (verified) and copies it into memory. When the sharded
    dataset enters this shard, :meth:`follow_order` hands the cache the shards read next so
    that they download in the background.

    Args:
        path: The file's URL.
        seq_len: Tokens per sample.
        dtype: Token dtype of a ``.bin`` file.
        num_samples: Expected samples (from an index).
        preload: Copy the shard into memory on load (recommended: the cached file may then
            be evicted at once); otherwise map the cached file.
        cache: Where to download; :func:`default_cache` if ``None``.
        remote: The file's size and ETag if already listed (saves a request).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        seq_len: int,
        dtype: DTypeLike = np.uint16,
        *,
        num_samples: int | None = None,
        preload: bool = True,
        cache: ShardCache | None = None,
        remote: RemoteObject | None = None,
    ) -> None:
        url = os.fspath(path)
        self.cache = cache or default_cache()
        self.remote = remote or self.cache.stat(url)
        super().__init__(
            self.cache.path_for(self.remote), seq_len, dtype,
            num_samples=num_samples, preload=preload,
        )  # fmt: skip

    @property
    def name(self) -> str:
        """The file name (the last component of the URL)."""
        return url_name(self.remote.url)

    @property
    def identity(self) -> str | None:
        """The ETag and version the file had when it was listed (pinned in a state)."""
        return self.remote.identity

    def _file_size(self) -> int:
        return self.remote.size

    def _header_file(self) -> IO[bytes]:
        size = min(self.remote.size, _HEADER_BYTES)
        return io.BytesIO(self.cache.read_bytes(self.remote.url, 0, size))

    def _tokens(self) -> Any:
        if self._data is not None:
            return self._data
        if not self.opened:  # sized from the listing: opened even if the download fails
            self._open()
        for _ in range(3):  # the cache folder deleted (by hand) between the fetch and the map
            with self.cache.local(self.remote):
                try:
                    return super()._tokens()
                except FileNotFoundError:
                    continue
        with self.cache.local(self.remote):
            return super()._tokens()  # a fourth time: its error, if it is lasting

    def check(self) -> None:
        """Raise ``ValueError`` if the remote file changed size or ETag since it was listed.

        A reader not opened yet was listed when it was built: its first load checks it.
        """
        if self.opened:
            self.cache.check_unchanged(self.remote)

    def follow_order(
        self, epoch: int, shard: int, seed: int, shuffle: bool, readers: list[Any]
    ) -> None:
        """Called by the sharded dataset when a read enters this shard (``readers[shard]``).

        Hands the cache this shard and the remote shards read after it, in order.
        """
        follow_readers(self.cache, self.remote, (epoch, shard, seed, shuffle), readers)

    def __repr__(self) -> str:
        return (
            f"RemoteTokenShardReader({redact(self.remote.url)!r}, seq_len={self.seq_len}, "
            f"dtype={self.dtype}, samples={len(self)})"
        )


def open_remote_token_shards(
    url: str,
    *,
    seq_len: int | None = None,
    dtype: DTypeLike | None = None,
    pattern: str = "*.bin",
    preload: bool = True,
    cache: ShardCache | None = None,
) -> list[RemoteTokenShardReader]:
    """:func:`~lightning_resumable_data.shards.open_token_shards` for a directory URL.

    Raises:
        FileNotFoundError: No ``index.json`` (and no ``seq_len``), or a listed shard is
            missing (named by URL).
        ValueError: A shard's size disagrees with the index, or the index is malformed.
        PermissionError: Access denied (not retried).
        RemoteReadError: The server stayed unreachable through every retry.
    """
    cache = cache or default_cache()
    index_url = join_url(url, INDEX_FILE)
    try:
        index_bytes: bytes | None = cache.read_bytes(index_url)
    except FileNotFoundError:
        if seq_len is None:
            raise
        index_bytes = None
    listed = cache.listing(url)
    if index_bytes is None:
        if seq_len is None or dtype is None:
            raise ValueError("open_token_shards without an index needs dtype= as well.")
        names = sorted(n for n in listed if fnmatch.fnmatch(n, pattern))
        if not names:
            raise ValueError(f"no files match {pattern!r} in {redact(url)!r}.")
        return [
            RemoteTokenShardReader(listed[n].url, seq_len, dtype, preload=preload, cache=cache,
                                   remote=listed[n])
            for n in names
        ]  # fmt: skip
    # Validate the index with the local code, from a private copy (outside the cache:
    # the cache's byte bound counts shards only).
    with tempfile.TemporaryDirectory(prefix="lrd-index-") as folder:
        (Path(folder) / INDEX_FILE).write_bytes(index_bytes)
        index = read_token_index(folder)
    given = {"seq_len": seq_len, "dtype": None if dtype is None else np.dtype(dtype).name}
    for name, value in (("seq_len", index.seq_len), ("dtype", index.dtype)):
        if given[name] is not None and given[name] != value:
            raise ValueError(
                f"{name}={given[name]!r} disagrees with {redact(index_url)!r}, which says "
                f"{value!r}; drop the argument or open the right directory."
            )
    readers = []
    for file, count, size in zip(index.files, index.samples, index.shard_bytes, strict=True):
        file_url = join_url(url, file)
        remote = listed.get(file)
        if listed and remote is None:
            raise FileNotFoundError(
                f"token shard {redact(file_url)!r} is listed in {INDEX_FILE} but does not "
                "exist. Upload it, or rewrite the directory with write_token_shards."
            )
        remote = remote or RemoteObject(file_url, size)
        if remote.size != size:
            raise ValueError(
                f"token shard {redact(file_url)!r} has {remote.size} bytes, but {INDEX_FILE} "
                f"says {size} ({count} samples of seq_len={index.seq_len} {index.dtype}): the "
                "object is truncated or was rewritten. Restore it or rewrite the index."
            )
        readers.append(
            RemoteTokenShardReader(
                file_url, index.seq_len, index.dtype, num_samples=count, preload=preload,
                cache=cache, remote=remote,
            )
        )  # fmt: skip
    return readers


class _RemoteTokenShards:
    """Token shards at a URL for the shard layer (``TokenShardReader(url)``, ...)."""

    reader = RemoteTokenShardReader

    def open(
        self,
        url: str,
        *,
        seq_len: int | None,
        dtype: DTypeLike | None,
        pattern: str,
        preload: bool,
        cache: Any,
    ) -> list[TokenShardReader]:
        """:func:`open_remote_token_shards`."""
        return list(
            open_remote_token_shards(
                url, seq_len=seq_len, dtype=dtype, pattern=pattern, preload=preload, cache=cache
            )
        )


register_url_token_shards(_RemoteTokenShards())
