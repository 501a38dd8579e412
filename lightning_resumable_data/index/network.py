"""The mixed-radix Feistel network of the ``"feistel"`` permutation, and its cycle walk.

:mod:`~lightning_resumable_data.index.permutation` defines the permutation (keys, radices,
the exact regime below its threshold); this module holds the network's arithmetic, written
for few NumPy calls: every scalar operand is a 0-d array (a NumPy scalar costs a
conversion on each of the ~90 calls of a pass, which dominates a batch of a few thousand
positions); each round's hash ``F`` of its ``Z_q`` is looked up in a cached table (``q ~
sqrt(n)`` entries per round) while the radices are at most :data:`ROUND_TABLE_LIMIT`, so a
round is four calls instead of eleven; and the cycle walk of the values the network puts
in ``[n, a * b)`` is one lookup in a cached table of where each such value walks to (fewer
than ``a`` entries), instead of another pass of the network. All are bit-identical to the
rounds computed.

Example:
    >>> x = np.arange(6, dtype=np.uint64)
    >>> out = _network(x, (np.uint64(1), np.uint64(2)), 2, 3)
    >>> sorted(out.tolist())
    [0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["ROUND_TABLE_LIMIT", "WALK_TABLE_LIMIT", "walk"]

_MIX_1: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_2: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIXES: Final = (np.array(_MIX_1), np.array(_MIX_2))
_SHIFTS: Final = (np.array(31, dtype=np.uint64), np.array(32, dtype=np.uint64))
WALK_TABLE_LIMIT: Final = 2**14  # entries of a walk table (128 KiB): n up to ~2.7e8
ROUND_TABLE_LIMIT: Final = 2**13  # radix of the round tables (64 KiB each): n up to ~6.7e7
Keys = tuple[np.uint64, ...]


def _mix(low: NDArray[np.uint64], key: np.uint64, p: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """A round's ``F(low)`` in ``[0, p)``: multiply-xorshift of ``low ^ key``, top 32 bits."""
    (mix_1, mix_2), (shift_31, shift_32) = _MIXES, _SHIFTS
    mixed: NDArray[np.uint64] = np.bitwise_xor(low, np.asarray(key))
    np.multiply(mixed, mix_1, out=mixed)
    mixed ^= np.right_shift(mixed, shift_31)
    np.multiply(mixed, mix_2, out=mixed)
    np.right_shift(mixed, shift_32, out=mixed)
    np.multiply(mixed, p, out=mixed)
    np.right_shift(mixed, shift_32, out=mixed)
    return mixed


@lru_cache(maxsize=16)  # 16 keys of at most 8 * 2**13 words: 8 MiB at worst
def _round_tables(keys: Keys, a: int, b: int) -> tuple[NDArray[np.uint64], ...] | None:
    """Each round's ``F`` over all of its ``Z_q`` (read-only), or None above the limit."""
    if max(a, b) > ROUND_TABLE_LIMIT:
        return None
    tables, (p, q) = [], (a, b)
    for key in keys:
        table = _mix(np.arange(q, dtype=np.uint64), key, np.array(p, dtype=np.uint64))
        table.setflags(write=False)
        tables.append(table)
        p, q = q, p
    return tuple(tables)


def _network(x: NDArray[np.uint64], keys: Keys, a: int, b: int) -> NDArray[np.uint64]:
    """One pass of the mixed-radix Feistel network: a bijection of ``[0, a * b)``.

    Round ``i`` maps ``(high in Z_p, low in Z_q)`` to ``(low, (high + F_i(low)) mod p)``;
    ``p`` and ``q`` swap roles each round. ``F_i`` is a multiply-xorshift hash of
    ``low ^ key_i`` whose top 32 bits are scaled into ``[0, p)`` (``p < 2**32``), looked
    up in :func:`_round_tables` when the radices are small enough. A key may also be an
    array (one key per value; then ``F`` is computed).
    """
    tables = _round_tables(keys, a, b) if isinstance(keys[0], np.generic) else None
    p, q = np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)
    high = x // q  # in Z_a
    low = x - high * q  # in Z_b
    scratch, spare = np.empty_like(x), np.empty_like(x)
    for round_, key in enumerate(keys):
        if tables is None:
            mixed = _mix(low, key, p)
        else:  # "wrap" never wraps (low < q): take's fastest mode, into a spare buffer
            mixed = tables[round_].take(low.view(np.int64), out=spare, mode="wrap")
        np.add(mixed, high, out=mixed)  # in [0, 2p - 1)
        np.subtract(mixed, p, out=scratch)  # wraps to huge when mixed < p
        np.minimum(mixed, scratch, out=mixed)  # (high + F(low)) mod p
        high, low, spare = low, mixed, high
        p, q = q, p
    np.multiply(high, q, out=high)
    np.add(high, low, out=high)
    return high


@lru_cache(maxsize=16)  # 16 tables of at most 128 KiB
def _walk_table(n: int, keys: Keys, a: int, b: int) -> NDArray[np.uint64]:
    """Where the cycle walk takes each value of ``[n, a * b)`` (read-only).

    The walk from ``y`` applies the network until a value is below ``n``; a value on a
    cycle of values ``>= n`` only (never reached from below ``n``) stops when it is back.
    """
    start = np.arange(n, a * b, dtype=np.uint64)
    table = _network(start, keys, a, b)
    pending = np.flatnonzero((table >= np.uint64(n)) & (table != start))
    while pending.size:  # a few passes: each keeps fewer than 1 / b of the values
        table[pending] = _network(table[pending], keys, a, b)
        moved = table[pending]
        pending = pending[(moved >= np.uint64(n)) & (moved != start[pending])]
    table.setflags(write=False)
    return table


def walk(x: NDArray[np.uint64], n: int, keys: Keys, a: int, b: int) -> None:
    """Cycle-walk, in place, the values of ``x`` that the network put in ``[n, a * b)``.

    One lookup in :func:`_walk_table` when it has at most :data:`WALK_TABLE_LIMIT` entries;
    otherwise the network again on those values (fewer than ``1 / b`` of them), until none
    is left.
    """
    outside = (x >= np.uint64(n)).nonzero()[0]
    if not outside.size:
        return
    if a * b - n <= WALK_TABLE_LIMIT:
        x[outside] = _walk_table(n, keys, a, b)[x[outside] - np.uint64(n)]
        return
    while outside.size:
        walked = _network(x[outside], keys, a, b)
        x[outside] = walked
        outside = outside[walked >= np.uint64(n)]
