"""Layer 2: samplers that hold configuration and position and call the index math.

Every sampler speaks one contract: ``set_epoch``, ``set_skip``, ``state_dict`` and
``load_state_dict`` (see :mod:`lightning_resumable_data.state`).
"""

from lightning_resumable_data.samplers.composable import (
    RepeatBatchSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ShardBatchSampler,
    ShardSampler,
    SkipBatchSampler,
    SkipSampler,
)
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler
from lightning_resumable_data.samplers.sequential import ResumableSequentialSampler

__all__ = [
    "DistributedSampler",
    "MixturePhase",
    "MixtureSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "ResumableSequentialSampler",
    "ShardBatchSampler",
    "ShardSampler",
    "SkipBatchSampler",
    "SkipSampler",
]
