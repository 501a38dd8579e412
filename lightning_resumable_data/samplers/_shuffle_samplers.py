"""The composable shuffles: an inner sampler's indices (or batches) shuffled from ``(seed, epoch)``.

There is no hidden RNG: a shuffle is a function of ``key_rng(SHUFFLE_STREAM, seed, epoch)``
(fixed-width keys, :mod:`~lightning_resumable_data.index.keys`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, Final, TypeVar

import numpy as np

from lightning_resumable_data.index.keys import KEY_LIMIT, key_rng
from lightning_resumable_data.samplers._chunks import CHUNK_SIZE
from lightning_resumable_data.samplers._composition import (
    Batch,
    Composable,
    Cursor,
    check_count,
    is_infinite,
)

__all__ = ["SHUFFLE_STREAM", "ReproducibleShuffleBatchSampler", "ReproducibleShuffleSampler"]

T = TypeVar("T")

SHUFFLE_STREAM: Final = 0x53485546  # "SHUF": key stream tag of the shuffles


class _Shuffle(Composable[T]):
    def __init__(self, inner: Iterable[T], seed: int) -> None:
        super().__init__(inner)
        if is_infinite(inner):
            raise ValueError(
                f"{type(self).__name__} cannot shuffle {type(inner).__name__}: it never ends, "
                "so the shuffle would hang. Shuffle first, then repeat: "
                "RepeatSampler(ReproducibleShuffleSampler(sampler, seed))."
            )
        self.seed = check_count(type(self).__name__, "seed", seed, "the shuffle seed")
        if self.seed >= KEY_LIMIT:
            raise ValueError(
                f"{type(self).__name__}: seed={self.seed} must be < 2**64 (shuffle keys are "
                "64-bit); pass a smaller seed, e.g. seed % 2**64."
            )

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The shuffle seed."""
        return {"seed": self.seed}

    def _rng(self) -> np.random.Generator:
        return key_rng(SHUFFLE_STREAM, self.seed, self.epoch)


class ReproducibleShuffleSampler(_Shuffle[int]):
    """Shuffle an inner sampler's indices, reproducibly from ``(seed, epoch)``.

    Each ``__iter__`` reads the inner sampler's epoch into an array and shuffles it with
    ``key_rng(SHUFFLE_STREAM, seed, epoch)``; ``set_epoch`` selects the epoch and is
    forwarded to the inner sampler. Shuffle before you repeat, shard or skip.

    Args:
        sampler: A finite sampler of indices.
        seed: Shuffle seed, an int in ``[0, 2**64)``, the same on every rank.

    Example:
        >>> from lightning_resumable_data.samplers.sequential import ResumableSequentialSampler
        >>> sampler = ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), seed=0)
        >>> first = list(sampler)
        >>> sorted(first), list(sampler) == first
        ([0, 1, 2, 3, 4, 5], True)
        >>> sampler.set_epoch(1)
        >>> list(sampler) != first
        True
    """

    KIND: ClassVar[str] = "ReproducibleShuffleSampler"

    def __init__(self, sampler: Iterable[int], seed: int) -> None:
        super().__init__(sampler, seed)

    def _iterate(self) -> Iterator[int]:
        start = self._begin()
        indices = np.fromiter(self.inner, dtype=np.int64)
        self._rng().shuffle(indices)
        cursor = self._stream = Cursor()
        for begin in range(start, len(indices), CHUNK_SIZE):
            yield from cursor.enter(indices[begin : begin + CHUNK_SIZE].tolist())


class ReproducibleShuffleBatchSampler(_Shuffle[Batch]):
    """Shuffle the order of an inner batch sampler's batches, reproducibly from ``(seed, epoch)``.

    Prefer :class:`ReproducibleShuffleSampler` where you can: it varies the batches'
    contents, this only their order.

    Args:
        batch_sampler: A finite sampler of batches (lists of indices).
        seed: Shuffle seed, an int in ``[0, 2**64)``, the same on every rank.

    Example:
        >>> batches = [[0, 1], [2, 3], [4, 5], [6, 7]]
        >>> sampler = ReproducibleShuffleBatchSampler(batches, seed=0)
        >>> sorted(sampler) == batches, list(sampler) == list(sampler)
        (True, True)
    """

    KIND: ClassVar[str] = "ReproducibleShuffleBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], seed: int) -> None:
        super().__init__(batch_sampler, seed)

    def _iterate(self) -> Iterator[Batch]:
        start = self._begin()
        batches = list(self.inner)
        order = self._rng().permutation(len(batches))[start:]
        cursor = self._stream = Cursor()
        yield from cursor.enter([batches[i] for i in order.tolist()])
