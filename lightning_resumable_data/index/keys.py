"""Fixed-width key derivation: one injective path from integers to a random stream.

``numpy.random.SeedSequence([a, b, c])`` splits each integer into as many 32-bit words as
it needs and concatenates them, so integers of different widths can collide:
``[2**32, 5]`` and ``[0, 1 + 5 * 2**32]`` give the same words. Every random stream of this
package is derived here instead: a stream tag, the number of values, then each value as
exactly two 32-bit words (low, high). Distinct ``(stream, values)`` tuples give distinct
entropy, so distinct streams. :func:`key_digest` hashes the same words with BLAKE2b instead
of a ``SeedSequence``: a few microseconds, for derivations made on every training step.

Example:
    >>> a = key_sequence(0x5045524D, 2**32, 5).generate_state(2)
    >>> b = key_sequence(0x5045524D, 0, 1 + 5 * 2**32).generate_state(2)
    >>> bool((a != b).any())
    True
    >>> key_words(0x5045524D, 1, 2**40).tolist()
    [1346720333, 2, 1, 0, 0, 256]
"""

from __future__ import annotations

import hashlib
import struct
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["KEY_LIMIT", "key_bytes", "key_digest", "key_rng", "key_sequence", "key_words"]

KEY_LIMIT: Final = 2**64  # every keyed value must be below this
_WORD: Final = 2**32


def key_words(stream: int, *values: int) -> NDArray[np.uint32]:
    """The fixed-width entropy words of ``(stream, values)``: injective over all inputs.

    Layout: ``[stream, len(values), lo(v0), hi(v0), lo(v1), hi(v1), ...]``.

    Raises:
        ValueError: ``stream`` is not a 32-bit tag, or a value is negative or >= 2**64.
    """
    if not 0 <= int(stream) < _WORD:
        raise ValueError(f"stream={stream} must be a 32-bit tag in [0, 2**32).")
    words = [int(stream), len(values)]
    for value in values:
        v = int(value)
        if not 0 <= v < KEY_LIMIT:
            raise ValueError(
                f"key value {v} must be in [0, 2**64): seeds, epochs, positions and ids are "
                "non-negative 64-bit integers."
            )
        words += [v % _WORD, v // _WORD]
    return np.array(words, dtype=np.uint32)


def key_bytes(stream: int, *values: int) -> bytes:
    """The words of :func:`key_words` as little-endian bytes, built without NumPy.

    Raises:
        ValueError: As :func:`key_words`.

    Example:
        >>> key_bytes(7, 2**40) == key_words(7, 2**40).tobytes()
        True
    """
    if not 0 <= int(stream) < _WORD:
        raise ValueError(f"stream={stream} must be a 32-bit tag in [0, 2**32).")
    for value in values:
        if not 0 <= int(value) < KEY_LIMIT:
            raise ValueError(
                f"key value {int(value)} must be in [0, 2**64): seeds, epochs, positions and "
                "ids are non-negative 64-bit integers."
            )
    return struct.pack(f"<2I{len(values)}Q", int(stream), len(values), *map(int, values))


def key_digest(stream: int, *values: int, words: int) -> tuple[int, ...]:
    """``words`` 32-bit words hashed with BLAKE2b from the key of ``(stream, values)``.

    The same injective key as :func:`key_sequence`, mixed by a cryptographic hash: what a
    derivation made on every training step uses (a ``SeedSequence`` costs several times
    more). ``words`` is at most 16.

    Example:
        >>> same = key_digest(1, 2, 3, words=2) == key_digest(1, 2, 3, words=2)
        >>> same, key_digest(1, 2, 3, words=2) != key_digest(1, 3, 2, words=2)
        (True, True)
    """
    digest = hashlib.blake2b(key_bytes(stream, *values), digest_size=4 * words).digest()
    return struct.unpack(f"<{words}I", digest)


def key_sequence(stream: int, *values: int) -> np.random.SeedSequence:
    """The ``SeedSequence`` of ``(stream, values)`` (see :func:`key_words`).

    Example:
        >>> key_sequence(1, 0, 0).generate_state(1).dtype
        dtype('uint32')
    """
    return np.random.SeedSequence(key_words(stream, *values))


def key_rng(stream: int, *values: int) -> np.random.Generator:
    """A NumPy ``Generator`` (PCG64) keyed on ``(stream, values)``.

    Example:
        >>> int(key_rng(1, 2, 3).integers(10**6)) == int(key_rng(1, 2, 3).integers(10**6))
        True
    """
    return np.random.default_rng(key_sequence(stream, *values))
