# size: three vectorised walks (shared, dense, solo) kept side by side: each checks the others
"""A random binary sequence with exact totals and random access: the bisection tree.

A sequence of ``length`` positions holds exactly ``ones`` ones. It is the leaf row of the
aligned binary tree over ``[0, 2**depth)`` (``2**depth >= length``), built top down:

* a *full* node (``2**s`` positions, all inside the sequence) holding ``c`` ones gives its
  left half ``c // 2`` of them, and the odd one, if ``c`` is odd, to a half chosen by a
  keyed fair coin (for node ``i`` of a level: bit ``i % 64`` of a SplitMix64 word of
  ``i // 64``);
* the *ragged* last node of a level (``n < 2**s`` positions) gives its left part of
  ``h = min(2**(s - 1), n)`` positions ``floor(c * h / n)`` ones, plus one with probability
  ``(c * h mod n) / n``.

So every position is a one with probability ``ones / length``, and the ones are spread
evenly at every scale: a full block of ``2**s`` positions holds ``floor`` or ``ceil`` of its
ancestors' share, never a run of chance. The label of a position and the number of ones
before it are read on its root-to-leaf path alone: a sorted batch of positions costs one
vectorised step per level over the distinct nodes on their paths, and a cache of the nodes
``2**16`` above the leaves keeps the upper levels off the hot path.

Example:
    >>> tree = Bisection(length=10, ones=3, key=(7,))
    >>> bits, before = tree.locate(np.arange(10))
    >>> int(bits.sum()), before[-1] + bits[-1]
    (3, np.int64(3))
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.keys import key_sequence

__all__ = ["PIVOT_BITS", "Bisection", "mix64"]

PIVOT_BITS: Final = 16  # cached nodes are 2**16 positions wide
_PIVOTS_CACHED: Final = 8  # batches meeting up to this many pivots use (and fill) the cache
_BISECTION_STREAM: Final = 0x42495345  # "BISE"
_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_1: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2: Final = np.uint64(0x94D049BB133111EB)
_30, _27, _31 = np.uint64(30), np.uint64(27), np.uint64(31)
_63, _ONE, _SIX = np.uint64(63), np.uint64(1), np.uint64(6)


def mix64(words: NDArray[np.uint64], seed: np.uint64 | NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64 of counters ``words`` under ``seed``: independent-looking 64-bit words.

    Example:
        >>> mix64(np.arange(2, dtype=np.uint64), np.uint64(1)).dtype
        dtype('uint64')
    """
    z = np.multiply(words, _GOLDEN, dtype=np.uint64)  # arrays wrap silently
    z += seed
    z ^= z >> _30
    z *= _MIX_1
    z ^= z >> _27
    z *= _MIX_2
    z ^= z >> _31
    out: NDArray[np.uint64] = z
    return out


