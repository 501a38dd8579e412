"""Deterministic, distributed and exactly resumable data loading for Lightning and Fabric.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=1, shuffle=False)
    >>> list(sampler)
    [1, 3, 5, 7]
"""

from typing import TYPE_CHECKING

from lightning_resumable_data._lazy import lazy_exports

if TYPE_CHECKING:
    from lightning_resumable_data.datasets import MixtureDataset
    from lightning_resumable_data.documents import (
        DocumentCorpus,
        PackedDataset,
        collate_packed,
        open_hf_dataset,
        open_megatron,
        open_parquet,
        write_megatron,
    )
    from lightning_resumable_data.lightning import (
        LossSpikeMonitor,
        ResumableDataCallback,
        ResumableDataModule,
    )
    from lightning_resumable_data.loader import StatefulDataLoader
    from lightning_resumable_data.randomness import SampleKey, sample_rng
    from lightning_resumable_data.samplers import (
        ChangeReport,
        DataChangePolicy,
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
    from lightning_resumable_data.seeding import seed_training_step
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
        DataPositionError,
        ResumeWarning,
        StateMismatchError,
    )

__version__ = "0.4.0"

# Every name is imported on first use, so that `lrd --version` and `lrd --help` (and any
# `import lightning_resumable_data.<light module>`) do not pay for importing torch and
# Lightning (seconds): name -> the submodule that defines it.
_LAZY = {
    "MixtureDataset": "datasets",
    "LossSpikeMonitor": "lightning",
    "ResumableDataCallback": "lightning",
    "ResumableDataModule": "lightning",
    "StatefulDataLoader": "loader",
    "SampleKey": "randomness",
    "sample_rng": "randomness",
    "seed_training_step": "seeding",
    **dict.fromkeys(
        [
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
        ],
        "samplers",
    ),
    **dict.fromkeys(
        [
            "DatasetShardReader",
            "DistributedShardedDataset",
            "ShardedDataLoader",
            "ShardedSampler",
            "ShardReader",
            "TokenShardReader",
            "open_token_shards",
            "write_token_shards",
        ],
        "shards",
    ),
    **dict.fromkeys(
        ["STATE_VERSION", "DataPositionError", "ResumeWarning", "StateMismatchError"], "state"
    ),
    **dict.fromkeys(
        [
            "DocumentCorpus",
            "PackedDataset",
            "collate_packed",
            "open_hf_dataset",
            "open_megatron",
            "open_parquet",
            "write_megatron",
        ],
        "documents",
    ),
}


__getattr__, __dir__ = lazy_exports(globals(), __name__, _LAZY)


__all__ = [
    "STATE_VERSION",
    "ChangeReport",
    "DataChangePolicy",
    "DataPositionError",
    "DatasetShardReader",
    "DistributedSampler",
    "DistributedShardedDataset",
    "DocumentCorpus",
    "LossSpikeMonitor",
    "MixtureDataset",
    "MixturePhase",
    "MixtureSampler",
    "PackedDataset",
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
    "collate_packed",
    "open_hf_dataset",
    "open_megatron",
    "open_parquet",
    "open_token_shards",
    "sample_rng",
    "seed_training_step",
    "write_megatron",
    "write_token_shards",
]
