"""Randomness that survives a resume: keyed on (seed, epoch, sample position), not on workers.

Augmentations drawn from a worker's global RNG depend on which worker, and which rank, loaded
a sample, and on how many samples that worker drew before. A resume with another
``num_workers`` or world size changes all three. A :class:`SampleKey` carries what is
invariant instead: it is the dataset index (an ``int``, so any dataset accepts it) with the
seed, the epoch and the sample's position in the epoch's global order attached.

Turn it on with ``DistributedSampler(..., sample_keys=True)`` and draw from ``key.rng()`` in
``__getitem__``. Keys cost no Python object per index on the loader's path: the
:class:`~lightning_resumable_data.StatefulDataLoader` hands each batch of indices over as one
:class:`KeyedBatch` (a ``list`` of plain ints with the seed, the epoch and the batch's
positions as an arithmetic progression), and a key is built only when a dataset asks for
one: ``__getitem__`` receives a :class:`SampleKey` (built in the worker, as the fetcher
iterates the batch), ``__getitems__`` receives the batch itself::

    def __getitem__(self, index):
        image = self.images[index]
        if isinstance(index, SampleKey):
            image = random_crop(image, index.rng())
        return image

Example:
    >>> key = SampleKey(7, seed=0, epoch=2, position=15)
    >>> key + 1, key.epoch, key.position
    (8, 2, 15)
    >>> same = SampleKey(7, seed=0, epoch=2, position=15)
    >>> int(key.rng().integers(100)) == int(same.rng().integers(100))
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.keys import key_rng, key_sequence

__all__ = ["KeyedBatch", "SampleKey", "make_sample_keys", "sample_rng", "worker_seed"]

_SAMPLE_STREAM: Final = 0x53414D50  # "SAMP"
_WORKER_STREAM: Final = 0x574F524B  # "WORK"


def sample_rng(seed: int, epoch: int, position: int) -> np.random.Generator:
    """The random generator of the sample at ``position`` of ``epoch``'s global order.

    Keyed fixed-width (:mod:`~lightning_resumable_data.index.keys`): distinct
    ``(seed, epoch, position)`` give distinct streams, whatever their magnitudes.

    Example:
        >>> float(sample_rng(0, 0, 5).random()) == float(sample_rng(0, 0, 5).random())
        True
        >>> a, b = sample_rng(2**32, 5, 0), sample_rng(0, 1 + 5 * 2**32, 0)
        >>> float(a.random()) == float(b.random())
        False
    """
    return key_rng(_SAMPLE_STREAM, seed, epoch, position)


def worker_seed(seed: int, epoch: int, rank: int) -> int:
    """A 63-bit base seed for the data-loader workers of ``rank`` in ``epoch``.

    torch seeds worker ``w`` with ``base + w`` (``torch``, ``random``) and a NumPy seed
    derived from ``(base, w)``, so the workers' RNGs are a function of
    (seed, epoch, rank, worker id) and never of the parent's RNG state.

    Example:
        >>> worker_seed(0, 1, 0) == worker_seed(0, 1, 0) != worker_seed(0, 1, 1)
        True
    """
    state = key_sequence(_WORKER_STREAM, seed, epoch, rank).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


class SampleKey(int):
    """A dataset index that also knows its (seed, epoch, position) for keyed randomness.

    Attributes:
        seed: The sampler's seed.
        epoch: The epoch.
        position: The sample's position in the epoch's global (padded) order: unique within
            the epoch, the same whichever rank or worker loads it.
    """

    seed: int
    epoch: int
    position: int

    def __new__(cls, index: int, *, seed: int, epoch: int, position: int) -> SampleKey:
        """Make a key for dataset index ``index``."""
        key = super().__new__(cls, index)
        key.seed, key.epoch, key.position = seed, epoch, position
        return key

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle with the key, so that workers receive it intact."""
        return (_rebuild_key, (int(self), self.seed, self.epoch, self.position))

    def __repr__(self) -> str:
        return (
            f"SampleKey({int(self)}, seed={self.seed}, epoch={self.epoch}, "
            f"position={self.position})"
        )

    def rng(self) -> np.random.Generator:
        """A fresh generator for this sample: :func:`sample_rng` of its key."""
        return sample_rng(self.seed, self.epoch, self.position)

    def torch_seed(self) -> int:
        """A 63-bit seed for ``torch.Generator().manual_seed(...)``."""
        return int(self.rng().integers(2**63))


def _rebuild_key(index: int, seed: int, epoch: int, position: int) -> SampleKey:
    return SampleKey(index, seed=seed, epoch=epoch, position=position)


def make_sample_keys(
    indices: NDArray[np.integer], positions: NDArray[np.integer], seed: int, epoch: int
) -> list[SampleKey]:
    """Pair each index with its position as a :class:`SampleKey`.

    Example:
        >>> make_sample_keys(np.array([4, 2]), np.array([0, 3]), seed=1, epoch=0)
        [SampleKey(4, seed=1, epoch=0, position=0), SampleKey(2, seed=1, epoch=0, position=3)]
    """
    return [
        SampleKey(index, seed=seed, epoch=epoch, position=position)
        for index, position in zip(indices.tolist(), positions.tolist(), strict=False)
    ]


class KeyedBatch(list[int]):
    """One batch of dataset indices with the keys of its samples, as one object.

    A plain ``list`` of ``int`` (indexing, slicing, ``==`` and ``len`` are a list's) that
    also carries ``seed``, ``epoch`` and the positions of its samples in the epoch's global
    order, ``start, start + step, ...`` (a rank's positions are an arithmetic progression
    with ``step`` the world size). It pickles as the list plus four integers, so sending it
    to a DataLoader worker costs what a plain batch costs. Iterating it yields
    :class:`SampleKey` objects, built lazily: torch's fetcher iterates the batch (in the
    worker) to call ``dataset[key]``, so a dataset without ``__getitems__`` still receives
    keys. A dataset with ``__getitems__`` receives the batch and reads ``epoch`` and
    :attr:`positions` directly, with no object per index.

    Example:
        >>> batch = KeyedBatch([7, 3], seed=0, epoch=1, start=4, step=2)
        >>> batch == [7, 3], batch.positions.tolist()
        (True, [4, 6])
        >>> [repr(key) for key in batch][1]
        'SampleKey(3, seed=0, epoch=1, position=6)'
    """

    __slots__ = ("epoch", "seed", "start", "step")

    def __init__(
        self, indices: Iterable[int], *, seed: int, epoch: int, start: int, step: int
    ) -> None:
        super().__init__(indices)
        self.seed, self.epoch, self.start, self.step = seed, epoch, start, step

    @property
    def positions(self) -> NDArray[np.int64]:
        """Positions of the batch's samples in the epoch's global order."""
        return self.start + self.step * np.arange(len(self), dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        """Yield the samples' :class:`SampleKey` objects (built one by one, on demand)."""
        seed, epoch, start, step = self.seed, self.epoch, self.start, self.step
        for offset, index in enumerate(list.__iter__(self)):
            yield SampleKey(index, seed=seed, epoch=epoch, position=start + offset * step)

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the plain list and four integers."""
        return (_rebuild_batch, (self[:], self.seed, self.epoch, self.start, self.step))


def _rebuild_batch(indices: list[int], seed: int, epoch: int, start: int, step: int) -> KeyedBatch:
    return KeyedBatch(indices, seed=seed, epoch=epoch, start=start, step=step)
