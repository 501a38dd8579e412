"""How a composable sampler reaches its inner one: protocols, O(1) skips, epochs, counting.

The inner sampler of a :class:`~lightning_resumable_data.samplers._composition.Composable`
may be anything iterable: these find what it supports (``set_epoch``, ``set_skip``,
``state_dict``), skip into it (O(1) where it can), and count, in O(1), the items a consumer
has taken from a wrapper.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import torch.utils.data

__all__ = [
    "Cursor",
    "Stateful",
    "SupportsSetEpoch",
    "SupportsSetSkip",
    "check_count",
    "chunks_of",
    "end_live_iteration",
    "epoch_target",
    "iter_from",
]

T = TypeVar("T")

# Items pulled from an inner iterator at a time: the first chunk is small (a consumer that
# reads a few items does not pay for a thousand), then chunks double up to the maximum.
# Reading ahead is harmless (positions are counted on the consumer's side) and lets the
# loop over a chunk run in C.
_FIRST_CHUNK = 8
_MAX_CHUNK = 1024


@runtime_checkable
class SupportsSetEpoch(Protocol):
    """A sampler whose order depends on an epoch."""

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next ``__iter__`` yields."""


@runtime_checkable
class SupportsSetSkip(Protocol):
    """A sampler that can start its next ``__iter__`` past its first items in O(1)."""

    def set_skip(self, samples: int) -> None:
        """Skip the first ``samples`` items of the next ``__iter__`` only."""


@runtime_checkable
class Stateful(Protocol):
    """The torchdata/Lightning ``Stateful`` shape."""

    def state_dict(self) -> dict[str, Any]:
        """Return the position as plain data."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position returned by :meth:`state_dict`."""


class Cursor:
    """Count, in O(1), the items a consumer has taken from a sequence of lists.

    A generator does ``for chunk in chunks: yield from cursor.enter(chunk)``: the loop over a
    chunk runs in C and the count is read off the current list iterator.

    Example:
        >>> cursor = Cursor()
        >>> it = (item for chunk in ([1, 2], [3]) for item in cursor.enter(chunk))
        >>> next(it), cursor.yielded, list(it), cursor.yielded
        (1, 1, [2, 3], 3)
    """

    __slots__ = ("_current", "_finished", "_length")

    def __init__(self) -> None:
        self._finished = 0
        self._current: Iterator[Any] = iter(())
        self._length = 0

    def enter(self, chunk: list[T]) -> Iterator[T]:
        """Start counting ``chunk``; return the iterator to yield it from."""
        self._finished += self._length
        current = iter(chunk)
        self._current, self._length = current, len(chunk)
        return current

    @property
    def yielded(self) -> int:
        """How many items the consumer has received so far."""
        return self._finished + self._length - operator.length_hint(self._current)


def chunks_of(iterator: Iterator[T]) -> Iterator[list[T]]:
    """Split ``iterator`` into lists of 8, 16, ... up to 1024 items (the last one shorter)."""
    size = _FIRST_CHUNK
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
        size = min(2 * size, _MAX_CHUNK)


def check_count(owner: str, name: str, value: object, meaning: str) -> int:
    """Return ``value`` as an int if it is a non-negative int, else raise naming the fix."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{owner}: {name}={value!r} must be an int ({meaning}), got {type(value).__name__}."
        )
    if value < 0:
        raise ValueError(f"{owner}: {name}={value} must be >= 0 ({meaning}); pass an int >= 0.")
    return int(value)


def iter_from(inner: Iterable[T], skip: int) -> Iterator[T]:
    """Iterate ``inner`` without its first ``skip`` items: O(1) through ``set_skip`` if it can."""
    if skip and isinstance(inner, SupportsSetSkip):
        inner.set_skip(skip)
        return iter(inner)
    iterator = iter(inner)
    return itertools.islice(iterator, skip, None) if skip else iterator


def end_live_iteration(inner: object) -> None:
    """End ``inner``'s live iteration (through a torch ``BatchSampler`` too), if it can.

    A wrapper calls it where its own next iteration will iterate ``inner`` anew, so that
    ``inner``'s state is where that iteration starts, not how far the abandoned one read.
    A position to resume from (restored or skipped to) is kept.
    """
    if isinstance(inner, torch.utils.data.BatchSampler):
        inner = inner.sampler
    end = getattr(inner, "_end_live_iteration", None)
    if callable(end):
        end()


def epoch_target(inner: object) -> SupportsSetEpoch | None:
    """Return the sampler that takes ``set_epoch``, looking through a torch ``BatchSampler``."""
    if isinstance(inner, SupportsSetEpoch):
        return inner
    if isinstance(inner, torch.utils.data.BatchSampler):
        wrapped = inner.sampler
        return wrapped if isinstance(wrapped, SupportsSetEpoch) else None
    return None
