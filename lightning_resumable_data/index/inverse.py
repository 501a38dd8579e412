"""Where dataset indices sit in an epoch's order: the inverse of the epoch permutations.

:func:`order_positions` answers, for each dataset index, its position in the epoch's global
order (before padding). Quarantine (excluding samples from every later draw) and ``lrd
find`` ask it. An unshuffled order is the identity; a ``randperm`` order is inverted from
the epoch's permutation (O(n), vectorised: the order itself is O(n) to build); a Feistel
order is inverted from the same permutation, computed over the epoch.

Example:
    >>> order_positions(False, "randperm", 10, 0, 0, np.array([3, 7])).tolist()
    [3, 7]
    >>> from lightning_resumable_data.index.permutation import randperm
    >>> perm = randperm(10, 5)
    >>> bool((perm[order_positions(True, "randperm", 10, 5, 0, perm[:3])] == perm[:3]).all())
    True
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.permutation import (
    PermutationAlgorithm,
    feistel_keys,
    feistel_permute,
    randperm,
)

__all__ = ["order_positions"]

_SEED_LIMIT = 2**64


def order_positions(
    shuffle: bool,
    algorithm: PermutationAlgorithm,
    length: int,
    seed: int,
    epoch: int,
    indices: NDArray[np.integer],
) -> NDArray[np.int64]:
    """The position of each of ``indices`` in the order of ``epoch`` (a permutation of them).

    Args:
        shuffle: Whether the order is shuffled (else it is the identity).
        algorithm: ``"randperm"`` or ``"feistel"``.
        length: Samples in the dataset.
        seed: The sampler's seed.
        epoch: The epoch.
        indices: Dataset indices in ``[0, length)``.

    Raises:
        IndexError: An index outside ``[0, length)``.
    """
    wanted = np.asarray(indices, dtype=np.int64)
    if wanted.size and (int(wanted.min()) < 0 or int(wanted.max()) >= length):
        raise IndexError(
            f"dataset indices must be in [0, {length}), got {int(wanted.min())} .. "
            f"{int(wanted.max())}."
        )
    if not shuffle or not wanted.size:
        same: NDArray[np.int64] = wanted.copy()
        return same
    if algorithm == "randperm":
        order = np.asarray(randperm(length, (seed + epoch) % _SEED_LIMIT), dtype=np.int64)
    else:
        keys = feistel_keys(seed % _SEED_LIMIT, epoch)
        order = feistel_permute(np.arange(length, dtype=np.int64), length, keys)
    inverse = np.empty(length, dtype=np.int64)
    inverse[order] = np.arange(length, dtype=np.int64)
    positions: NDArray[np.int64] = np.asarray(inverse[wanted], dtype=np.int64)
    return positions
