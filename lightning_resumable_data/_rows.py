"""Batches read with one gather: the rows of one array, collated without a copy.

A dataset's ``__getitems__`` may return a :class:`RowBatch`: a list of the batch's samples
(as torch's fetcher expects, so any ``collate_fn`` works with it) that are rows of one
``(batch, ...)`` tensor, filled by one vectorised gather. :func:`collate_rows`, the
default ``collate_fn`` of this package's loaders, returns that tensor as the batch: no
per-sample conversion and no stack, the batch torch's ``default_collate`` makes of the
same rows. In a worker process the tensor is in shared memory, as ``default_collate``
puts it, so it crosses to the main process without a copy.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.utils.data
from numpy.typing import NDArray
from torch.utils.data import default_collate

__all__ = ["RowBatch", "collate_rows", "empty_rows", "gather_rows"]


class RowBatch(list[Any]):
    """A batch's samples (NumPy rows) that are the rows of one tensor, ``.tensor``.

    Example:
        >>> batch = RowBatch(torch.arange(6, dtype=torch.int32).reshape(3, 2))
        >>> [row.tolist() for row in batch], collate_rows(batch) is batch.tensor
        ([[0, 1], [2, 3], [4, 5]], True)
    """

    __slots__ = ("_rows", "tensor")

    def __init__(self, tensor: torch.Tensor, rows: NDArray[Any] | None = None) -> None:
        self._rows = tuple(tensor.numpy() if rows is None else rows)  # ``rows``: its array
        super().__init__(self._rows)
        self.tensor = tensor

    def intact(self) -> bool:
        """Whether the samples are still the rows it was built with (none replaced)."""
        return len(self) == len(self._rows) and all(map(operator.is_, self, self._rows))


def empty_rows(rows: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> NDArray[Any]:
    """An uninitialised ``(rows, *shape)`` array of ``dtype`` that a tensor shares.

    In a DataLoader worker process the memory is shared (sent to the main process as a
    handle, not as bytes); ``torch.from_numpy`` of the result is that tensor, no copy.

    Example:
        >>> out = empty_rows(2, (4,), np.dtype(np.uint16))
        >>> out.shape, torch.from_numpy(out).dtype
        ((2, 4), torch.uint16)
    """
    if torch.utils.data.get_worker_info() is None:
        return np.empty((rows, *shape), dtype=dtype)
    kind = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    tensor = torch.empty((rows, *shape), dtype=kind)
    tensor.share_memory_()  # type: ignore[no-untyped-call]
    return tensor.numpy()


def gather_rows(
    readers: Sequence[Any],
    runs: Sequence[tuple[int, NDArray[np.int64]]],
    wait: Callable[[int], None],
    checked: bool = False,
) -> RowBatch | None:
    """A batch as the rows of one tensor, gathered run by run; None if a reader cannot.

    ``runs`` are ``(reader, local indices)`` in the batch's order; ``wait(reader)`` makes
    it resident before its gather. Every reader must have ``seq_len``, ``dtype`` (the same
    for all) and ``gather_into(indices, out, checked) -> bool``, as token shard readers
    do; ``checked``: the caller checked that the indices are in range.

    Example:
        >>> class Rows:
        ...     seq_len, dtype = 2, np.dtype(np.int64)
        ...     def gather_into(self, indices, out, checked=False):
        ...         out[:] = indices[:, None] * 10
        ...         return True
        >>> batch = gather_rows([Rows()], [(0, np.array([3, 1]))], wait=lambda r: None)
        >>> batch.tensor.tolist()
        [[30, 30], [10, 10]]
    """
    if not runs:
        return None
    first = readers[runs[0][0]]
    shape, dtype = getattr(first, "seq_len", None), getattr(first, "dtype", None)
    if not isinstance(shape, int) or not isinstance(dtype, np.dtype):
        return None
    out, begin = empty_rows(sum(len(local) for _, local in runs), (shape,), dtype), 0
    for index, local in runs:
        reader = readers[index]
        if getattr(reader, "seq_len", None) != shape or getattr(reader, "dtype", None) != dtype:
            return None
        gather = getattr(reader, "gather_into", None)
        if gather is None:
            return None
        wait(index)
        if not gather(local, out[begin : begin + len(local)], checked):
            return None
        begin += len(local)
    return RowBatch(torch.from_numpy(out), out)


def collate_rows(batch: list[Any]) -> Any:
    """``default_collate``, except that a :class:`RowBatch` is its tensor (no copy).

    Example:
        >>> collate_rows([np.array([1, 2]), np.array([3, 4])]).tolist()
        [[1, 2], [3, 4]]
    """
    if type(batch) is RowBatch and batch.intact():
        return batch.tensor
    return default_collate(batch)
