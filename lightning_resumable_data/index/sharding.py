"""Epoch order of a sharded dataset: shuffled shards, shuffled samples within each shard.

A dataset of ``S`` shards with sizes ``n_0, ..., n_{S-1}`` numbers its samples globally in
file order: shard ``s`` holds the global indices ``starts[s] .. starts[s] + n_s - 1``
(:func:`shard_starts`). One epoch's global order ``G`` visits the shards one after the
other, in a shuffled order, and each shard's samples in a shuffled order::

    G = concat over slots j = 0 .. S-1 of   starts[o[j]] + pi_{o[j]}(0 .. n_{o[j]} - 1)

* the *shard order* ``o`` (shard ids by slot) is the permutation of ``[0, S)`` drawn by
  :func:`~lightning_resumable_data.index.keys.key_rng` of ``(seed, epoch)``: ``S`` is
  small, so it is materialised;
* the *in-shard order* ``pi_s`` is the keyed permutation of ``[0, n_s)``
  (:func:`~lightning_resumable_data.index.permutation.feistel_permute`) with a key from
  :func:`~lightning_resumable_data.index.keys.key_sequence` of ``(seed, epoch, s)``: no
  large shard-sized array is ever built and any position is computed in O(1), so the
  lookup is vectorised over any set of positions (``searchsorted`` on the slot bounds, then
  one call per shard touched).

Keys are fixed-width (:mod:`~lightning_resumable_data.index.keys`), never ``seed + epoch``
nor a variable-width ``SeedSequence`` list: (seed=1, epoch=0) and (seed=0, epoch=1) are
unrelated, so are ``(seed=2**32, epoch=5)`` and ``(seed=0, epoch=1 + 5 * 2**32)``, and so
are the streams of two shards.

Trade-off: *locality* against *mixing*. Consecutive positions stay within one shard, so
data-parallel ranks striding over ``G`` (rank ``r`` reads ``G[r::W]``) all read the same
shard at the same time and need only it and the next one resident. The price is that one
step's batch comes from one shard (two at a boundary): samples are mixed within a shard
and shards are mixed across epochs, but two shards are not interleaved. This is the right
trade for LM pretraining shards (already shuffled token streams); for shards that are not
i.i.d. use many small shards.

Example:
    >>> lookup = sharded_order([3, 2], seed=0, epoch=0)
    >>> order = lookup(np.arange(5))
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4]
    >>> bool((order[:2] >= 3).all() or (order[:3] < 3).all())  # one shard at a time
    True
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lightning_resumable_data.index.keys import KEY_LIMIT, key_rng, key_sequence
from lightning_resumable_data.index.permutation import FEISTEL_ROUNDS, feistel_permute

__all__ = [
    "PositionLookup",
    "check_shard_sizes",
    "in_shard_keys",
    "locate_indices",
    "shard_order",
    "shard_runs",
    "shard_starts",
    "sharded_order",
    "shards_digest",
    "slot_bounds",
]

PositionLookup = Callable[[NDArray[np.integer]], NDArray[np.int64]]

# Stream tags (index/keys.py) so that these keys never collide with the other random
# streams the package derives from the same (seed, epoch).
_SHARD_ORDER_STREAM: Final = 0x53484F52  # "SHOR"
_IN_SHARD_STREAM: Final = 0x53485046  # "SHPF"


def _check_seed_epoch(seed: int, epoch: int) -> None:
    for name, value in (("seed", seed), ("epoch", epoch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name}={value!r} must be an int, got {type(value).__name__}.")
        if not 0 <= value < KEY_LIMIT:
            raise ValueError(f"{name}={value} must be in [0, 2**64 - 1].")


def check_shard_sizes(sizes: ArrayLike) -> NDArray[np.int64]:
    """Return ``sizes`` as an int64 array, or raise if it is not a usable list of shard sizes.

    Shards may be empty (size 0), but there must be at least one shard and one sample.

    Example:
        >>> check_shard_sizes([3, 0, 2]).tolist()
        [3, 0, 2]
    """
    array = np.asarray(sizes)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(
            f"shard sizes must be a non-empty 1-D list of sample counts, got shape "
            f"{array.shape}. Pass one count per shard (an empty shard list has no data)."
        )
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"shard sizes must be integers, got dtype {array.dtype}.")
    result = array.astype(np.int64)
    if (result < 0).any():
        bad = int(np.flatnonzero(result < 0)[0])
        raise ValueError(f"shard sizes must be >= 0, got sizes[{bad}]={int(result[bad])}.")
    if int(result.sum()) == 0:
        raise ValueError(f"all {result.size} shards are empty; there is nothing to sample.")
    return result


def shard_starts(sizes: ArrayLike) -> NDArray[np.int64]:
    """Global index of each shard's first sample in file order, plus the total at the end.

    Example:
        >>> shard_starts([3, 0, 2]).tolist()
        [0, 3, 3, 5]
    """
    sizes = check_shard_sizes(sizes)
    starts: NDArray[np.int64] = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    return starts


def shard_order(num_shards: int, seed: int, epoch: int, shuffle: bool = True) -> NDArray[np.int64]:
    """Shard ids in the order epoch ``epoch`` visits them (``o[j]`` is the shard of slot j).

    Example:
        >>> sorted(shard_order(4, seed=0, epoch=1).tolist())
        [0, 1, 2, 3]
        >>> shard_order(4, seed=0, epoch=1, shuffle=False).tolist()
        [0, 1, 2, 3]
    """
    _check_seed_epoch(seed, epoch)
    if num_shards < 1:
        raise ValueError(f"num_shards={num_shards} must be >= 1.")
    if not shuffle:
        return np.arange(num_shards, dtype=np.int64)
    rng = key_rng(_SHARD_ORDER_STREAM, int(seed), int(epoch))
    return rng.permutation(num_shards).astype(np.int64)


def in_shard_keys(seed: int, epoch: int, shard: int) -> NDArray[np.uint64]:
    """Key of shard ``shard``'s in-shard permutation in epoch ``epoch`` (fixed-width keyed).

    Example:
        >>> bool((in_shard_keys(0, 0, 1) != in_shard_keys(0, 0, 2)).any())
        True
        >>> bool((in_shard_keys(2**32, 5, 0) != in_shard_keys(0, 1 + 5 * 2**32, 0)).any())
        True
    """
    _check_seed_epoch(seed, epoch)
    if not 0 <= int(shard) < KEY_LIMIT:
        raise ValueError(f"shard={shard} must be in [0, 2**64 - 1].")
    sequence = key_sequence(_IN_SHARD_STREAM, int(seed), int(epoch), int(shard))
    keys: NDArray[np.uint64] = sequence.generate_state(FEISTEL_ROUNDS, np.uint64).astype(np.uint64)
    return keys


def slot_bounds(sizes: ArrayLike, order: NDArray[np.integer]) -> NDArray[np.int64]:
    """First position of each slot of the epoch (slot j holds shard ``order[j]``), plus the total.

    Example:
        >>> slot_bounds([3, 0, 2], np.array([2, 0, 1])).tolist()
        [0, 2, 5, 5]
    """
    ordered = check_shard_sizes(sizes)[order]
    bounds: NDArray[np.int64] = np.zeros(ordered.size + 1, dtype=np.int64)
    np.cumsum(ordered, out=bounds[1:])
    return bounds


def sharded_order(
    sizes: ArrayLike,
    seed: int,
    epoch: int,
    *,
    shuffle_shards: bool = True,
    shuffle_samples: bool = True,
) -> PositionLookup:
    """The epoch's global order ``G`` as a vectorised lookup: positions -> global indices.

    Building the lookup costs O(S) for ``S`` shards; each call costs O(m log S) for ``m``
    positions (in ``[0, sum(sizes))``), whatever the shard sizes.

    Args:
        sizes: Samples per shard, in file order.
        seed: Seed of the run, in ``[0, 2**63)``.
        epoch: The epoch.
        shuffle_shards: Visit the shards in a per-epoch shuffled order (else file order).
        shuffle_samples: Visit each shard's samples in a per-epoch shuffled order.

    Example:
        >>> lookup = sharded_order([2, 2], seed=0, epoch=0, shuffle_shards=False,
        ...                        shuffle_samples=False)
        >>> lookup(np.array([3, 0, 2])).tolist()
        [3, 0, 2]
    """
    sizes = check_shard_sizes(sizes)
    starts = shard_starts(sizes)
    order = shard_order(sizes.size, seed, epoch, shuffle_shards)
    bounds = slot_bounds(sizes, order)
    total = int(bounds[-1])
    keys: dict[int, NDArray[np.uint64]] = {}  # shard -> round keys, filled lazily

    def lookup(positions: NDArray[np.integer]) -> NDArray[np.int64]:
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= total):
            raise IndexError(f"positions must be in [0, {total}), the epoch's length.")
        slots = np.searchsorted(bounds, positions, side="right") - 1  # empty slots skipped
        offsets = positions - bounds[slots]  # position within the slot's shard
        shards = order[slots]
        if shuffle_samples:
            # Group by slot (positions usually arrive sorted: this is then a no-op sort)
            # and permute each group with its shard's keys.
            by_slot = np.argsort(slots, kind="stable")
            cuts = np.flatnonzero(np.diff(slots[by_slot])) + 1
            for group in np.split(by_slot, cuts):
                if group.size == 0:
                    continue
                shard = int(shards[group[0]])
                if shard not in keys:
                    keys[shard] = in_shard_keys(seed, epoch, shard)
                offsets[group] = feistel_permute(offsets[group], int(sizes[shard]), keys[shard])
        result: NDArray[np.int64] = starts[shards] + offsets
        return result

    return lookup


def locate_indices(
    indices: ArrayLike, starts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Split global indices into (shard, index within the shard), given :func:`shard_starts`.

    Example:
        >>> shards, local = locate_indices([0, 3, 4], shard_starts([3, 0, 2]))
        >>> shards.tolist(), local.tolist()
        ([0, 2, 2], [0, 0, 1])
    """
    indices = np.asarray(indices, dtype=np.int64)
    total = int(starts[-1])
    if indices.size and (indices.min() < 0 or indices.max() >= total):
        raise IndexError(
            f"sample indices must be in [0, {total}), the dataset's length; got "
            f"{indices.min()} .. {indices.max()}."
        )
    shards = np.searchsorted(starts, indices, side="right") - 1
    local: NDArray[np.int64] = indices - starts[shards]
    return shards.astype(np.int64), local


