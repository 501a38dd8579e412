"""Determined's composable samplers, keyed on an epoch so that they resume exactly.

Build a training chain as Determined recommends, innermost first: shuffle, repeat, shard,
skip::

    SkipSampler(ShardSampler(RepeatSampler(ReproducibleShuffleSampler(
        ResumableSequentialSampler(dataset), seed)), num_replicas, rank), skip)

There is no hidden RNG: a shuffle is a function of ``key_rng(SHUFFLE_STREAM, seed, epoch)``
(fixed-width keys, :mod:`~lightning_resumable_data.index.keys`), pass ``p`` of a repeat
runs its inner sampler at epoch ``epoch + p`` (a new shuffle each pass), and a skip applies
to the first ``__iter__`` only (Determined's apply every epoch). A state nests the inner
sampler's state under ``"inner"`` and restores through the inner's O(1) ``set_skip`` where
it has one (see
:mod:`~lightning_resumable_data.samplers._composition`).

Each kind lives in a module of its own (``_shuffle_samplers``, ``_repeat_samplers``,
``_shard_samplers``, ``_skip_samplers``); this module gathers them.

State keys: ``version``, ``kind``, ``fingerprint`` (``seed`` of a shuffle; ``num_replicas``,
not ``rank``, of a shard: every rank loads rank 0's state), ``epoch``, the position
(``position``, own items of the current iteration; a repeat's ``pass`` and ``offset``) and
``inner`` when the inner sampler is stateful.
"""

from __future__ import annotations

from lightning_resumable_data.samplers._repeat_samplers import RepeatBatchSampler, RepeatSampler
from lightning_resumable_data.samplers._shard_samplers import ShardBatchSampler, ShardSampler
from lightning_resumable_data.samplers._shuffle_samplers import (
    SHUFFLE_STREAM,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
)
from lightning_resumable_data.samplers._skip_samplers import SkipBatchSampler, SkipSampler

__all__ = [
    "SHUFFLE_STREAM",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "ShardBatchSampler",
    "ShardSampler",
    "SkipBatchSampler",
    "SkipSampler",
]
