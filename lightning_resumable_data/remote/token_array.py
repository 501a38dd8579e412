"""``RemoteTokens``: a 1-D token array over a :class:`ChunkedRemoteFile`, gathered by chunk.

Indexed with an array of positions like a NumPy array (what
:class:`~lightning_resumable_data.documents.DocumentCorpus` does): one gather per chunk
touched, from the cached chunk's memory map, never the whole file.
"""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from lightning_resumable_data.remote.urls import redact, url_name

if TYPE_CHECKING:
    from lightning_resumable_data.remote.chunks import ChunkedRemoteFile

__all__ = ["RemoteTokens"]


class RemoteTokens:
    """A 1-D array of ``dtype`` tokens stored back to back in a :class:`ChunkedRemoteFile`.

    Indexed with an integer array of positions (or one int), like a NumPy array: one pass
    per chunk touched, each a gather from the cached chunk's memory map, so only the pages
    holding the tokens asked for are read from the disk. Never converted whole.

    Raises:
        IndexError: A position outside ``[0, len(self))``.
    """

    def __init__(self, file: ChunkedRemoteFile, dtype: DTypeLike) -> None:
        self.file = file
        self.dtype = np.dtype(dtype)  # chunk_bytes is a multiple of 8: of the itemsize too
        self._per_chunk = file.chunk_bytes // self.dtype.itemsize
        self._length = file.size // self.dtype.itemsize

    @property
    def pins(self) -> dict[str, str]:
        """``{file name: identity}`` of the file (:mod:`~lightning_resumable_data.pins`)."""
        identity = self.file.remote.identity
        return {} if identity is None else {url_name(self.file.remote.url): identity}

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, positions: ArrayLike) -> NDArray[Any]:
        where = np.asarray(positions, dtype=np.int64)
        out = np.empty(where.shape, dtype=self.dtype)
        if not where.size:
            return out
        low, high = int(where.min()), int(where.max())
        if low < 0 or high >= self._length:
            bad = low if low < 0 else high
            raise IndexError(
                f"token {bad} is out of range for {redact(self.file.remote.url)!r} of "
                f"{self._length} {self.dtype} tokens."
            )
        first, last = low // self._per_chunk, high // self._per_chunk
        if first == last:
            self.file.plan([first])
            out[...] = self._gather(first, where - first * self._per_chunk)
            self.file.advance([first])
            return out
        flat, dest = where.reshape(-1), out.reshape(-1)
        chunk = flat // self._per_chunk
        order = np.argsort(chunk, kind="stable")
        unique, begins = np.unique(chunk[order], return_index=True)
        numbers = unique.tolist()
        self.file.plan(numbers)  # the chunks touched only, not those between
        ends = np.append(begins[1:], order.size)
        for number, begin, end in zip(numbers, begins.tolist(), ends.tolist(), strict=True):
            take = order[begin:end]  # one pass per chunk touched, not per token
            dest[take] = self._gather(number, flat[take] - number * self._per_chunk)
        self.file.advance(numbers)
        return out

    def _gather(self, number: int, local: NDArray[np.int64]) -> NDArray[Any]:
        descriptor = self.file.open_chunk(number)
        try:
            mapped = mmap.mmap(descriptor, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(descriptor)  # the map keeps the file
        try:
            view = np.frombuffer(mapped, dtype=self.dtype)
            values: NDArray[Any] = view[local]  # a copy: the map closes below
            del view
        finally:
            mapped.close()
        return values

    def __array__(self, *args: Any, **kwargs: Any) -> NDArray[Any]:
        raise TypeError(
            f"{self!r} is read by ranges and never whole; index it with an array of positions."
        )

    def __repr__(self) -> str:
        return f"RemoteTokens({redact(self.file.remote.url)!r}, {self.dtype}, len={len(self)})"