def shards_digest(sizes: ArrayLike, names: Sequence[str] | None = None) -> str:
    """A short hash of the shard sizes (and names), for fingerprints of saved states.

    Example:
        >>> shards_digest([3, 2]) == shards_digest([3, 2]) != shards_digest([2, 3])
        True
    """
    digest = hashlib.blake2b(check_shard_sizes(sizes).tobytes(), digest_size=8)
    for name in names or ():
        digest.update(b"\0" + name.encode())
    return digest.hexdigest()


def shard_runs(
    starts: Sequence[int], indices: NDArray[np.int64]
) -> list[tuple[int, NDArray[np.int64]]]:
    """Global ``indices`` as runs ``(shard, local indices)`` of one shard each, in order.

    ``starts`` are the shards' first global indices, then the total. A batch within one
    shard (the usual case) costs one min, one max and one bisection.

    Raises:
        IndexError: An index outside ``[0, total)``, named.

    Example:
        >>> [(s, local.tolist()) for s, local in shard_runs([0, 2, 5], np.array([3, 4, 0]))]
        [(1, [1, 2]), (0, [0])]
    """
    low, high = int(indices.min()), int(indices.max())
    shard = bisect.bisect_right(starts, low) - 1
    if 0 <= shard < len(starts) - 1 and high < starts[shard + 1]:
        return [(shard, indices - starts[shard])]
    total = starts[-1]
    if low < 0 or high >= total:
        bad = int(indices[(indices < 0) | (indices >= total)][0])
        raise IndexError(f"index {bad} is out of range for a sharded dataset of {total} samples.")
    shards = np.searchsorted(np.asarray(starts, dtype=np.int64), indices, side="right") - 1
    cuts = (np.flatnonzero(shards[1:] != shards[:-1]) + 1).tolist()
    bounds = zip([0, *cuts], [*cuts, indices.size], strict=True)
    return [(int(shards[b]), indices[b:e] - starts[int(shards[b])]) for b, e in bounds]
