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

from lightning_resumable_data.index.network import _MIX_1, _MIX_2
from lightning_resumable_data.index.permutation import (
    EXACT_THRESHOLD,
    PermutationAlgorithm,
    _exact_table,
    _radices,
    _round_keys,
    feistel_keys,
    randperm,
)

__all__ = ["feistel_inverse", "order_positions"]

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
    if algorithm != "randperm":  # O(1) per index, whatever the length
        return feistel_inverse(wanted, length, feistel_keys(seed % _SEED_LIMIT, epoch))
    order = np.asarray(randperm(length, (seed + epoch) % _SEED_LIMIT), dtype=np.int64)
    inverse = np.empty(length, dtype=np.int64)
    inverse[order] = np.arange(length, dtype=np.int64)
    positions: NDArray[np.int64] = np.asarray(inverse[wanted], dtype=np.int64)
    return positions


def feistel_inverse(
    indices: NDArray[np.integer], n: int, keys: NDArray[np.integer]
) -> NDArray[np.int64]:
    """The positions ``p`` with ``feistel_permute(p, n, keys) == indices`` (vectorised).

    Example:
        >>> from lightning_resumable_data.index.permutation import feistel_permute
        >>> keys = feistel_keys(seed=3, epoch=1)
        >>> n = 10**12
        >>> values = feistel_permute(np.array([0, 5, n - 1]), n, keys)
        >>> feistel_inverse(values, n, keys).tolist() == [0, 5, n - 1]
        True
    """
    key = tuple(np.asarray(keys, dtype=np.uint64).reshape(-1).tolist())
    wanted = np.asarray(indices, dtype=np.int64).reshape(-1)
    if n <= EXACT_THRESHOLD:
        table = _exact_table(n, key)
        inverse = np.empty(n, dtype=np.int64)
        inverse[table] = np.arange(n, dtype=np.int64)
        found: NDArray[np.int64] = inverse[wanted]
        return found.reshape(np.shape(indices))
    round_keys, (a, b) = _round_keys(key), _radices(n)
    x = _network_inverse(wanted.astype(np.uint64), round_keys, a, b)
    outside = np.flatnonzero(x >= np.uint64(n))
    while outside.size:  # the cycle walk, backwards
        walked = _network_inverse(x[outside], round_keys, a, b)
        x[outside] = walked
        outside = outside[walked >= np.uint64(n)]
    return x.view(np.int64).reshape(np.shape(indices))


def _network_inverse(
    y: NDArray[np.uint64], keys: tuple[np.uint64, ...], a: int, b: int
) -> NDArray[np.uint64]:
    """The inverse of one pass of ``network._network`` (its rounds undone in reverse)."""
    radices = [(a, b)]
    for _ in keys:  # the radices each round starts from
        radices.append(radices[-1][::-1])
    final_b = radices[-1][1]
    high, low = y // np.uint64(final_b), y % np.uint64(final_b)
    shift_32, shift_31 = np.uint64(32), np.uint64(31)
    for key, (ra, _) in zip(reversed(keys), reversed(radices[:-1]), strict=True):
        # the round mapped (h, l) in Z_ra x Z_rb to (l, (h + F(l)) mod ra)
        before_low = high
        mixed = np.bitwise_xor(before_low, key)
        mixed *= _MIX_1
        mixed ^= mixed >> shift_31
        mixed *= _MIX_2
        mixed >>= shift_32
        mixed *= np.uint64(ra)
        mixed >>= shift_32  # F(l) in [0, ra)
        before_high = (low + np.uint64(ra) - mixed) % np.uint64(ra)
        high, low = before_high, before_low
    result: NDArray[np.uint64] = high * np.uint64(b) + low
    return result
