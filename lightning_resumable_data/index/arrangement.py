"""Random-access arrangement of a mixture segment: the source and its draw at any position.

A segment of ``L`` positions draws exactly ``counts[j]`` samples from source ``j``. Its
order is a balanced binary tree over the sources: the root splits the sources in two
halves (``[0, J // 2)`` and the rest) and decides which half each position draws from by a
:class:`~lightning_resumable_data.index.bisection.Bisection` of ``L`` positions with the
second half's total as its ones; each half then arranges its own sources over the
positions it got, the same way, down to single sources. So:

* **exact**: each source's count over the segment is ``counts[j]``;
* **even**: within every split, each aligned block of ``2**s`` positions (of the sequence
  being split) gets ``floor`` or ``ceil`` of its share, the odd one by a keyed coin;
* **in order**: the draw number of a position is the count of its source before it in the
  segment. A source's draws come strictly in time order, so a source read in passes (see
  :mod:`~lightning_resumable_data.index.passes`) repeats a sample only after a whole pass.

Cost per sorted batch of positions: one bisection walk per level of the source tree
(``ceil(log2 J)`` levels), each one vectorised step per tree level over the distinct nodes
on the positions' paths.

Example:
    >>> arrangement = Arrangement([8, 2], seed=0, key=(0, 0))
    >>> labels, draws = arrangement.locate(np.arange(10))
    >>> np.bincount(labels).tolist(), draws[labels == 1].tolist()
    ([8, 2], [0, 1])
    >>> arrangement.counts_before(10).tolist()
    [8, 2]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.bisection import Bisection

__all__ = ["MAX_SEGMENT", "Arrangement", "arrangement"]

Counts = Sequence[int] | NDArray[np.integer]

MAX_SEGMENT: Final = 1 << 53  # float64 probabilities give exact counts below this


class _Split:
    """One node of the source tree: sources ``[lo, hi)`` split at ``mid``."""

    def __init__(self, counts: list[int], lo: int, hi: int, seed: int, key: tuple[int, ...]):
        self.lo, self.hi, self.mid = lo, hi, (lo + hi) // 2
        length, ones = sum(counts[lo:hi]), sum(counts[self.mid : hi])
        self.tree = Bisection(length, ones, (seed, *key, lo, hi)) if length else None
        self.left = None if self.mid - lo == 1 else _Split(counts, lo, self.mid, seed, key)
        self.right = None if hi - self.mid == 1 else _Split(counts, self.mid, hi, seed, key)

    def locate(
        self, ranks: NDArray[np.int64], labels: NDArray[np.int16], draws: NDArray[np.int64]
    ) -> None:
        """Fill ``labels`` and ``draws`` for sorted positions ``ranks`` of this node."""
        if self.tree is None or not len(ranks):
            return
        second, before = self.tree.locate(ranks)
        draws[:] = np.where(second, before, ranks - before)
        labels[:] = np.where(second, self.mid, self.lo)
        for child, side in ((self.left, ~second), (self.right, second)):
            if child is not None:
                where = np.flatnonzero(side)
                sub_labels, sub_draws = labels[where], draws[where]
                child.locate(sub_draws.copy(), sub_labels, sub_draws)
                labels[where], draws[where] = sub_labels, sub_draws

    def counts_before(self, position: int, out: NDArray[np.int64]) -> None:
        """Add each source's count in this node's first ``position`` positions to ``out``."""
        if self.tree is None:
            return
        second = self.tree.ones_before(position)
        first = position - second
        for child, lo, count in ((self.left, self.lo, first), (self.right, self.mid, second)):
            if child is None:
                out[lo] += count
            else:
                child.counts_before(count, out)


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
        values = self.counts.tolist()
        self._root = (
            _Split(values, 0, len(values), self.seed, self.key) if len(values) > 1 else None
        )

    def locate(self, positions: NDArray[np.integer]) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
        """Sources and draw numbers (counts of the source before) at ``positions``, any order.

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
        ordered = bool(np.all(p[1:] >= p[:-1]))
        order = None if ordered else np.argsort(p, kind="stable")
        sorted_p = p if order is None else p[order]
        labels = np.zeros(p.size, dtype=np.int16)
        draws = sorted_p.copy()  # one source: its draw is the position
        if self._root is not None:
            self._root.locate(sorted_p, labels, draws)
        if order is None:
            return labels, draws
        out_labels, out_draws = np.empty_like(labels), np.empty_like(draws)
        out_labels[order], out_draws[order] = labels, draws
        return out_labels, out_draws

    def counts_before(self, position: int) -> NDArray[np.int64]:
        """Samples of each source in the first ``position`` places: one walk per split.

        Example:
            >>> Arrangement([8, 2], seed=0, key=(0, 0)).counts_before(0).tolist()
            [0, 0]
        """
        if not 0 <= position <= self.length:
            raise ValueError(f"position={position} must be in [0, {self.length}].")
        out = np.zeros(len(self.counts), dtype=np.int64)
        if self._root is None:
            out[0] = position
        else:
            self._root.counts_before(position, out)
        return out


@functools.lru_cache(maxsize=16)
def _cached(counts: tuple[int, ...], seed: int, key: tuple[int, ...]) -> Arrangement:
    return Arrangement(counts, seed, key)


def arrangement(counts: Counts, seed: int, key: tuple[int, ...]) -> Arrangement:
    """The (cached) :class:`Arrangement` of a segment.

    Example:
        >>> arrangement([1, 1], 0, (0,)) is arrangement([1, 1], 0, (0,))
        True
    """
    values = tuple(np.asarray(counts, dtype=np.int64).reshape(-1).tolist())
    return _cached(values, int(seed), tuple(key))
