"""Random-access arrangement of a mixture segment: the source and draw number at any position.

A segment of length ``L`` draws exactly ``counts[j]`` samples from source ``j``. Its order
is built in three levels, each computed at any position without what comes before it:

1. **Blocks, stratified.** A balanced binary tree cuts the segment into blocks of
   ``BLOCK_SIZE`` (``2**29``) positions, the last one shorter. Each split gives the left
   child its proportional share of the parent's counts, rounded by largest remainder in
   exact integer arithmetic (ties to the lower source). A segment of at most ``BLOCK_SIZE``
   positions is one block, so this level only acts from ``2**29`` positions on, where NumPy's
   hypergeometric draws stop (totals must stay below ``10**9``).
2. **Leaves, uniform within a block.** A balanced binary tree cuts a block into leaves of
   ``LEAF_SIZE`` (``2**20``) positions. Each split draws the left child's counts from the
   multivariate hypergeometric law (chained univariate draws, one keyed generator per block,
   one vectorised draw per level of the tree): exactly the leaf counts of a uniform shuffle
   of the block.
3. **Positions, uniform within a leaf.** Position ``x`` of a leaf maps through a keyed
   permutation ``pi`` of the leaf
   (:func:`~lightning_resumable_data.index.permutation.feistel_permute`) to a slot ``s`` of
   the leaf's sorted multiset, where source ``j`` holds slots ``[start_j, start_j + n_j)``.
   The label is the source that holds ``s``; the draw number is the source's count before
   the leaf plus ``s - start_j``.

So a block is a uniformly random arrangement of its exact counts (up to the quality of
``pi``), and a source's draw numbers inside a leaf are a permutation of a contiguous range
that follows the previous leaf's: draws come in time order up to a window of one leaf.
Cost: O(1) per position, plus one network call and one key per leaf touched, and one table
of a block's leaf counts (one draw per tree node, cached) per block touched.

Example:
    >>> arrangement = Arrangement([8, 2], seed=0, key=(0, 0))
    >>> labels, draws = arrangement.locate(np.arange(10))
    >>> np.bincount(labels).tolist(), sorted(draws[labels == 1].tolist())
    ([8, 2], [0, 1])
    >>> arrangement.counts_before(10).tolist()
    [8, 2]
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final, NamedTuple, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.keys import key_rng, key_sequence
from lightning_resumable_data.index.permutation import feistel_permute

__all__ = ["BLOCK_SIZE", "LEAF_SIZE", "MAX_SEGMENT", "Arrangement", "arrangement"]

Counts = Sequence[int] | NDArray[np.integer]
_T = TypeVar("_T")
Table = tuple[NDArray[np.int64], NDArray[np.int64]]  # (counts, counts before), (rows, J)

LEAF_SIZE = 1 << 20  # positions per leaf (a power of two dividing BLOCK_SIZE)
BLOCK_SIZE = 1 << 29  # positions per block: below NumPy's 10**9 hypergeometric limit
MAX_SEGMENT: Final = 1 << 53  # float64 probabilities give exact counts below this
_SPLIT_STREAM: Final = 0x53504C54  # "SPLT"
_LEAF_STREAM: Final = 0x4C454146  # "LEAF"
_KEY_WORDS: Final = 8
_CACHE: Final = 8  # blocks and leaves kept per arrangement (first in, first out)


class _Leaf(NamedTuple):
    counts: NDArray[np.int64]  # per source, (J,)
    shift: NDArray[np.int64]  # draw number of slot 0 of each source's range: before - start
    ends: NDArray[np.int64]  # end of each source's slot range; ends[-1] is the leaf's size
    keys: NDArray[np.uint64]  # key of the leaf's permutation


def _share(counts: list[int], part: int, whole: int) -> list[int]:
    """The largest-remainder share of ``counts`` for ``part`` of ``whole`` positions."""
    if part >= whole:
        return list(counts)
    shares = [c * part // whole for c in counts]
    remainders = [c * part % whole for c in counts]
    for j in sorted(range(len(counts)), key=lambda j: (-remainders[j], j))[: part - sum(shares)]:
        shares[j] += 1  # remainders are > 0 here: sum(remainders) = whole * (part - sum)
    return shares


def _split(
    rng: np.random.Generator, nodes: NDArray[np.int64], sizes: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Left counts of ``nodes`` (rows) for left halves of ``sizes``: chained hypergeometric."""
    left = np.zeros_like(nodes)
    sample = sizes.copy()
    rest = nodes.sum(axis=1)
    for j in range(nodes.shape[1] - 1):
        rest -= nodes[:, j]
        left[:, j] = rng.hypergeometric(nodes[:, j], rest, sample)
        sample -= left[:, j]
    left[:, -1] = sample
    return left


