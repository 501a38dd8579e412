"""MosaicML Streaming's MDS shards, read natively: random access by sample, no conversion.

``open_mds(directory)`` reads an MDS dataset's ``index.json`` and returns one
:class:`MDSShardReader` per shard (for ``DistributedShardedDataset`` or
``ShardedDataLoader``); mosaicml-streaming itself is not needed. The shard layout is in
:mod:`~lightning_resumable_data.formats._mds_layout`, the encodings in ``_mds_encodings``.
``open_mds("s3://bucket/mds", cache=ShardCache(...))`` reads the same from object storage
(:class:`RemoteMDSShardReader`, :mod:`~lightning_resumable_data.formats._remote`).

A sample is a ``dict`` of column name to value, decoded as MDS decodes it: ``int`` and
``str_int`` give ``int``; ``int8`` ... ``float64`` NumPy scalars; ``str_float`` ``float``;
``str_decimal`` ``Decimal``; ``str`` and ``json`` what they hold; ``ndarray...`` a NumPy
array (writable, a copy); ``pkl`` the unpickled object (only with
``allow_unsafe_types=True``: unpickling runs code named by the data, as MDS warns). Images
stay bytes: ``jpeg``, ``png`` and ``pil`` as stored, ``jpeg_array`` and ``list[...]`` as
a ``list`` of them. ``PIL.Image.open(io.BytesIO(value))`` decodes a JPEG or PNG, and
``PIL.Image.frombytes(*mds_pil_args(value))`` a ``pil`` value.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lightning_resumable_data.formats._mds_encodings import mds_pil_args
from lightning_resumable_data.formats._mds_index import MDSShardInfo, read_mds_index
from lightning_resumable_data.formats._mds_reader import MDSShardReader
from lightning_resumable_data.formats._remote_mds import RemoteMDSShardReader, open_remote_mds
from lightning_resumable_data.remote.urls import is_url

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = [
    "MDSShardInfo",
    "MDSShardReader",
    "RemoteMDSShardReader",
    "mds_pil_args",
    "open_mds",
    "read_mds_index",
]


def open_mds(
    path: str | os.PathLike[str],
    *,
    preload: bool = True,
    allow_unsafe_types: bool = False,
    verify: bool = False,
    cache: ShardCache | None = None,
) -> list[MDSShardReader]:
    """One :class:`MDSShardReader` per shard of an MDS dataset, from its ``index.json``.

    Only the index is read: 10^4 shards open in milliseconds, and each shard file is
    checked when it is loaded. ``verify=True`` checks every file's size now instead.

    Args:
        path: The dataset's directory (as ``MDSWriter(out=...)`` wrote it, or a local copy
            or Streaming cache of it) or its ``index.json``; or their URL (``s3://``,
            ``gs://``, ``az://``, ``http(s)://``), read through ``cache``.
        preload: See :class:`MDSShardReader`.
        allow_unsafe_types: Decode ``pkl`` columns (unpickling runs code named by the data).
        verify: Check every shard file's size against the index now (a ``stat`` each; at a
            URL the folder's listing checks them anyway).
        cache: The node's :class:`~lightning_resumable_data.remote.ShardCache` for a URL
            (``remote.default_cache()`` if ``None``); each shard downloads into it when it is
            loaded. Unused for a local path.

    Raises:
        FileNotFoundError: No index; with ``verify`` (always at a URL that lists), a
            missing shard file.
        ValueError: A malformed index, an encoding or compression MDS does not write, a
            ``pkl`` column without ``allow_unsafe_types``; with ``verify``, a shard file
            whose size disagrees with the index.
        RemoteReadError: At a URL, the store stayed unreachable through every retry.

    Example:
        >>> import json, tempfile
        >>> from pathlib import Path
        >>> import numpy as np
        >>> directory = Path(tempfile.mkdtemp())
        >>> sample = np.array([2], "<u4").tobytes() + b"hi" + np.int64(7).tobytes()
        >>> offsets = np.array([1, 12, 12 + len(sample)], "<u4").tobytes()  # count, offsets
        >>> _ = (directory / "shard.00000.mds").write_bytes(offsets + sample)
        >>> shard = {
        ...     "format": "mds", "version": 2, "samples": 1, "compression": None,
        ...     "column_names": ["s", "x"], "column_encodings": ["str", "int"],
        ...     "column_sizes": [None, 8], "zip_data": None,
        ...     "raw_data": {"basename": "shard.00000.mds", "bytes": 26}}
        >>> _ = (directory / "index.json").write_text(json.dumps({"version": 2, "shards": [shard]}))
        >>> [reader.read_range(0, 1) for reader in open_mds(directory)]
        [[{'s': 'hi', 'x': 7}]]

        The same at a URL (``file://`` stands for a bucket here), through a cache:

        >>> from lightning_resumable_data.remote import ShardCache
        >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=1 << 20)
        >>> [r.read(0)["s"] for r in open_mds(directory.as_uri(), cache=cache)]
        ['hi']
    """
    if is_url(path):
        remote = open_remote_mds(
            os.fspath(path), cache=cache, preload=preload, allow_unsafe_types=allow_unsafe_types,
            verify=verify,
        )  # fmt: skip
        return list(remote)
    directory, shards = read_mds_index(path)
    readers = [
        MDSShardReader(directory, info, preload=preload, allow_unsafe_types=allow_unsafe_types)
        for info in shards
    ]
    if verify:
        for reader in readers:
            reader.open()
    return readers
