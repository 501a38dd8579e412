"""Epoch permutations: the shuffled global order of one epoch.

Two algorithms, chosen by name (:data:`PermutationAlgorithm`):

``"randperm"``
    Bit-identical to ``torch.randperm(n, generator=torch.Generator().manual_seed(seed))``,
    which is what ``torch.utils.data.DistributedSampler`` uses with ``seed + epoch``. Torch's
    algorithm is a sequential Fisher-Yates shuffle driven by a Mersenne Twister; it cannot be
    vectorised, so we run torch's own CPU kernel once and hand its buffer to NumPy without a
    copy. Identity with torch holds by construction, on every torch version, and so does
    torch's seed aliasing: its CPU generator seeds the Mersenne Twister with the low 32 bits
    of the seed, so seeds equal modulo ``2**32`` give the same order (in torch too).

``"feistel"``
    A keyed permutation of ``[0, n)`` with random access: any element or slice
    ``perm[i:j]`` costs O(j - i), whatever ``n``. Keys come from
    :func:`~lightning_resumable_data.index.keys.key_sequence` of ``(seed, epoch)``
    (fixed-width: no two ``(seed, epoch)`` pairs share a stream). Two regimes:

    * ``n <= EXACT_THRESHOLD`` (``2**16``): an exact uniform shuffle, NumPy's
      ``Generator.permutation`` keyed on ``(n, keys)``, materialised once (about 1 ms
      and 256 KiB at the threshold) and cached. Small domains are where Feistel networks
      are measurably biased, so they get no network at all.
    * above: an 8-round Feistel network over ``Z_a x Z_b`` (``a`` even, ``a ~ b ~
      sqrt(n)``, ``a * b - n < a``) with cycle walking, O(1) memory, computed in
      cache-sized chunks (about 50 M indices/s on one core). The even radix makes odd
      permutations reachable (rounds modulo an odd radix only make even ones). Forced
      below the threshold, the network passes the statistical battery
      (``tests/statistics/battery.py``, ``docs/statistics.md``) from ``n = 10`` on and
      fails it only at ``n <= 8``: the threshold leaves a margin of over 6,000x.

Example:
    >>> randperm(5, seed=0).tolist()
    [4, 0, 1, 3, 2]
    >>> feistel_slice(10, seed=0, epoch=0, start=0, stop=10).tolist()
    [1, 2, 9, 7, 4, 8, 3, 6, 0, 5]
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Final, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.keys import key_rng, key_sequence
from lightning_resumable_data.index.network import _network, walk

__all__ = [
    "EXACT_THRESHOLD",
    "FEISTEL_ROUNDS",
    "PERMUTATION_ALGORITHMS",
    "PermutationAlgorithm",
    "check_algorithm",
    "feistel_keys",
    "feistel_permute",
    "feistel_slice",
    "randperm",
]

PermutationAlgorithm = Literal["randperm", "feistel"]
PERMUTATION_ALGORITHMS: Final[tuple[str, ...]] = get_args(PermutationAlgorithm)

FEISTEL_ROUNDS: Final = 8  # rounds of the network, and key words from feistel_keys
EXACT_THRESHOLD: Final = 2**16  # n up to this: exact keyed shuffle, materialised and cached
MAX_N: Final = 2**63  # outputs must fit int64
_CHUNK: Final = 2**14  # positions per pass of the network: temporaries stay in L2
_PERMUTATION_STREAM: Final = 0x5045524D  # "PERM": feistel_keys(seed, epoch)
_EXACT_STREAM: Final = 0x50455845  # "PEXE": the exact shuffle of (n, keys)
_ROUND_STREAM: Final = 0x5045524E  # "PERN": the network's round keys from keys
_SEED_LIMIT: Final = 2**64  # torch's manual_seed takes [0, 2**64) (and negatives, wrapped)


def check_algorithm(algorithm: str) -> PermutationAlgorithm:
    """Return ``algorithm`` if it names a permutation algorithm, else raise ``ValueError``.

    Example:
        >>> check_algorithm("feistel")
        'feistel'
    """
    if algorithm not in PERMUTATION_ALGORITHMS:
        raise ValueError(
            f"algorithm={algorithm!r} is not a permutation algorithm; expected one of "
            f"{', '.join(repr(a) for a in PERMUTATION_ALGORITHMS)}. Use 'randperm' to match "
            "torch.utils.data.DistributedSampler, 'feistel' for datasets too large to "
            "materialise."
        )
    return algorithm  # type: ignore[return-value]


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed={seed!r} must be an int, got {type(seed).__name__}.")
    if not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"seed={seed} must be in [0, 2**64 - 1]; pass a non-negative seed.")


def randperm(n: int, seed: int) -> NDArray[np.int64] | NDArray[np.int32]:
    """Return ``torch.randperm(n)`` for a generator seeded with ``seed``, as a NumPy array.

    The dtype is ``int32`` when ``n < 2**31`` (half the memory and a faster shuffle; the
    values are identical) and ``int64`` otherwise. Like torch, only ``seed % 2**32`` matters.

    Args:
        n: Number of elements, ``n >= 0``.
        seed: Generator seed in ``[0, 2**64)``; ``torch.utils.data.DistributedSampler`` uses
            ``seed + epoch``.

    Example:
        >>> randperm(4, seed=1).tolist()
        [1, 3, 2, 0]
        >>> randperm(4, seed=1 + 2**32).tolist()  # torch's generator keeps 32 bits
        [1, 3, 2, 0]
    """
    import torch  # torch's Fisher-Yates kernel is the definition of this order.

    _check_seed(seed)
    if n < 0:
        raise ValueError(f"n={n} must be >= 0.")
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    dtype = torch.int32 if n < 2**31 else torch.int64
    return torch.randperm(n, generator=generator, dtype=dtype).numpy()


def feistel_keys(seed: int, epoch: int, rounds: int = FEISTEL_ROUNDS) -> NDArray[np.uint64]:
    """Return the key of the ``"feistel"`` permutation for ``(seed, epoch)``: ``rounds`` words.

    :func:`feistel_permute` accepts any non-empty key array (callers may derive their own);
    this one is fixed-width keyed, so distinct ``(seed, epoch)`` give distinct keys.

    Example:
        >>> feistel_keys(0, 0).shape
        (8,)
        >>> bool((feistel_keys(2**32, 5) != feistel_keys(0, 1 + 5 * 2**32)).any())
        True
    """
    _check_seed(seed)
    if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)):
        raise TypeError(f"epoch={epoch!r} must be an int, got {type(epoch).__name__}.")
    if not 0 <= epoch < _SEED_LIMIT:
        raise ValueError(f"epoch={epoch} must be in [0, 2**64 - 1].")
    sequence = key_sequence(_PERMUTATION_STREAM, int(seed), int(epoch))
    keys: NDArray[np.uint64] = sequence.generate_state(rounds, dtype=np.uint64).astype(np.uint64)
    return keys


@lru_cache(maxsize=64)  # 64 tables of at most 256 KiB: 16 MiB at worst
def _exact_table(n: int, key: tuple[int, ...]) -> NDArray[np.int32]:
    """The exact keyed shuffle of ``[0, n)`` (read-only; ``n <= EXACT_THRESHOLD``)."""
    table = key_rng(_EXACT_STREAM, n, *key).permutation(n).astype(np.int32)
    table.setflags(write=False)
    return table


@lru_cache(maxsize=256)
def _round_keys(key: tuple[int, ...]) -> tuple[np.uint64, ...]:
    """The network's round keys, expanded from any key (so any key length works)."""
    words = key_sequence(_ROUND_STREAM, len(key), *key).generate_state(FEISTEL_ROUNDS, np.uint64)
    return tuple(np.uint64(w) for w in words.tolist())


