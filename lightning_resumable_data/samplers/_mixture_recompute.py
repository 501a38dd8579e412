"""What a weight change recomputes of the order a mixture sampler has computed, not handed out.

A rank computes up to ``RANK_CHUNK`` of its positions ahead of what it has handed out. A
change of weights at a position inside that stretch rewrites the unread part of the chunk
being read in place (:meth:`Recompute.rewrite`), or, for a batched iteration, restarts it
from the first sample not handed out (:meth:`Recompute.batches`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.partition import rank_span, span_positions
from lightning_resumable_data.randomness import make_sample_keys
from lightning_resumable_data.samplers._chunks import BatchCount, ChunkStream
from lightning_resumable_data.samplers._rank_position import RankPosition

__all__ = ["Recompute", "rewrite_unread"]


class Recompute:
    """The chunk a mixture sampler is reading, and whether its batches must restart.

    Example:
        >>> recompute = Recompute(10, 1, 0, drop_last=True)
        >>> chunks = recompute.chunks(iter([[1, 2]]))
        >>> next(chunks), recompute.computed
        ([1, 2], [1, 2])
    """

    __slots__ = ("computed", "drop_last", "length", "rank", "restart", "world")

    def __init__(self, length: int, world: int, rank: int, drop_last: bool) -> None:
        self.length, self.world, self.rank, self.drop_last = length, world, rank, drop_last
        self.computed: list[Any] | None = None  # the chunk being read (see chunks)
        self.restart = False  # a batched iteration recomputes from its next batch

    def chunks(self, chunks: Iterator[list[Any]]) -> Iterator[list[Any]]:
        """Yield ``chunks``, keeping the current one for :meth:`rewrite`."""
        for chunk in chunks:
            self.computed = chunk
            yield chunk
        self.computed = None

    def batches(
        self,
        batches: Callable[[int, int | None], Iterator[list[int]]],
        start: int,
        limit: int | None,
        count: BatchCount,
    ) -> Iterator[list[int]]:
        """Yield ``batches(start, limit)``; after a change inside the computed order, restarted.

        A restart computes this rank's order again from the first sample not handed out:
        one check per batch, no work per index. The start is this iteration's own, not the
        sampler's: a ``set_epoch`` between two batches resets the sampler's position but
        not the iterator already handed out.
        """
        current = batches(start, limit)
        self.restart = False
        while True:
            if self.restart:
                self.restart = False
                handed, start = count.yielded, start + count.yielded * self.world
                count.produced = count.yielded = 0
                limit = None if limit is None else limit - handed
                current = batches(start, limit)
            batch = next(current, None)
            if batch is None:
                return
            yield batch

    def rewrite(
        self,
        at: RankPosition,
        position: int,
        order: Callable[[NDArray[np.int64]], NDArray[np.int64]],
        keys: tuple[int, int] | None,
    ) -> None:
        """Recompute the chunk being read from global ``position`` on (batched: restart).

        ``at`` is the sampler's position; ``order`` and ``keys`` are :func:`rewrite_unread`'s.
        """
        chunk, stream = self.computed, at.stream
        if not isinstance(stream, ChunkStream):
            self.restart = stream is not None  # batched: restart at the next batch
            return
        if chunk is None:
            return
        produced, first = stream.produced, stream.produced - len(chunk)
        span = rank_span(self.length, self.world, self.rank, self.drop_last, consumed=at.started_at)
        unread = span_positions(span, max(stream.yielded, first), produced)
        rewrite_unread(chunk, unread, position, order, self.length, keys)


def rewrite_unread(
    chunk: list[Any],
    positions: NDArray[np.int64],
    position: int,
    order: Callable[[NDArray[np.int64]], NDArray[np.int64]],
    length: int,
    keys: tuple[int, int] | None,
) -> None:
    """Recompute the last values of ``chunk``, at ``positions``, from global ``position`` on.

    ``positions`` are those of the chunk's samples not handed out yet; ``order`` maps
    positions (modulo the epoch's ``length``) to dataset indices; ``keys`` is ``(seed,
    epoch)`` for :class:`~lightning_resumable_data.SampleKey` values, ``None`` for indices.
    The chunk keeps its length, so the list iterator reading it goes on.

    Example:
        >>> chunk = [0, 1, 2, 3]
        >>> rewrite_unread(chunk, np.arange(1, 4), 2, lambda p: p + 10, 100, None)
        >>> chunk
        [0, 1, 12, 13]
    """
    positions = positions[np.searchsorted(positions, position) :]
    if not len(positions):
        return
    indices = order(positions % length)
    values = make_sample_keys(indices, positions, *keys) if keys is not None else indices.tolist()
    chunk[len(chunk) - len(values) :] = values  # same length: the list iterator goes on