def _first(ids: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Where each run of equal values in sorted ``ids`` starts."""
    flags = np.empty(len(ids), dtype=bool)
    flags[:1] = True
    np.not_equal(ids[1:], ids[:-1], out=flags[1:])
    return flags


def _distinct(ids: NDArray[np.int64]) -> NDArray[np.int64]:
    """The distinct values of sorted ``ids``, in order (``np.unique`` without its sort)."""
    return ids[_first(ids)]


_M64: Final = (1 << 64) - 1


def _mix_int(counter: int, seed: int) -> int:
    """:func:`mix64` of one counter, in Python integers (no array overhead)."""
    z = (counter * 0x9E3779B97F4A7C15 + seed) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _scaled(word: int, n: int) -> int:
    """``word`` (64 bits) scaled to a uniform integer in ``[0, n)``."""
    return (word * n) >> 64


class Bisection:
    """A keyed random binary sequence of ``length`` positions with exactly ``ones`` ones.

    Args:
        length: Positions, ``>= 1``.
        ones: Ones among them, in ``[0, length]``.
        key: What identifies the sequence (values in ``[0, 2**64)``).

    Example:
        >>> bits, _ = Bisection(8, 4, key=(0,)).locate(np.arange(8))
        >>> int(bits.sum())
        4
    """

    def __init__(self, length: int, ones: int, key: tuple[int, ...]) -> None:
        if length < 1 or not 0 <= ones <= length:
            raise ValueError(f"need length >= 1 and 0 <= ones <= length, got {length}, {ones}.")
        self.length, self.ones = int(length), int(ones)
        self.depth = (self.length - 1).bit_length()
        words = key_sequence(_BISECTION_STREAM, *key).generate_state(self.depth + 1, np.uint64)
        self._level_keys = words.astype(np.uint64)
        self._key_ints: list[int] = self._level_keys.tolist()
        self._spine = self._walk_spine()
        self._pivots: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._pivot_level = max(0, self.depth - PIVOT_BITS)

    def _word(self, level: int, index: int) -> int:
        return _mix_int(index, self._key_ints[level])

    def _walk_spine(self) -> dict[int, int]:
        """Left-child ones of the ragged last node of each level (exact integers)."""
        spine: dict[int, int] = {}
        index, ones = 0, self.ones
        for level in range(self.depth):
            span = 1 << (self.depth - level)
            size = self.length - index * span
            half = span >> 1
            if size == span:
                return spine  # the last node is full, and so is every one below it
            left_size = min(half, size)
            share, rest = divmod(ones * left_size, size)
            left = share + (_scaled(self._word(level, index), size) < rest)
            spine[level] = left
            if size > half:
                index, ones = 2 * index + 1, ones - left
            else:
                index = 2 * index
        return spine

    def _left(
        self, level: int, ids: NDArray[np.int64], ones: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Ones given to the left child of each node ``ids`` of ``level`` (sorted, distinct).

        Nodes sharing a coin word (64 consecutive ids) hash it once.
        """
        groups = ids >> 6
        first = _first(groups)
        words = mix64(groups[first].astype(np.uint64), self._level_keys[level])
        words = words[np.cumsum(first) - 1]
        coin = ((words >> (ids & 63).astype(np.uint64)) & _ONE).astype(np.int64)
        left: NDArray[np.int64] = (ones >> 1) + (ones & 1) * coin
        ragged = self._spine.get(level)
        if ragged is not None and len(ids) and ids[-1] == (self.length - 1) >> (self.depth - level):
            left[-1] = ragged  # the ragged node is the last of its level
        return left

    def _shared(
        self,
        start: int,
        ids: list[NDArray[np.int64]],
        ones: NDArray[np.int64],
        before: NDArray[np.int64],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Ones in and before each node of ``ids[-1]``, from level ``start``'s nodes down.

        ``ids`` holds the sorted distinct nodes of each level, parents first.
        """
        for offset in range(len(ids) - 1):
            parents, children = ids[offset], ids[offset + 1]
            level = start + offset
            first = int(parents[0])
            if int(parents[-1]) - first + 1 == len(parents):  # consecutive: a dense batch
                left = self._dense_left(level, first, ones)
                both_ones = np.empty(2 * len(left), dtype=np.int64)
                both_before = np.empty(2 * len(left), dtype=np.int64)
                both_ones[0::2], both_ones[1::2] = left, ones - left
                both_before[0::2], both_before[1::2] = before, before + left
                ones, before = both_ones, both_before
                if len(children) != len(ones):  # some children hold no position
                    kept = children - 2 * first
                    ones, before = ones[kept], before[kept]
                continue
            left = self._left(level, parents, ones)
            row = np.cumsum(_first(children >> 1)) - 1
            right = children & 1
            given = left[row]
            ones = given + right * (ones[row] - 2 * given)
            before = before[row] + right * given
        return ones, before

    def _dense_left(self, level: int, first: int, ones: NDArray[np.int64]) -> NDArray[np.int64]:
        """:meth:`_left` of the consecutive nodes ``first, first + 1, ...``: hashes per 64."""
        count = len(ones)
        low, high = first >> 6, (first + count - 1) >> 6
        words = mix64(np.arange(low, high + 1, dtype=np.uint64), self._level_keys[level])
        bits = np.unpackbits(words.astype("<u8").view(np.uint8), bitorder="little")
        coin = bits[first - 64 * low : first - 64 * low + count].astype(np.int64)
        left: NDArray[np.int64] = (ones >> 1) + (ones & 1) * coin
        ragged = self._spine.get(level)
        if ragged is not None and first + count - 1 == (self.length - 1) >> (self.depth - level):
            left[-1] = ragged
        return left

    def _solo(
        self,
        start: int,
        positions: NDArray[np.int64],
        ones: NDArray[np.int64],
        before: NDArray[np.int64],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Down from level ``start`` when each node holds one of ``positions``: no gathers.

        Where the positions are close (their nodes share coin words), each word of the
        range is hashed once; elsewhere the coins of all those levels are hashed in one call
        (a levels x positions array).
        """
        if start >= self.depth or not len(positions):
            return ones, before
        shifts = np.arange(self.depth - start, 0, -1, dtype=np.uint64)[:, None]
        p = positions.astype(np.uint64)[None, :]
        ids = p >> shifts
        groups = ids >> _SIX
        spans = (groups[:, -1] - groups[:, 0] + _ONE).tolist()
        close = [k for k, span in enumerate(spans) if 4 * span <= len(positions)]
        far = [k for k in range(len(spans)) if 4 * spans[k] > len(positions)]
        words = np.empty(ids.shape, dtype=np.uint64)
        for k in close:
            low = groups[k, 0]
            run = mix64(
                np.arange(low, low + spans[k], dtype=np.uint64), self._level_keys[start + k]
            )
            words[k] = run[(groups[k] - low).astype(np.intp)]
        if far:
            words[far] = mix64(groups[far], self._level_keys[start + np.array(far), None])
        coins = ((words >> (ids & _63)) & _ONE).astype(np.int64)
        rights = ((p >> (shifts - _ONE)) & _ONE).astype(np.int64)
        last, end = int(positions[-1]), self.length - 1
        for k in range(self.depth - start):
            level, right = start + k, rights[k]
            left = (ones >> 1) + (ones & 1) * coins[k]
            ragged = self._spine.get(level)
            if ragged is not None and last >> (self.depth - level) == end >> (self.depth - level):
                left[-1] = ragged  # the ragged node is the last position's, if any
            ones = left + right * (ones - 2 * left)
            before = before + right * left
        return ones, before

    def _pivot_rows(self, ids: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Ones in and before the pivot nodes ``ids`` (sorted, distinct).

        A few (a contiguous batch's) are cached; many (a rank's sparse batch, each pivot
        met once) are walked down from the root together.
        """
        if len(ids) > _PIVOTS_CACHED:
            return self._from_root(ids)
        for i in ids.tolist():
            if i not in self._pivots:
                self._pivots[i] = self._walk_to(i)
            while len(self._pivots) > 4 * _PIVOTS_CACHED:
                self._pivots.popitem(last=False)
        rows = np.array([self._pivots[i] for i in ids.tolist()], dtype=np.int64).reshape(-1, 2)
        return rows[:, 0].copy(), rows[:, 1].copy()

    def _walk_to(self, pivot: int) -> tuple[int, int]:
        """Ones in and before one pivot node, walked down from the root in Python integers."""
        ones, before, last = self.ones, 0, self.length - 1
        for level in range(self._pivot_level):
            node = pivot >> (self._pivot_level - level)
            ragged = self._spine.get(level)
            if ragged is not None and node == last >> (self.depth - level):
                left = ragged
            else:
                coin = (self._word(level, node >> 6) >> (node & 63)) & 1
                left = (ones >> 1) + (ones & 1) * coin
            if (pivot >> (self._pivot_level - level - 1)) & 1:
                ones, before = ones - left, before + left
            else:
                ones = left
        return ones, before

    def _from_root(self, ids: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Ones in and before the pivot nodes ``ids`` (sorted, distinct), from the root."""
        levels = [ids]
        for _ in range(self._pivot_level):
            levels.append(_distinct(levels[-1] >> 1))
        levels.reverse()
        root = np.array([self.ones], dtype=np.int64), np.zeros(1, dtype=np.int64)
        return self._shared(0, levels, *root)

    def locate(self, positions: NDArray[np.int64]) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
        """The bit at each position and the ones before it; ``positions`` sorted ascending.

        Example:
            >>> bits, before = Bisection(4, 2, key=(1,)).locate(np.array([0, 3]))
            >>> before.tolist()[0]
            0
        """
        positions = np.asarray(positions, dtype=np.int64)
        if self.depth == 0 or not len(positions):
            bits0 = np.full(len(positions), self.ones == 1)
            return bits0, np.zeros(len(positions), dtype=np.int64)
        leaves = _distinct(positions)
        # Nodes of 2**solo positions hold one leaf each: below them, no grouping is needed.
        gaps = leaves[1:] ^ leaves[:-1]
        solo = int(gaps.min()).bit_length() - 1 if len(gaps) else self.depth
        first = max(self._pivot_level, self.depth - solo)
        levels = [leaves >> (self.depth - first)]
        for _ in range(first - self._pivot_level):
            levels.append(_distinct(levels[-1] >> 1))
        levels.reverse()
        ones, before = self._pivot_rows(levels[0])
        ones, before = self._shared(self._pivot_level, levels, ones, before)
        ones, before = self._solo(first, leaves, ones, before)
        if len(leaves) != len(positions):
            where = np.searchsorted(leaves, positions)
            ones, before = ones[where], before[where]
        return ones == 1, before

    def ones_before(self, position: int) -> int:
        """Ones in ``[0, position)``, for ``0 <= position <= length``.

        Example:
            >>> Bisection(10, 3, key=(2,)).ones_before(10)
            3
        """
        if not 0 <= position <= self.length:
            raise ValueError(f"position={position} must be in [0, {self.length}].")
        if position == self.length:
            return self.ones
        _, before = self.locate(np.array([position], dtype=np.int64))
        return int(before[0])
