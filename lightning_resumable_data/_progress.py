"""Where a loader stands in its epoch, and the iterator that counts what leaves it.

The loader's position is one record (:class:`Progress`): the epoch, the batches that left
the loader, and the global samples consumed when this reading began. Only three events
move it to the next epoch, never the number of ``iter()`` calls:

* the epoch's samples are used up (its iterator is exhausted);
* the trainer ends the epoch (``StatefulDataLoader.end_epoch``: Lightning's
  ``limit_train_batches``, through ``ResumableDataCallback``);
* a plain loop abandons a pass that has yielded batches and starts another one (torch's
  rule: a new pass is a new epoch).

An iterator is lazy (:class:`CountingIterator`): it decides where it reads, and starts the
workers, at its first ``next()``. An iterator that is created and dropped unread (Lightning
creates one while setting up a fit, and again at every epoch) changes nothing.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = ["BatchPosition", "CountingIterator", "Progress"]


class BatchPosition(NamedTuple):
    """Where a batch begins: its epoch and the global samples consumed before it."""

    epoch: int
    consumed: int


class Progress:
    """The loader's position: epoch, batches yielded, samples consumed before them."""

    def __init__(self, epoch: int = 0, batches_yielded: int = 0) -> None:
        self.epoch = epoch
        self.batches_yielded = batches_yielded
        self.base_consumed = 0  # global samples consumed when this epoch's reading began
        self.base_batches = 0  # batches counted by then
        self.origin: dict[str, Any] | None = None  # skip mode: sampler state at that start
        self.resume_at: int | None = None  # position mode: restored, applied at the next read
        self.previous: Progress | None = None  # the epoch before, as it ended
        self.reader: int | None = None  # serial of the pass reading this epoch, if any

    def end_epoch(self) -> None:
        """Move to the start of the next epoch, remembering how this one ended."""
        self.previous = copy.copy(self)
        self.previous.previous = None
        self.epoch += 1
        self.resume_at = None
        self.batches_yielded = self.base_consumed = self.base_batches = 0
        self.origin = None
        self.reader = None


class CountingIterator(Iterator[Any]):
    """Counts the batches that leave the loader; ends the epoch when exhausted.

    ``start`` is called at the first ``next()`` with this iterator: it fixes the position
    and returns the underlying iterator (a torch ``DataLoader`` iterator).
    """

    def __init__(
        self,
        progress: Progress,
        start: Callable[[CountingIterator], Iterator[Any]],
        length: int | None,
        serial: int,
    ) -> None:
        self.progress = progress  # the loader's record (``start`` may hand over a new one)
        self._start: Callable[[CountingIterator], Iterator[Any]] | None = start
        self._length = length
        self.serial = serial  # tells passes of one loader apart
        self._inner: Iterator[Any] | None = None
        self.finished = False
        self.yielded = 0  # batches this iterator handed out
        # position mode: where each batch handed out begins (global samples per batch)
        self.handed: deque[BatchPosition] | None = None
        self.step_samples = 0

    def __iter__(self) -> CountingIterator:
        return self

    def detach(self) -> None:
        """Finish this iterator without touching the position (its epoch was ended)."""
        self.finished = True
        self._inner = None

    def __next__(self) -> Any:
        if self.finished:
            raise StopIteration
        if self._inner is None:
            assert self._start is not None
            start, self._start = self._start, None  # no reference back to the loader
            self._inner = start(self)
        try:
            batch = next(self._inner)
        except StopIteration:
            self.finished = True
            self._inner = None
            self.progress.end_epoch()
            raise
        except (ConnectionResetError, EOFError, BrokenPipeError) as error:
            # torch reports a worker that died while handing over a batch this way.
            raise RuntimeError(
                f"a DataLoader worker died while sending a batch ({type(error).__name__}: "
                f"{error}); the loader position is still the last batch trained, so resuming "
                "from the last checkpoint is exact."
            ) from error
        progress = self.progress
        if self.handed is not None:
            batches = progress.batches_yielded - progress.base_batches
            self.handed.append(
                BatchPosition(progress.epoch, progress.base_consumed + batches * self.step_samples)
            )
        self.yielded += 1
        progress.batches_yielded += 1
        return batch

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("this loader has no length (its sampler or dataset has none)")
        return self._length
