"""Where the bytes of traced samples live: shard file, row, and for token shards the byte range.

:func:`~.trace.trace_step` names dataset indices; for a sharded dataset
(:class:`~lightning_resumable_data.DistributedShardedDataset`: token shards or the peers'
formats) :func:`sample_locations` turns them into the shard file each sample is in and its
row there, and for a token shard the byte offset and length of its tokens, so the data of
a step can be opened with any tool. Nothing is read.

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> from lightning_resumable_data import write_token_shards, open_token_shards
    >>> from lightning_resumable_data import DistributedShardedDataset
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_token_shards(folder, [np.arange(64)], seq_len=4, tokens_per_shard=16)
    >>> dataset = DistributedShardedDataset(open_token_shards(folder))
    >>> [(loc.shard, loc.row, loc.byte_offset) for loc in sample_locations(dataset, [5, 12])]
    [('shard_00001.bin', 1, 8), ('shard_00003.bin', 0, 0)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["SampleLocation", "sample_locations"]


@dataclass(frozen=True)
class SampleLocation:
    """Where one sample's bytes are.

    Attributes:
        index: The dataset index.
        shard: The shard's name (its file name).
        row: The sample's index within the shard.
        path: The shard file (or URL), if the reader knows it.
        byte_offset: For a token shard, where the sample's tokens begin in the file.
        byte_length: For a token shard, how many bytes they take.
    """

    index: int
    shard: str
    row: int
    path: str | None = None
    byte_offset: int | None = None
    byte_length: int | None = None


def sample_locations(dataset: Any, indices: Iterable[int]) -> list[SampleLocation]:
    """The shard and row of each dataset index (and a token shard's byte range).

    Raises:
        TypeError: ``dataset`` is not a sharded dataset (it has no ``locate``).
    """
    locate = getattr(dataset, "locate", None)
    readers = getattr(dataset, "readers", None)
    if locate is None or readers is None:
        raise TypeError(
            f"sample locations need a DistributedShardedDataset (token shards or a peer's "
            f"format), got {type(dataset).__name__}; dataset indices are all trace knows."
        )
    found = []
    for index in indices:
        shard, row = locate(int(index))
        reader = readers[shard]
        path = getattr(reader, "path", None)
        seq_len, dtype = getattr(reader, "seq_len", None), getattr(reader, "dtype", None)
        offset = length = None
        if isinstance(seq_len, int) and dtype is not None:  # a token shard: fixed rows
            length = seq_len * int(dtype.itemsize)
            offset = int(getattr(reader, "_offset", 0) or 0) + row * length
        where = None if path is None else str(path)
        found.append(SampleLocation(int(index), str(reader.name), row, where, offset, length))
    return found
