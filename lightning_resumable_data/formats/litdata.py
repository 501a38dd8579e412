"""LitData's optimized chunks (what ``litdata.optimize`` writes), read natively as shard readers.

:func:`open_litdata` returns one :class:`LitDataChunkReader` per chunk file of a LitData
directory, so the sharded dataset, mixtures and the exact, elastic resume work over LitData
data without a conversion or litdata itself. Layouts: :mod:`._litdata_chunks` and the others.
``open_litdata("s3://bucket/optimized", cache=ShardCache(...))`` reads the same from object
storage (:class:`RemoteLitDataChunkReader`, :mod:`~lightning_resumable_data.formats._remote`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lightning_resumable_data.formats._litdata_index import LitDataIndex, read_litdata_index
from lightning_resumable_data.formats._litdata_reader import LitDataChunkReader
from lightning_resumable_data.formats._remote_litdata import (
    RemoteLitDataChunkReader,
    open_remote_litdata,
)
from lightning_resumable_data.remote.urls import is_url

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache

__all__ = [
    "LitDataChunkReader",
    "LitDataIndex",
    "RemoteLitDataChunkReader",
    "open_litdata",
    "read_litdata_index",
]


def open_litdata(
    directory: str | os.PathLike[str],
    *,
    block_size: int | None = None,
    verify: bool = False,
    cache: ShardCache | None = None,
) -> list[LitDataChunkReader]:
    """One :class:`LitDataChunkReader` per chunk of a ``litdata.optimize`` output directory.

    Args:
        directory: The ``output_dir`` given to ``litdata.optimize``: a local folder, or its
            URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``), read through ``cache``.
        block_size: Tokens per item for a dataset written with ``TokensLoader`` (what
            LitData's ``TokensLoader(block_size=...)`` takes); leave out otherwise.
        verify: Check now that every chunk file exists with the size ``index.json`` gives
            (one ``stat`` each; at a URL the folder's listing checks them anyway); by
            default each chunk is checked when it is first read.
        cache: The node's :class:`~lightning_resumable_data.remote.ShardCache` for a URL
            (``remote.default_cache()`` if ``None``); each chunk downloads into it when it
            is loaded. Unused for a local folder.

    Raises:
        FileNotFoundError: No ``index.json``, or (``verify``, always at a URL that lists) a
            chunk file is missing.
        ValueError: An index this reader cannot read (see :func:`read_litdata_index`), a
            missing or needless ``block_size``, or (``verify``) a chunk of the wrong size.
        RemoteReadError: At a URL, the store stayed unreachable through every retry.

    Example:
        >>> import json, struct, tempfile
        >>> from pathlib import Path
        >>> directory = Path(tempfile.mkdtemp())
        >>> items = [struct.pack("<I", 8) + struct.pack("<q", v) for v in (10, 20)]
        >>> header = struct.pack("<4I", 2, 16, 28, 40)  # items, then their offsets
        >>> _ = (directory / "chunk-0-0.bin").write_bytes(header + b"".join(items))
        >>> config = {"data_format": ["int"], "data_spec": None, "item_loader": "PyTreeLoader"}
        >>> chunk = {"filename": "chunk-0-0.bin", "chunk_size": 2, "chunk_bytes": 40, "dim": None}
        >>> index_json = json.dumps({"chunks": [chunk], "config": config})
        >>> _ = (directory / "index.json").write_text(index_json)
        >>> [reader.read_range(0, 2) for reader in open_litdata(directory)]
        [[10, 20]]

        The same at a URL (``file://`` stands for a bucket here), through a cache:

        >>> from lightning_resumable_data.remote import ShardCache
        >>> cache = ShardCache(tempfile.mkdtemp(), max_bytes=1 << 20)
        >>> [reader.read(1) for reader in open_litdata(directory.as_uri(), cache=cache)]
        [20]
    """
    if is_url(directory):
        url = os.fspath(directory)
        return list(open_remote_litdata(url, cache=cache, block_size=block_size, verify=verify))
    index = read_litdata_index(directory)
    readers = [LitDataChunkReader(index, n, block_size=block_size) for n in range(len(index.files))]
    for reader in readers if verify else ():
        reader.open()
    return readers
