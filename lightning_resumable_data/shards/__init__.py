"""Layers 3 and 4 for sharded data: shard readers, the sharded dataset, sampler and loader.

* :mod:`~lightning_resumable_data.shards.readers`: the :class:`ShardReader` protocol
  (``protocol``), :class:`TokenShardReader` (NumPy token files through ``numpy.memmap``,
  ``token_reader``) and :class:`DatasetShardReader` (any map-style dataset per shard,
  ``dataset_reader``);
* :mod:`~lightning_resumable_data.shards.tokens`: :func:`write_token_shards`
  (``token_writer``) and :func:`open_token_shards` (shards plus ``index.json``,
  ``token_index``); a URL is opened by the storage layer above (``_urls``);
* :mod:`~lightning_resumable_data.shards.sampler`: :class:`ShardedSampler`, the epoch order
  of shuffled shards with shuffled samples, strided over ranks;
* :mod:`~lightning_resumable_data.shards.dataset`: :class:`DistributedShardedDataset`, at
  most ``max_resident`` shards loaded, the next ones prefetched in the background
  (``residency``);
* :mod:`~lightning_resumable_data.shards.loader`: :class:`ShardedDataLoader`, fkat-style
  shard and micro-batch prefetch with an exact, elastic, sample-level resume (its parts:
  ``loader_factory``, ``assembly``).

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> directory = tempfile.mkdtemp()
    >>> _ = write_token_shards(directory, [np.arange(64)], seq_len=4, tokens_per_shard=16)
    >>> dataset = DistributedShardedDataset(open_token_shards(directory), seed=1)
    >>> len(dataset), dataset.shard_sizes
    (16, (4, 4, 4, 4))
    >>> dataset.close()
"""

from lightning_resumable_data.shards.dataset import DistributedShardedDataset, ShardStats
from lightning_resumable_data.shards.loader import (
    DataLoaderFactory,
    DefaultDataLoaderFactory,
    ShardedDataLoader,
)
from lightning_resumable_data.shards.readers import (
    DatasetShardReader,
    ShardReader,
    TokenShardReader,
)
from lightning_resumable_data.shards.sampler import ShardedSampler, ShardedSource
from lightning_resumable_data.shards.tokens import (
    INDEX_FILE,
    TokenShardIndex,
    open_token_shards,
    read_token_index,
    write_token_shards,
)

__all__ = [
    "INDEX_FILE",
    "DataLoaderFactory",
    "DatasetShardReader",
    "DefaultDataLoaderFactory",
    "DistributedShardedDataset",
    "ShardReader",
    "ShardStats",
    "ShardedDataLoader",
    "ShardedSampler",
    "ShardedSource",
    "TokenShardIndex",
    "TokenShardReader",
    "open_token_shards",
    "read_token_index",
    "write_token_shards",
]