def _radices(n: int) -> tuple[int, int]:
    """Split ``[0, n)`` into ``Z_a x Z_b``: ``a`` even, ``a ~ b ~ sqrt(n)``, ``a * b - n < a``."""
    a = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
    a += a % 2
    return a, -(-n // a)


def feistel_permute(
    positions: NDArray[np.integer], n: int, keys: NDArray[np.integer]
) -> NDArray[np.int64]:
    """Map ``positions`` (values in ``[0, n)``) through the keyed permutation of ``[0, n)``.

    Args:
        positions: Positions in ``[0, n)``, any integer dtype and shape.
        n: Size of the permuted range, ``1 <= n <= 2**63``.
        keys: The permutation's key: a non-empty array of integers, read as 64-bit words;
            usually :func:`feistel_keys`.

    Returns:
        ``perm[positions]`` as ``int64``, in the shape of ``positions``.

    Raises:
        ValueError: ``n`` is out of range or ``keys`` is empty.
        IndexError: A position is outside ``[0, n)``.

    Example:
        >>> keys = feistel_keys(seed=0, epoch=0)
        >>> out = feistel_permute(np.arange(8), 8, keys)
        >>> sorted(out.tolist())
        [0, 1, 2, 3, 4, 5, 6, 7]
    """
    if n <= 0:
        raise ValueError(f"n={n} must be > 0.")
    if n > MAX_N:
        raise ValueError(
            f"n={n} must be <= 2**63 so that every index fits int64; split a larger range."
        )
    key = tuple(np.asarray(keys, dtype=np.uint64).reshape(-1).tolist())
    if not key:
        raise ValueError("keys is empty; pass feistel_keys(seed, epoch).")
    positions = np.asarray(positions)
    if positions.size and (int(positions.min()) < 0 or int(positions.max()) >= n):
        raise IndexError(
            f"positions must be in [0, n={n}), got {int(positions.min())} .. "
            f"{int(positions.max())}; reduce them modulo n or fix the caller."
        )
    return _permute(positions, n, key)


def _permute(positions: NDArray[np.integer], n: int, key: tuple[int, ...]) -> NDArray[np.int64]:
    """:func:`feistel_permute` without its checks, for callers whose positions are valid."""
    if n <= EXACT_THRESHOLD:
        table: NDArray[np.int64] = _exact_table(n, key)[positions].astype(np.int64)
        return table
    flat = _network_permute(positions.reshape(-1), n, key)
    return flat.reshape(positions.shape)


def _network_permute(
    positions: NDArray[np.integer], n: int, key: tuple[int, ...]
) -> NDArray[np.int64]:
    """The Feistel network alone, at any ``n >= 2``, keyed by any key tuple.

    :func:`feistel_permute` uses it above ``EXACT_THRESHOLD``; the statistical battery
    calls it directly to test the network below the threshold too.

    Example:
        >>> sorted(_network_permute(np.arange(6), 6, (1, 2)).tolist())
        [0, 1, 2, 3, 4, 5]
    """
    flat = np.asarray(positions).reshape(-1).astype(np.uint64)
    round_keys, (a, b) = _round_keys(key), _radices(n)
    if flat.size <= _CHUNK:  # one pass, into its own output
        out = _network(flat, round_keys, a, b)
    else:
        out = np.empty(flat.size, dtype=np.uint64)
        for begin in range(0, flat.size, _CHUNK):  # cache-sized passes: memory flat in size
            chunk = flat[begin : begin + _CHUNK]
            out[begin : begin + _CHUNK] = _network(chunk, round_keys, a, b)
    walk(out, n, round_keys, a, b)
    return out.view(np.int64)


def feistel_slice(n: int, seed: int, epoch: int, start: int, stop: int) -> NDArray[np.int64]:
    """Return ``perm[start:stop]`` of the Feistel permutation of ``[0, n)`` for an epoch.

    Only ``stop - start`` values are computed; ``n`` may be 10**10 or more.

    Example:
        >>> first = feistel_slice(10**10, seed=0, epoch=0, start=0, stop=4)
        >>> first.shape, bool((first < 10**10).all())
        ((4,), True)
    """
    if not 0 <= start <= stop <= n:
        raise ValueError(f"slice [{start}:{stop}] must satisfy 0 <= start <= stop <= n={n}.")
    positions = np.arange(start, stop, dtype=np.uint64)
    return feistel_permute(positions, n, feistel_keys(seed, epoch))
