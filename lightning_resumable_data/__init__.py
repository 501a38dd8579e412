"""Deterministic, distributed and exactly resumable data loading for Lightning and Fabric.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=1, shuffle=False)
    >>> list(sampler)
    [1, 3, 5, 7]
"""

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
from lightning_resumable_data.state import (
    STATE_VERSION,
    ResumeWarning,
    StateMismatchError,
)

__version__ = "0.1.0"

__all__ = [
    "STATE_VERSION",
    "DistributedSampler",
    "MixtureDataset",
    "MixturePhase",
    "MixtureSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "ResumableSequentialSampler",
    "ResumeWarning",
    "SampleKey",
    "ShardBatchSampler",
    "ShardSampler",
    "SkipBatchSampler",
    "SkipSampler",
    "StateMismatchError",
    "StatefulDataLoader",
    "__version__",
    "sample_rng",
]
