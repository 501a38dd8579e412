"""LitData chunks in object storage: ``open_litdata("s3://bucket/optimized", cache=...)``.

:func:`open_remote_litdata` reads the ``index.json`` that ``litdata.optimize`` wrote (or
uploaded, with ``output_dir="s3://..."``) once, and lists its folder once; each
:class:`RemoteLitDataChunkReader` downloads its chunk file into the cache when it is loaded
and reads it as :class:`~lightning_resumable_data.formats.LitDataChunkReader` reads a local
one. Its name is the chunk's file name, as for a local copy, so a run saved over the bucket
resumes over a local copy and back; its ``identity`` (ETag, version) is pinned in a state.

Example:
    >>> import json, os, struct, tempfile
    >>> import numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> items = [struct.pack("<I", 8) + struct.pack("<q", v) for v in (10, 20)]
    >>> body = np.array([2, 16, 28, 40], "<u4").tobytes() + b"".join(items)
    >>> with open(os.path.join(folder, "chunk-0-0.bin"), "wb") as file:
    ...     _ = file.write(body)
    >>> config = {"data_format": ["int"], "data_spec": None, "item_loader": "PyTreeLoader"}
    >>> chunk = {"filename": "chunk-0-0.bin", "chunk_size": 2, "chunk_bytes": 40, "dim": None}
    >>> with open(os.path.join(folder, "index.json"), "w") as file:
    ...     _ = file.write(json.dumps({"chunks": [chunk], "config": config}))
    >>> cache = ShardCache(tempfile.mkdtemp())
    >>> readers = open_remote_litdata("file://" + folder, cache=cache)
    >>> readers[0].name, cache.downloads, readers[0].read_range(0, 2), cache.downloads
    ('chunk-0-0.bin', 0, [10, 20], 1)
"""

from __future__ import annotations

from pathlib import Path

from lightning_resumable_data.formats._litdata_index import (
    INDEX_FILE,
    LitDataIndex,
    parse_litdata_index,
)
from lightning_resumable_data.formats._litdata_reader import LitDataChunkReader
from lightning_resumable_data.formats._remote import RemoteFolder, RemoteShard
from lightning_resumable_data.remote.cache import RemoteObject, ShardCache
from lightning_resumable_data.remote.urls import redact

__all__ = ["RemoteLitDataChunkReader", "open_remote_litdata"]


class RemoteLitDataChunkReader(RemoteShard, LitDataChunkReader):
    """A :class:`~lightning_resumable_data.formats.LitDataChunkReader` of a chunk at a URL.

    Built by ``open_litdata(url, cache=...)``. :meth:`load` downloads the chunk file into
    ``cache`` (verified: size, and MD5 where the store lists one), reads it into memory and
    releases the cached file.

    Args:
        index: The dataset's index (its ``directory`` is the folder's URL).
        chunk: The chunk's position in the index.
        remote: The chunk file's object, as listed (size, ETag, version).
        cache: Where the chunk is downloaded.
        block_size: Tokens per item of a ``TokensLoader`` index.
    """

    def __init__(
        self,
        index: LitDataIndex,
        chunk: int,
        remote: RemoteObject,
        cache: ShardCache,
        *,
        block_size: int | None = None,
    ) -> None:
        self.cache, self.remote = cache, remote
        super().__init__(index, chunk, block_size=block_size)

    @property
    def path(self) -> Path:
        """Where the chunk file is (or will be) cached."""
        return self.cache.path_for(self.remote)

    @property
    def location(self) -> str:
        """The chunk's URL, as errors name it."""
        return redact(self.remote.url)

    def _file_size(self, item: int | None) -> int:
        return self.remote.size  # listed; the download checks it

    def __repr__(self) -> str:
        return f"RemoteLitDataChunkReader({self.location!r}, items={len(self)})"


def open_remote_litdata(
    url: str,
    *,
    cache: ShardCache | None = None,
    block_size: int | None = None,
    verify: bool = False,
) -> list[RemoteLitDataChunkReader]:
    """``open_litdata`` of a folder URL: the index read once, the folder listed once.

    Every chunk file's size is checked against the index now, from the listing, and no
    chunk is downloaded. Without a listing (a plain HTTP server) the sizes are checked at
    download, or now with ``verify`` (a request per chunk).

    Raises:
        FileNotFoundError: No ``index.json``, or a chunk file listed in it is missing.
        ValueError: An index this reader cannot read, a missing or needless ``block_size``,
            or a chunk file whose size is not the index's.
        RemoteReadError: The store stayed unreachable through every retry.
    """
    folder = RemoteFolder(url, cache)
    where = redact(folder.join(INDEX_FILE))
    text = folder.read_text(
        INDEX_FILE,
        f"no {INDEX_FILE} at {where!r}: not a LitData dataset. Pass the output_dir of "
        "litdata.optimize(...) (its index.json is written when the optimisation ends).",
    )
    index = parse_litdata_index(text, redact(folder.url), where)
    readers = []
    for number, name in enumerate(index.files):
        # a whole-file zstd chunk: the index gives its inflated size only
        size = None if index.whole_file_compressed else index.chunk_bytes[number]
        remote = folder.get(name, size, "LitData chunk", verify=verify)
        readers.append(
            RemoteLitDataChunkReader(index, number, remote, folder.cache, block_size=block_size)
        )
    return readers
