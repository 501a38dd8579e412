"""The composable skips: an inner sampler's first items (or batches) skipped, once."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from lightning_resumable_data.samplers._composition import (
    Batch,
    Composable,
    Cursor,
    check_count,
    chunks_of,
    iter_from,
)

__all__ = ["SkipBatchSampler", "SkipSampler"]

T = TypeVar("T")


class _Skip(Composable[T]):
    def __init__(self, inner: Iterable[T], skip: int) -> None:
        super().__init__(inner)
        self.skip = check_count(type(self).__name__, "skip", skip, "inner items to skip once")
        self._first = True  # the construction skip applies to the first __iter__ only

    def _pending_start(self) -> int:
        return super()._pending_start() + (self.skip if self._first else 0)

    def _restore_position(self, state: Mapping[str, Any]) -> None:
        super()._restore_position(state)
        self._first = False  # the loaded position replaces the construction skip

    def _iterate(self) -> Iterator[T]:
        start = self._begin()
        self._first = False
        cursor = self._stream = Cursor()
        for chunk in chunks_of(iter_from(self.inner, start)):
            yield from cursor.enter(chunk)


class SkipSampler(_Skip[int]):
    """Skip the first ``skip`` items of an inner sampler, in the first ``__iter__`` only.

    The position counts inner items (skipped ones included), so a loaded state replaces the
    construction skip. Skips in O(1) when the inner sampler has ``set_skip``.

    Args:
        sampler: The sampler to skip into.
        skip: Inner items to skip once, >= 0.

    Example:
        >>> skip = SkipSampler(range(5), skip=2)
        >>> list(skip), list(skip)
        ([2, 3, 4], [0, 1, 2, 3, 4])
    """

    KIND: ClassVar[str] = "SkipSampler"

    def __init__(self, sampler: Iterable[int], skip: int) -> None:
        super().__init__(sampler, skip)


class SkipBatchSampler(_Skip[Batch]):
    """Skip the first ``skip`` batches of an inner batch sampler, in the first ``__iter__`` only.

    Args:
        batch_sampler: The batch sampler to skip into.
        skip: Inner batches to skip once, >= 0.

    Example:
        >>> list(SkipBatchSampler([[0, 1], [2, 3], [4]], skip=1))
        [[2, 3], [4]]
    """

    KIND: ClassVar[str] = "SkipBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], skip: int) -> None:
        super().__init__(batch_sampler, skip)
