"""Epoch permutations: the shuffled global order of one epoch.

Two algorithms, chosen by name (:data:`PermutationAlgorithm`):

``"randperm"``
    Bit-identical to ``torch.randperm(n, generator=torch.Generator().manual_seed(seed))``,
    which is what ``torch.utils.data.DistributedSampler`` uses with ``seed + epoch``. Torch's
    algorithm is a sequential Fisher-Yates shuffle driven by a Mersenne Twister; it cannot be
    vectorised, so we run torch's own CPU kernel once and hand its buffer to NumPy without a
    copy. Identity with torch therefore holds by construction, on every torch version. Costs
    O(n) time and 4 (n < 2**31) or 8 bytes per index of memory.

``"feistel"``
    A keyed pseudo-random permutation of ``[0, n)``: a six-round Feistel network over a
    mixed-radix domain ``Z_a x Z_b`` (``a ~ b ~ sqrt(n)``, ``a * b >= n``), with
    cycle-walking for the rare values that land past ``n``. Any
    element or slice ``perm[a:b]`` is computed directly from its positions in O(b - a) time
    and memory, so a 10**10-element epoch costs nothing until it is read. Keys come from
    ``numpy.random.SeedSequence([seed, epoch, stream])``: (seed=1, epoch=0) and
    (seed=0, epoch=1) are unrelated streams.

Example:
    >>> randperm(5, seed=0).tolist()
    [4, 0, 1, 3, 2]
    >>> perm = feistel_slice(10, seed=0, epoch=0, start=0, stop=10)
    >>> sorted(perm.tolist()) == list(range(10))
    True
"""

from __future__ import annotations

import math
from typing import Final, Literal, get_args

import numpy as np
from numpy.typing import NDArray

__all__ = [
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

FEISTEL_ROUNDS: Final = 6
# Stream id mixed into the SeedSequence so that permutation keys never collide with the
# other random streams this package derives from the same (seed, epoch).
_PERMUTATION_STREAM: Final = 0x5045524D  # "PERM"
_MIX_1: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_2: Final = np.uint64(0xBF58476D1CE4E5B9)
_MAX_SEED: Final = 2**63 - 1


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
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed={seed} must be in [0, 2**63 - 1]; pass a non-negative seed.")


def randperm(n: int, seed: int) -> NDArray[np.int64] | NDArray[np.int32]:
    """Return ``torch.randperm(n)`` for a generator seeded with ``seed``, as a NumPy array.

    The dtype is ``int32`` when ``n < 2**31`` (half the memory and a faster shuffle; the
    values are identical) and ``int64`` otherwise.

    Args:
        n: Number of elements, ``n >= 0``.
        seed: Generator seed; ``torch.utils.data.DistributedSampler`` uses ``seed + epoch``.

    Example:
        >>> randperm(4, seed=1).tolist()
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
    """Return the round keys of the Feistel permutation for ``(seed, epoch)``.

    Example:
        >>> feistel_keys(0, 0).shape
        (6,)
    """
    _check_seed(seed)
    if epoch < 0:
        raise ValueError(f"epoch={epoch} must be >= 0.")
    sequence = np.random.SeedSequence([int(seed), int(epoch), _PERMUTATION_STREAM])
    keys: NDArray[np.uint64] = sequence.generate_state(rounds, dtype=np.uint64).astype(np.uint64)
    return keys


def _radices(n: int) -> tuple[int, int]:
    """Split ``[0, n)`` into a mixed-radix domain ``Z_a x Z_b`` with ``a ~ b ~ sqrt(n)``.

    ``a * b - n < a``, so cycle-walking almost never has to re-apply the network.
    """
    a = max(2, math.isqrt(n - 1) + 1)  # ceil(sqrt(n))
    return a, max(2, -(-n // a))


def _round_function(
    half: NDArray[np.uint64], key: np.uint64, modulus: int, scratch: NDArray[np.uint64]
) -> NDArray[np.uint64]:
    """Mix ``half`` with ``key`` (splitmix64 finaliser) into ``[0, modulus)``.

    The top 32 bits of the hash are scaled into range by a multiply-shift (``modulus`` is
    below 2**32 for any ``n`` below 2**64). Works in place on one fresh array.
    """
    h = np.bitwise_xor(half, key)
    h *= _MIX_1
    np.right_shift(h, np.uint64(31), out=scratch)
    h ^= scratch
    h *= _MIX_2
    h >>= np.uint64(32)
    h *= np.uint64(modulus)
    h >>= np.uint64(32)
    return h


def _feistel_once(
    x: NDArray[np.uint64], keys: NDArray[np.uint64], a: int, b: int
) -> NDArray[np.uint64]:
    """One pass of the mixed-radix Feistel network: a bijection of ``[0, a * b)``."""
    high = x // np.uint64(b)  # in Z_a
    low = x - high * np.uint64(b)  # in Z_b
    scratch = np.empty_like(x)
    for key in keys:
        # (high in Z_p, low in Z_q) -> (low, (high + F(low)) mod p); p and q swap roles.
        mixed = _round_function(low, key, a, scratch)
        mixed += high
        mixed -= np.uint64(a) * (mixed >= np.uint64(a))
        high, low = low, mixed
        a, b = b, a
    high *= np.uint64(b)
    high += low
    result: NDArray[np.uint64] = high
    return result


def feistel_permute(
    positions: NDArray[np.integer], n: int, keys: NDArray[np.uint64]
) -> NDArray[np.int64]:
    """Map ``positions`` (values in ``[0, n)``) through the keyed permutation of ``[0, n)``.

    Cycle-walking re-applies the network to the few values that land in ``[n, a * b)``;
    the domain exceeds ``n`` by less than ``sqrt(n) + 1``, so that is rare.

    Example:
        >>> keys = feistel_keys(seed=0, epoch=0)
        >>> out = feistel_permute(np.arange(8), 8, keys)
        >>> sorted(out.tolist())
        [0, 1, 2, 3, 4, 5, 6, 7]
    """
    if n <= 0:
        raise ValueError(f"n={n} must be > 0.")
    if n >= 2**64:
        raise ValueError(f"n={n} must be < 2**64.")
    a, b = _radices(n)
    x = _feistel_once(np.asarray(positions, dtype=np.uint64), keys, a, b)
    outside = np.flatnonzero(x >= np.uint64(n))
    while outside.size:
        walked = _feistel_once(x[outside], keys, a, b)
        x[outside] = walked
        outside = outside[walked >= np.uint64(n)]
    return x.view(np.int64)


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
