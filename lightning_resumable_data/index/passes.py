"""A source read as a sequence of passes, each a fresh keyed permutation of the source.

Draw ``d`` of a source of ``n`` samples is element ``d mod n`` of pass ``d // n``'s
permutation. Every pass has its own key, derived by SplitMix64 from the source's key and
the pass number, so any draw is computed in O(1), without building a pass's table, and a
batch of draws spread over thousands of passes (a small source read by one rank of
thousands) costs the same per draw as one pass:

* ``n <= EXACT_SMALL`` (16): an exact Fisher-Yates shuffle of the pass, from keyed words
  (the network is measurably biased on such tiny domains);
* above: the package's 8-round mixed-radix Feistel network with cycle walking
  (:mod:`~lightning_resumable_data.index.permutation`), keyed per pass.

Example:
    >>> first, second = pass_samples(np.arange(10), size=5, seed=0, key=(0, 1)).reshape(2, 5)
    >>> sorted(first.tolist()), sorted(second.tolist())
    ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
"""

from __future__ import annotations

import functools
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.bisection import mix64
from lightning_resumable_data.index.keys import key_sequence
from lightning_resumable_data.index.network import _network
from lightning_resumable_data.index.permutation import FEISTEL_ROUNDS, _radices

__all__ = ["EXACT_SMALL", "pass_samples"]

EXACT_SMALL: Final = 16  # sources up to this size get an exact shuffle per pass
_PASS_STREAM: Final = 0x50415353  # "PASS"


@functools.lru_cache(maxsize=1024)
def _source_key(seed: int, key: tuple[int, ...]) -> NDArray[np.uint64]:
    words = key_sequence(_PASS_STREAM, seed, *key).generate_state(FEISTEL_ROUNDS, np.uint64)
    out: NDArray[np.uint64] = words.astype(np.uint64)
    out.flags.writeable = False
    return out


def _round_keys(source: NDArray[np.uint64], passes: NDArray[np.uint64]) -> list[NDArray[np.uint64]]:
    """One key per round for each draw: SplitMix64 of the pass number under a source word."""
    return [mix64(passes, word) for word in source]


def _shuffled(
    offsets: NDArray[np.int64], size: int, keys: list[NDArray[np.uint64]]
) -> NDArray[np.int64]:
    """Element ``offsets`` of an exact Fisher-Yates shuffle of ``[0, size)`` per pass."""
    table = np.broadcast_to(np.arange(size, dtype=np.int64), (len(offsets), size)).copy()
    rows = np.arange(len(offsets))
    for i in range(size - 1, 0, -1):
        words = mix64(np.full(len(offsets), i, dtype=np.uint64), keys[i % len(keys)])
        j = ((words >> np.uint64(32)) * np.uint64(i + 1) >> np.uint64(32)).astype(np.int64)
        held = table[rows, i].copy()
        table[rows, i] = table[rows, j]
        table[rows, j] = held
    out: NDArray[np.int64] = table[rows, offsets]
    return out


def _networked(
    offsets: NDArray[np.int64], size: int, keys: list[NDArray[np.uint64]]
) -> NDArray[np.int64]:
    """Element ``offsets`` of the keyed Feistel permutation of ``[0, size)`` per pass."""
    a, b = _radices(size)
    out = _network(offsets.astype(np.uint64), tuple(keys), a, b)  # type: ignore[arg-type]
    outside = np.flatnonzero(out >= np.uint64(size))
    while outside.size:  # cycle walking: fewer than 1 / b of the values, a few times
        walked = _network(out[outside], tuple(k[outside] for k in keys), a, b)  # type: ignore[misc]
        out[outside] = walked
        outside = outside[walked >= np.uint64(size)]
    return out.view(np.int64)


def pass_samples(
    draws: NDArray[np.integer], size: int, seed: int, key: tuple[int, ...]
) -> NDArray[np.int64]:
    """Map a source's draw numbers to its sample indices: a fresh permutation per pass.

    Args:
        draws: Draw numbers (>= 0), any order.
        size: Samples in the source, >= 1.
        seed: The run's seed.
        key: What identifies the source's pass sequence (e.g. ``(epoch, source)``).

    Example:
        >>> pass_samples(np.array([0, 0]), size=1, seed=0, key=(0,)).tolist()
        [0, 0]
    """
    d = np.asarray(draws, dtype=np.int64).reshape(-1)
    if size < 1:
        raise ValueError(f"size={size} must be >= 1.")
    if size == 1 or not d.size:
        return np.zeros(d.size, dtype=np.int64)
    passes = d // size
    offsets = d - passes * size
    keys = _round_keys(_source_key(int(seed), tuple(key)), passes.astype(np.uint64))
    if size <= EXACT_SMALL:
        return _shuffled(offsets, size, keys)
    return _networked(offsets, size, keys)
