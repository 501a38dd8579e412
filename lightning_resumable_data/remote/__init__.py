"""Remote storage: shards and documents read from object storage through a local cache.

A layer *below* the readers (see ``DESIGN.md``): a reader asks for a local file and gets
one, downloaded, verified and kept in a node-local :class:`ShardCache`; the sharded
dataset's epoch order tells the cache what to download next and what to evict. No
checkpoint holds any of it.

* :mod:`~lightning_resumable_data.remote.urls`: which paths are URLs, their fsspec
  filesystem, URLs safe to print;
* :mod:`~lightning_resumable_data.remote.retry`: exponential backoff with jitter on
  transient errors, none on 403/404;
* :mod:`~lightning_resumable_data.remote.objects`: :class:`RemoteObject` and
  :class:`RemoteRange`, what is known of a remote file;
* :mod:`~lightning_resumable_data.remote.client`: the requests (stat, list, ranged reads);
* :mod:`~lightning_resumable_data.remote.cache`: :class:`ShardCache`, atomic downloads,
  integrity checks, a byte bound, locks shared by the processes of a node;
* :mod:`~lightning_resumable_data.remote.prefetch`: downloads in the order ahead;
* :mod:`~lightning_resumable_data.remote.tokens`: token shards at a URL (registered with
  the shard layer, so ``open_token_shards(url)`` reads them);
* :mod:`~lightning_resumable_data.remote.chunks`: big files (a Megatron ``.bin``, Parquet)
  read by byte ranges, in chunks cached like shards (:class:`RemoteTokens`:
  ``token_array``).

Other readers use :func:`local_path`, the generic hook: it returns a local path for a
path or a URL (downloading the URL into the cache), or :class:`ChunkedRemoteFile` for a
file too big to download whole.

Example:
    >>> import os, tempfile
    >>> source = os.path.join(tempfile.mkdtemp(), "docs.idx")
    >>> with open(source, "wb") as file:
    ...     _ = file.write(b"MMIDIDX")
    >>> cache = ShardCache(tempfile.mkdtemp())
    >>> local_path("file://" + source, cache).read_bytes(), local_path(source) == Path(source)
    (b'MMIDIDX', True)
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning_resumable_data.remote.cache import (
    CacheLockTimeoutError,
    RemoteObject,
    RemoteRange,
    ShardCache,
)
from lightning_resumable_data.remote.chunks import ChunkedRemoteFile, RemoteTokens
from lightning_resumable_data.remote.prefetch import upcoming_shards
from lightning_resumable_data.remote.retry import (
    RemoteReadError,
    RetryPolicy,
    is_transient,
    with_retries,
)
from lightning_resumable_data.remote.tokens import (
    RemoteTokenShardReader,
    default_cache,
    open_remote_token_shards,
)
from lightning_resumable_data.remote.urls import filesystem, is_url, join_url, redact

__all__ = [
    "CacheLockTimeoutError",
    "ChunkedRemoteFile",
    "RemoteObject",
    "RemoteRange",
    "RemoteReadError",
    "RemoteTokenShardReader",
    "RemoteTokens",
    "RetryPolicy",
    "ShardCache",
    "default_cache",
    "filesystem",
    "is_transient",
    "is_url",
    "join_url",
    "local_path",
    "open_remote_token_shards",
    "redact",
    "upcoming_shards",
    "with_retries",
]


def local_path(path: str | os.PathLike[str], cache: ShardCache | None = None) -> Path:
    """A local path for ``path``: itself if local, else the URL downloaded into ``cache``.

    The hook for readers of whole files (a Megatron ``.idx``, an index): call it on the
    path the user gave before opening it (a big file is read by ranges instead, through
    :class:`ChunkedRemoteFile`). The file is verified
    (size, and the MD5 where the store lists one) and may be evicted once the cache
    needs room and no process holds it; reopen through this function rather than keeping
    the path for later.
    """
    if not is_url(path):
        return Path(path)
    cache = cache or default_cache()
    remote = cache.stat(os.fspath(path))
    with cache.local(remote) as local:
        return local
