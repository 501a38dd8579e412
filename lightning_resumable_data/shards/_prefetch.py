"""Micro-batch prefetch: a background thread keeps a bounded queue of ready batches."""

from __future__ import annotations

import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final

import torch
from lightning_utilities.core.apply_func import apply_to_collection

__all__ = ["Prefetcher", "to_device"]

_END: Final = object()
CLOSE_TIMEOUT_S: Final = 30.0  # how long close() waits for the batch being read


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Iterator[Any]):
    """Pull batches from ``source`` on a background thread into a bounded queue.

    Example:
        >>> prefetcher = Prefetcher(iter(range(5)), depth=2, transfer=lambda batch: batch)
        >>> list(prefetcher)
        [0, 1, 2, 3, 4]

    With ``depth == 0`` there is no thread: each ``next`` reads in the caller. The thread
    holds the source, the queue and the stop flag but not this object: when it is dropped
    without :meth:`close` (an abandoned loader), a finaliser stops the thread, which then
    releases the source (and its worker processes).
    """

    def __init__(self, source: Iterator[Any], depth: int, transfer: Callable[[Any], Any]) -> None:
        self._source = source
        self._transfer = transfer
        self.finished = False
        self._stop = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(depth, 1))
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._thread = threading.Thread(
                target=_produce,
                args=(source, transfer, self._queue, self._stop),
                name="microbatch-prefetch",
                daemon=True,
            )
            self._thread.start()
            weakref.finalize(self, self._stop.set)

    def __next__(self) -> Any:
        if self.finished:
            raise StopIteration
        if self._thread is None:
            try:
                return self._transfer(next(self._source))
            except StopIteration:
                self.finished = True
                raise
        item = self._queue.get()
        if item is _END:
            self.finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self.finished = True
            raise item.error
        return item

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Stop the thread and drop what it prefetched.

        The thread finishes the batch it is reading; if that takes longer than ``timeout``
        seconds (a stalled read), ``close`` warns and returns, and the thread (a daemon)
        exits once the read returns.
        """
        self.finished = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                warnings.warn(
                    f"the micro-batch prefetch thread is still reading a batch {timeout:g} s "
                    "after close(); it is left to finish in the background and then exits. "
                    "A read that stalls this long usually means a hung storage read or "
                    "DataLoader worker: set the loader's timeout= to bound it.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        while not self._queue.empty():
            self._queue.get_nowait()


def _produce(
    source: Iterator[Any],
    transfer: Callable[[Any], Any],
    ready: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    """The prefetch thread: read, transfer, enqueue, until the end, an error or ``stop``."""
    while not stop.is_set():
        try:
            item: Any = transfer(next(source))
        except StopIteration:
            item = _END
        except BaseException as error:  # handed to the consumer, raised there
            item = _Failure(error)
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                break
            except queue.Full:
                continue
        if item is _END or isinstance(item, _Failure):
            return


def to_device(device: torch.device | None, batch: Any) -> Any:
    """Move the tensors of ``batch`` to ``device``: pinned and non-blocking for CUDA.

    Example:
        >>> to_device(torch.device("cpu"), {"x": torch.ones(2), "n": 3})["x"].device.type
        'cpu'
    """
    if device is None:
        return batch

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if device.type == "cuda":
            if not tensor.is_pinned():
                tensor = tensor.pin_memory()
            return tensor.to(device, non_blocking=True)
        return tensor.to(device)

    return apply_to_collection(batch, torch.Tensor, move)
