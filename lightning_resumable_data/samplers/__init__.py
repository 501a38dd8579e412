"""Layer 2: samplers that hold configuration and position and call the index math.

Every sampler speaks one contract: ``set_epoch``, ``set_skip``, ``state_dict`` and
``load_state_dict`` (see :mod:`lightning_resumable_data.state`). The samplers are imported
on first use: the torch-free modules here (the mixture's schedule and plan) load without
torch, for ``lrd plan``.

Example:
    >>> from lightning_resumable_data.samplers import DistributedSampler
    >>> list(DistributedSampler(range(4), num_replicas=2, rank=0, shuffle=False))
    [0, 2]
"""

from typing import TYPE_CHECKING

from lightning_resumable_data._lazy import lazy_exports

if TYPE_CHECKING:
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
    from lightning_resumable_data.samplers.data_changes import ChangeReport, DataChangePolicy
    from lightning_resumable_data.samplers.distributed import DistributedSampler
    from lightning_resumable_data.samplers.mixture import MixtureSampler
    from lightning_resumable_data.samplers.schedule import MixturePhase
    from lightning_resumable_data.samplers.sequential import ResumableSequentialSampler

__all__ = [
    "ChangeReport",
    "DataChangePolicy",
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

_LAZY = {
    "ChangeReport": "data_changes",
    "DataChangePolicy": "data_changes",
    "DistributedSampler": "distributed",
    "MixturePhase": "schedule",
    "MixtureSampler": "mixture",
    "ResumableSequentialSampler": "sequential",
    **dict.fromkeys(
        [name for name in __all__ if name.startswith(("Repeat", "Reproducible", "Shard", "Skip"))],
        "composable",
    ),
}


__getattr__, __dir__ = lazy_exports(globals(), __name__, _LAZY)