def _remember(cache: OrderedDict[int, _T], key: int, value: _T) -> None:
    """Keep ``value``, dropping the oldest entries past ``_CACHE`` (safe across threads)."""
    cache[key] = value
    while len(cache) > _CACHE:
        try:
            cache.popitem(last=False)
        except KeyError:  # another thread emptied it first
            break


class Arrangement:
    """The arrangement of one segment: labels and draw numbers at any positions.

    Args:
        counts: Samples per source over the segment (its length is their sum).
        seed: The run's seed, in ``[0, 2**64)``.
        key: What identifies the segment (e.g. ``(epoch, start, end)``), values < 2**64.

    Raises:
        ValueError: A negative count, or a segment longer than ``MAX_SEGMENT``.

    Example:
        >>> Arrangement([3, 1], seed=1, key=(0,)).locate(np.array([3, 0]))[0].shape
        (2,)
    """

    def __init__(self, counts: Counts, seed: int, key: tuple[int, ...]) -> None:
        self.counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        if (self.counts < 0).any():
            raise ValueError(f"counts={self.counts.tolist()} must all be >= 0.")
        self.length = int(self.counts.sum())
        if self.length > MAX_SEGMENT:
            raise ValueError(
                f"a mixture segment of {self.length:,} samples is longer than the limit of "
                f"2**53 = {MAX_SEGMENT:,} (float64 weights give exact counts only below it); "
                "use a smaller samples_per_epoch or split the epoch with weight changes."
            )
        self.seed, self.key = int(seed), tuple(int(k) for k in key)
        self.leaf, self.block = LEAF_SIZE, BLOCK_SIZE  # read once: tests shrink them
        self._blocks: OrderedDict[int, Table] = OrderedDict()
        self._leaves: OrderedDict[int, _Leaf] = OrderedDict()

    def _length(self, begin: int, end: int, unit: int, total: int) -> int:
        return min(end * unit, total) - min(begin * unit, total)

    def _block_counts(self, block: int) -> tuple[list[int], list[int]]:
        """Counts of ``block`` and before it: a walk down the stratified tree, O(log L)."""
        counts, before = self.counts.tolist(), [0] * len(self.counts)
        lo, hi = 0, 1 << (max(1, -(-self.length // self.block)) - 1).bit_length()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            whole = self._length(lo, hi, self.block, self.length)
            left = _share(counts, self._length(lo, mid, self.block, self.length), whole)
            if block < mid:
                counts, hi = left, mid
            else:
                before = [b + x for b, x in zip(before, left, strict=True)]
                counts = [c - x for c, x in zip(counts, left, strict=True)]
                lo = mid
        return counts, before

    def _table(self, block: int) -> Table:
        """Counts of every leaf of ``block`` and before each in the segment, (leaves, J)."""
        cached = self._blocks.get(block)
        if cached is not None:
            return cached
        counts, before = self._block_counts(block)
        size = min(self.block, self.length - block * self.block)
        leaves = -(-size // self.leaf)
        depth = (leaves - 1).bit_length()
        rng = key_rng(_SPLIT_STREAM, self.seed, *self.key, block)
        nodes = np.array([counts], dtype=np.int64)
        for level in range(depth):  # one vectorised draw per level, nodes in order
            width = 1 << (depth - level)  # leaves under each node of this level
            first = np.arange(len(nodes), dtype=np.int64) * width
            ends = np.minimum(first * self.leaf, size)
            sizes = np.minimum((first + width // 2) * self.leaf, size) - ends
            left = _split(rng, nodes, sizes)
            nodes = np.stack([left, nodes - left], axis=1).reshape(-1, len(counts))
        nodes = nodes[:leaves]
        prior = np.cumsum(nodes, axis=0) - nodes + np.asarray(before, dtype=np.int64)
        _remember(self._blocks, block, (nodes, prior))
        return nodes, prior

    def _leaf_info(self, leaf: int) -> _Leaf:
        """Counts, slot ranges and key of a leaf (cached)."""
        cached = self._leaves.get(leaf)
        if cached is not None:
            return cached
        per_block = self.block // self.leaf
        counts, prior = self._table(leaf // per_block)
        n, before = counts[leaf % per_block], prior[leaf % per_block]
        ends = np.cumsum(n)
        keys = key_sequence(_LEAF_STREAM, self.seed, *self.key, leaf)
        words = cast("NDArray[np.uint64]", keys.generate_state(_KEY_WORDS, np.uint64))
        info = _Leaf(n, before - (ends - n), ends, words)
        _remember(self._leaves, leaf, info)
        return info

    def _slots(
        self, leaf: int, offsets: NDArray[np.int64]
    ) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
        """Labels and draws of ``offsets`` (positions inside ``leaf``)."""
        info = self._leaf_info(leaf)
        slots = feistel_permute(offsets, int(info.ends[-1]), info.keys)
        labels = np.searchsorted(info.ends, slots, side="right")
        return labels, info.shift[labels] + slots

    def locate(self, positions: NDArray[np.integer]) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
        """Sources and draw numbers (within the segment) at ``positions``, any order.

        Example:
            >>> labels, draws = Arrangement([2, 2], seed=0, key=(1,)).locate(np.arange(4))
            >>> sorted(zip(labels.tolist(), draws.tolist()))
            [(0, 0), (0, 1), (1, 0), (1, 1)]
        """
        p = np.asarray(positions, dtype=np.int64).reshape(-1)
        if p.size and (int(p.min()) < 0 or int(p.max()) >= self.length):
            raise ValueError(
                f"positions must be in [0, {self.length}) (the segment's length), got "
                f"[{int(p.min())}, {int(p.max())}]."
            )
        labels = np.empty(p.size, dtype=np.int16)
        draws = np.empty(p.size, dtype=np.int64)
        leaves = p // self.leaf
        order = None if np.all(leaves[1:] >= leaves[:-1]) else np.argsort(leaves, kind="stable")
        ordered = leaves if order is None else leaves[order]
        bounds = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), p.size]
        for lo, hi in itertools.pairwise(bounds):
            if lo == hi:
                continue
            where = slice(lo, hi) if order is None else order[lo:hi]
            leaf = int(ordered[lo])
            labels[where], draws[where] = self._slots(leaf, p[where] - leaf * self.leaf)
        return labels, draws

    def counts_before(self, position: int) -> NDArray[np.int64]:
        """Samples of each source in the first ``position`` places: O(log L + leaf / 2).

        Example:
            >>> Arrangement([8, 2], seed=0, key=(0, 0)).counts_before(0).tolist()
            [0, 0]
        """
        if not 0 <= position <= self.length:
            raise ValueError(f"position={position} must be in [0, {self.length}].")
        if position == self.length:
            everything: NDArray[np.int64] = self.counts.copy()
            return everything
        leaf, inside = divmod(position, self.leaf)
        n, shift, ends, _ = self._leaf_info(leaf)
        before: NDArray[np.int64] = shift + ends - n
        size = int(ends[-1])
        if inside <= size // 2:  # count the shorter side of the leaf
            labels, _ = self._slots(leaf, np.arange(inside, dtype=np.int64))
            return before + np.bincount(labels, minlength=len(n))
        labels, _ = self._slots(leaf, np.arange(inside, size, dtype=np.int64))
        return before + n - np.bincount(labels, minlength=len(n))

    def reserved(self, position: int) -> NDArray[np.int64]:
        """Draws of each source reserved by the leaves that meet ``[0, position)``.

        A segment cut at ``position`` (a weight change while it is read) hands its next
        segment the draws after these: the cut leaf's unread draws are skipped.

        Example:
            >>> Arrangement([8, 2], seed=0, key=(0, 0)).reserved(1).tolist()
            [8, 2]
        """
        if position <= 0:
            return np.zeros_like(self.counts)
        return self.counts_before(min(self.length, -(-position // self.leaf) * self.leaf))


@functools.lru_cache(maxsize=16)
def _cached(counts: tuple[int, ...], seed: int, key: tuple[int, ...], sizes: object) -> Arrangement:
    return Arrangement(counts, seed, key)


def arrangement(counts: Counts, seed: int, key: tuple[int, ...]) -> Arrangement:
    """The (cached) :class:`Arrangement` of a segment.

    Example:
        >>> arrangement([1, 1], 0, (0,)) is arrangement([1, 1], 0, (0,))
        True
    """
    values = tuple(np.asarray(counts, dtype=np.int64).reshape(-1).tolist())
    return _cached(values, int(seed), tuple(key), (LEAF_SIZE, BLOCK_SIZE))
