"""Deterministic, distributed and exactly resumable data loading for Lightning and Fabric.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=1, shuffle=False)
    >>> list(sampler)
    [1, 3, 5, 7]
"""

from typing import TYPE_CHECKING, Any

from lightning_resumable_data.datasets import MixtureDataset
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.randomness import SampleKey, sample_rng
from lightning_resumable_data.samplers import (
    DistributedSampler,
    MixturePhase,
    MixtureSampler,
    RepeatBatchSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableSequentialSampler,
    ShardBatchSampler,
    ShardSampler,
    SkipBatchSampler,
    SkipSampler,
)
from lightning_resumable_data.shards import (
    DatasetShardReader,
    DistributedShardedDataset,
    ShardedDataLoader,
    ShardedSampler,
    ShardReader,
    TokenShardReader,
    open_token_shards,
    write_token_shards,
)
from lightning_resumable_data.state import (
    STATE_VERSION,
    ResumeWarning,
    StateMismatchError,
)

if TYPE_CHECKING:
    from lightning_resumable_data.lightning import ResumableDataCallback, ResumableDataModule

__version__ = "0.1.0"

_LAZY = {"ResumableDataCallback", "ResumableDataModule"}


def __getattr__(name: str) -> Any:
    """Import the Lightning integration on first use: ``lightning.pytorch`` is slow to import."""
    if name in _LAZY:
        from lightning_resumable_data import lightning

        return getattr(lightning, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "STATE_VERSION",
    "DatasetShardReader",
    "DistributedSampler",
    "DistributedShardedDataset",
    "MixtureDataset",
    "MixturePhase",
    "MixtureSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "ResumableDataCallback",
    "ResumableDataModule",
    "ResumableSequentialSampler",
    "ResumeWarning",
    "SampleKey",
    "ShardBatchSampler",
    "ShardReader",
    "ShardSampler",
    "ShardedDataLoader",
    "ShardedSampler",
    "SkipBatchSampler",
    "SkipSampler",
    "StateMismatchError",
    "StatefulDataLoader",
    "TokenShardReader",
    "__version__",
    "open_token_shards",
    "sample_rng",
    "write_token_shards",
]
