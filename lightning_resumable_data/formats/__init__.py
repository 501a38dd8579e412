"""Readers of the formats users already have: random access by sample, no conversion.

Each reader is a :class:`~lightning_resumable_data.ShardReader`, so
:class:`~lightning_resumable_data.DistributedShardedDataset`, its sampler and loaders,
mixtures and the elastic, exactly-once resume work over them unchanged:

* :func:`open_mds`: MosaicML Streaming's MDS (``index.json`` + shards, every column
  encoding, compressed shards): :class:`MDSShardReader` per shard;
* :func:`open_litdata`: LitData's optimized chunks (``litdata.optimize``; PyTree items or
  ``TokensLoader`` token blocks): :class:`LitDataChunkReader` per chunk;
* :func:`open_webdataset`: WebDataset tar shards (samples grouped by key, a header-only
  index per shard kept beside it): :class:`WebDatasetShardReader` per shard.

Each also takes a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``) and a ``cache``: the
index is read once, each shard downloads into the node's
:class:`~lightning_resumable_data.remote.ShardCache` when it is loaded, and the state pins
each object's ETag (:mod:`~lightning_resumable_data.formats._remote`).

Example::

    from lightning_resumable_data import DistributedShardedDataset, ResumableDataModule
    from lightning_resumable_data.formats import open_mds

    dataset = DistributedShardedDataset(open_mds("data/mds"), seed=0)
    dm = ResumableDataModule(dataset, batch_size=32)
"""

from lightning_resumable_data.formats.litdata import LitDataChunkReader, open_litdata
from lightning_resumable_data.formats.mds import MDSShardReader, open_mds
from lightning_resumable_data.formats.wds import WebDatasetShardReader, open_webdataset

__all__ = [
    "LitDataChunkReader",
    "MDSShardReader",
    "WebDatasetShardReader",
    "open_litdata",
    "open_mds",
    "open_webdataset",
]
