"""Lazy iteration over NumPy chunks that knows, in O(1), how many ints it has yielded."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

import numpy as np
from numpy.typing import NDArray

__all__ = ["CHUNK_SIZE", "ChunkStream"]

CHUNK_SIZE = 1 << 16


class ChunkStream:
    """Yield the ints of successive arrays, converting one chunk at a time.

    Counting is free: the position is read off the current chunk's list iterator, so there
    is no per-item bookkeeping in Python.

    Example:
        >>> stream = ChunkStream(iter([np.arange(3), np.arange(3, 5)]))
        >>> it = iter(stream)
        >>> next(it), next(it), stream.yielded
        (0, 1, 2)
        >>> list(it), stream.yielded
        ([2, 3, 4], 5)
    """

    def __init__(self, chunks: Iterable[NDArray[np.integer]]) -> None:
        self._chunks = chunks
        self._finished_chunks = 0
        self._current: Iterator[int] = iter(())
        self._current_length = 0

    def __iter__(self) -> Iterator[int]:
        for chunk in self._chunks:
            values: list[int] = chunk.tolist()
            self._finished_chunks += self._current_length
            self._current, self._current_length = iter(values), len(values)
            yield from self._current

    @property
    def yielded(self) -> int:
        """How many ints the consumer has received so far."""
        remaining = operator.length_hint(self._current)
        return self._finished_chunks + self._current_length - remaining
