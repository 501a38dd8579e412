"""Shard readers: one small protocol, a NumPy token-file reader and a map-style adapter.

A reader knows its length without loading anything (from a file size, a ``.npy`` header or
an index), reads one sample or a range, and is made resident by ``load()`` and released by
``close()``. :class:`~lightning_resumable_data.shards.DistributedShardedDataset` decides
when: it keeps a few readers loaded and loads the next ones in the background.
The protocol is in :mod:`~lightning_resumable_data.shards.protocol`, the readers in
:mod:`~lightning_resumable_data.shards.token_reader` and
:mod:`~lightning_resumable_data.shards.dataset_reader`; this module gathers them.

Example:
    >>> reader = DatasetShardReader(list(range(10, 15)), name="demo")
    >>> len(reader), reader.read(1), list(reader.read_range(2, 4))
    (5, 11, [12, 13])
"""

from __future__ import annotations

from lightning_resumable_data.shards.dataset_reader import DatasetShardReader
from lightning_resumable_data.shards.protocol import MapStyle, ShardReader
from lightning_resumable_data.shards.token_reader import TokenShardReader

__all__ = ["DatasetShardReader", "MapStyle", "ShardReader", "TokenShardReader"]
