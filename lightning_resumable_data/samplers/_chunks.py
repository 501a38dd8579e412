"""Lazy iteration over chunks that knows, in O(1), how many items it has yielded."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["CHUNK_SIZE", "FIRST_CHUNK", "BatchCount", "ChunkStream", "chunk_sizes"]

CHUNK_SIZE = 1 << 16
FIRST_CHUNK = 1 << 10  # the first chunk after a (re)start: a resume computes no more


def chunk_sizes(largest: int, multiple: int = 1) -> Iterator[int]:
    """Chunk sizes that double from :data:`FIRST_CHUNK` up to ``largest``.

    A start (or a resume) computes a small chunk first, so the first batch costs what a
    batch costs, and later chunks amortise the per-chunk overhead. Every size is a multiple
    of ``multiple`` (a batch size), so batches never straddle chunks.

    Example:
        >>> import itertools
        >>> list(itertools.islice(chunk_sizes(4096), 4))
        [1024, 2048, 4096, 4096]
        >>> next(chunk_sizes(4096, multiple=1000))
        1000
    """
    size = min(FIRST_CHUNK, largest)
    while True:
        yield max(multiple, size - size % multiple)
        size = min(size * 2, largest)


class BatchCount:
    """How many samples of a batched pass were computed and handed out (see ``ChunkStream``).

    ``claim`` is the claim (see ``RankPosition.claim``) of the iteration it counts.

    Example:
        >>> count = BatchCount()
        >>> count.produced, count.yielded
        (0, 0)
    """

    __slots__ = ("claim", "produced", "yielded")

    def __init__(self, claim: int = 0) -> None:
        self.produced = 0
        self.yielded = 0
        self.claim = claim


class ChunkStream:
    """Yield the items of successive lists; the producer builds one chunk at a time.

    Counting is free: the position is read off the current chunk's list iterator, so there
    is no per-item bookkeeping in Python. ``claim`` is the claim (see
    ``RankPosition.claim``) of the iteration it counts.

    Example:
        >>> stream = ChunkStream(iter([[0, 1, 2], [3, 4]]))
        >>> it = iter(stream)
        >>> next(it), next(it), stream.yielded
        (0, 1, 2)
        >>> list(it), stream.yielded
        ([2, 3, 4], 5)
    """

    def __init__(self, chunks: Iterable[list[Any]], claim: int = 0) -> None:
        self._chunks = chunks
        self.claim = claim
        self._finished_chunks = 0
        self._current: Iterator[Any] = iter(())
        self._current_length = 0

    def __iter__(self) -> Iterator[Any]:
        # chain.from_iterable walks each list in C: no Python frame per item.
        return itertools.chain.from_iterable(self._track(chunk) for chunk in self._chunks)

    def _track(self, chunk: list[Any]) -> Iterator[Any]:
        self._finished_chunks += self._current_length
        self._current, self._current_length = iter(chunk), len(chunk)
        return self._current

    @property
    def produced(self) -> int:
        """How many items have been computed (yielded, or in the current chunk)."""
        return self._finished_chunks + self._current_length

    @property
    def yielded(self) -> int:
        """How many items the consumer has received so far."""
        remaining = operator.length_hint(self._current)
        return self._finished_chunks + self._current_length - remaining
