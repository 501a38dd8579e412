"""What the loader needs from a sampler to resume without replay, and its batch sampler.

Two protocols decide the loader's resume mode (see
:class:`~lightning_resumable_data.StatefulDataLoader`): a :class:`PositionSampler` (global
position, elastic) or a :class:`SkippableSampler` (``set_skip``). :class:`PositionBatchSampler`
batches a position sampler's order; with this package's samplers it asks the sampler for
whole batches (``iter_batches``), so no Python object is made per index.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from torch.utils.data import BatchSampler

__all__ = ["PositionBatchSampler", "PositionSampler", "SkippableSampler"]


@runtime_checkable
class SkippableSampler(Protocol):
    """A sampler that can start its next iteration after ``samples`` of this epoch."""

    def set_epoch(self, epoch: int) -> None: ...
    def set_skip(self, samples: int) -> None: ...


@runtime_checkable
class PositionSampler(SkippableSampler, Protocol):
    """A sampler whose position is global: ``epoch`` and ``consumed`` in its state.

    The samplers of this package that implement it (``DistributedSampler``,
    ``MixtureSampler``, ``ShardedSampler``) resume under any world size.
    """

    num_replicas: int

    @property
    def consumed(self) -> int: ...
    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]: ...
    def samples_left(self, consumed: int) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class PositionBatchSampler(BatchSampler):
    """torch's ``BatchSampler`` that asks the sampler for whole batches where it can.

    The batches are those of ``BatchSampler(sampler, batch_size, drop_last)``. A sampler
    with ``iter_batches`` (this package's ``DistributedSampler`` and its subclasses, unless
    a subclass overrides ``__iter__``) builds each batch from an array, with no Python step
    per index; any other sampler is batched by torch's loop. ``limit``, if set, ends the pass
    after that many of this rank's samples (a trainer's shorter epoch).

    Example:
        >>> from lightning_resumable_data import DistributedSampler
        >>> sampler = DistributedSampler(range(6), num_replicas=1, rank=0, shuffle=False)
        >>> batches = PositionBatchSampler(sampler, batch_size=4, drop_last=False)
        >>> list(batches)
        [[0, 1, 2, 3], [4, 5]]
        >>> batches.limit = 5
        >>> list(batches)
        [[0, 1, 2, 3], [4]]
    """

    limit: int | None = None

    def __iter__(self) -> Iterator[list[Any]]:
        batched = getattr(self.sampler, "iter_batches", None)
        if batched is not None and _own_iteration(self.sampler):
            result: Iterator[list[Any]] = batched(self.batch_size, self.drop_last, self.limit)
            return result
        if self.limit is None:
            return super().__iter__()
        limited = itertools.islice(self.sampler, self.limit)
        return iter(BatchSampler(limited, self.batch_size, self.drop_last))


def _own_iteration(sampler: object) -> bool:
    """Whether ``iter_batches`` yields what ``iter(sampler)`` would (no ``__iter__`` override)."""
    from lightning_resumable_data.samplers.distributed import DistributedSampler

    return isinstance(sampler, DistributedSampler) and (
        type(sampler).__iter__ is DistributedSampler.__iter__
    )
