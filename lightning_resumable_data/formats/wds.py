"""WebDataset ``.tar`` shards, read natively and by sample: :class:`WebDatasetShardReader`.

A WebDataset shard is a plain tar of members ``<key>.<field>``; consecutive members with one
key form a sample. The reader lists the members once from the tar's headers into a sidecar
``<shard>.index.npz`` (:mod:`._wds_index`), then reads any sample with one positioned read,
so :class:`~lightning_resumable_data.DistributedShardedDataset` shuffles, resumes and changes
world size over the shards as over token shards. A sample is a dict as WebDataset yields it:
``__key__``, ``__url__`` (the shard path) and the fields' bytes; ``decode=True`` decodes text,
JSON, ints and ``.npy`` and leaves images and audio as bytes (:mod:`._wds_decode`).
``open_webdataset("s3://bucket/shard-{000..099}.tar", cache=ShardCache(...))`` reads shards
from object storage (:class:`RemoteWebDatasetShardReader`, its index kept in the cache).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lightning_resumable_data.formats._remote_wds import (
    RemoteWebDatasetShardReader,
    open_remote_webdataset,
)
from lightning_resumable_data.formats._wds_decode import DEFAULT_DECODERS, Decoders
from lightning_resumable_data.formats._wds_paths import brace_expand, expand_shards
from lightning_resumable_data.formats._wds_reader import WebDatasetShardReader
from lightning_resumable_data.remote.urls import is_url

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = [
    "DEFAULT_DECODERS",
    "RemoteWebDatasetShardReader",
    "WebDatasetShardReader",
    "brace_expand",
    "open_webdataset",
]


def open_webdataset(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    decode: bool | Decoders = False,
    preload: bool = True,
    save_index: bool = True,
    cache: ShardCache | None = None,
) -> list[WebDatasetShardReader]:
    """One :class:`WebDatasetShardReader` per shard that ``source`` names, in order.

    ``source`` is what ``webdataset.WebDataset`` takes: a path, a brace pattern
    (``"data/shard-{000000..000009}.tar"``), several joined by ``::``, or a list of paths;
    and besides, a glob (``"data/*.tar"``, sorted) or a folder (its ``*.tar`` files, sorted).
    The other arguments are the reader's. Shards without a valid sidecar are indexed on up
    to 8 threads (about 10 us per tar header, so ~1 s per 40,000 members, once).

    URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``) are taken the same way (a glob in
    the file name only), read through ``cache`` (the node's
    :class:`~lightning_resumable_data.remote.ShardCache`; ``remote.default_cache()`` if
    ``None``, unused for local paths): the first open downloads each shard once to index
    it and keeps the index in the cache directory, never in the bucket; a shard downloads
    into the cache when it is loaded.

    Raises:
        FileNotFoundError: A shard, glob or folder named matches no file.
        ValueError: Nothing is named, local paths and URLs are mixed, or a shard is corrupt
            (see the reader).
        RemoteReadError: At a URL, the store stayed unreachable through every retry.

    Example:
        >>> import io, tarfile, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> for shard in range(2):
        ...     with tarfile.open(f"{folder}/part-{shard:02d}.tar", "w") as tar:
        ...         for key in range(3):
        ...             info = tarfile.TarInfo(f"{shard}{key}.cls")
        ...             info.size = 1
        ...             tar.addfile(info, io.BytesIO(str(key).encode()))
        >>> readers = open_webdataset(folder + "/part-{00..01}.tar", decode=True)
        >>> [len(r) for r in readers], readers[1].read(2)["cls"]
        ([3, 3], 2)
    """
    if isinstance(source, os.PathLike):
        parts: list[str] = []  # a local path
    elif isinstance(source, str):
        parts = source.split("::")
    else:
        parts = [os.fspath(path) for path in source]
    urls = [is_url(part) for part in parts]
    if any(urls) and not all(urls):
        raise ValueError(
            f"{source!r} mixes local paths and URLs; open each kind with its own "
            "open_webdataset(...) call and concatenate the lists of readers."
        )
    if any(urls):
        remote = open_remote_webdataset(
            parts, cache=cache, decode=decode, preload=preload, save_index=save_index
        )
        return list(remote)
    paths = expand_shards(source)
    open_one = functools.partial(
        WebDatasetShardReader, decode=decode, preload=preload, save_index=save_index
    )
    with ThreadPoolExecutor(min(8, len(paths))) as pool:  # hides a network file system's latency
        return list(pool.map(open_one, paths))
