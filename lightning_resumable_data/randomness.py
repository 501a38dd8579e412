"""Randomness that survives a resume: keyed on (seed, epoch, sample position), not on workers.

Augmentations drawn from a worker's global RNG depend on which worker, and which rank, loaded
a sample, and on how many samples that worker drew before. A resume with another
``num_workers`` or world size changes all three. A :class:`SampleKey` carries what is
invariant instead: it is the dataset index (an ``int``, so any dataset accepts it) with the
seed, the epoch and the sample's position in the epoch's global order attached.

Turn it on with ``DistributedSampler(..., sample_keys=True)`` and draw from ``key.rng()`` in
``__getitem__``::

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

from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.keys import key_rng, key_sequence

__all__ = ["SampleKey", "make_sample_keys", "sample_rng", "worker_seed"]

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
