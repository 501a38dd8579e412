"""Lazy iteration over chunks that knows, in O(1), how many items it has yielded."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["CHUNK_SIZE", "ChunkStream"]

CHUNK_SIZE = 1 << 16


class ChunkStream:
    """Yield the items of successive lists; the producer builds one chunk at a time.

    Counting is free: the position is read off the current chunk's list iterator, so there
    is no per-item bookkeeping in Python.

    Example:
        >>> stream = ChunkStream(iter([[0, 1, 2], [3, 4]]))
        >>> it = iter(stream)
        >>> next(it), next(it), stream.yielded
        (0, 1, 2)
        >>> list(it), stream.yielded
        ([2, 3, 4], 5)
    """

    def __init__(self, chunks: Iterable[list[Any]]) -> None:
        self._chunks = chunks
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
