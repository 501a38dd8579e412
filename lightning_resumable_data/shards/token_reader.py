"""``TokenShardReader``: fixed-length samples of a flat NumPy token file, through ``numpy.memmap``.

A ``.bin`` of raw tokens or a ``.npy`` array is sized from its byte count (and header) when
it is opened; ``load()`` maps it (and with ``preload``, copies it into memory). A URL builds
the reader of the storage layer above (see :mod:`~lightning_resumable_data.shards._urls`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.shards._urls import is_url, url_token_shards
from lightning_resumable_data.shards.protocol import check_index, check_range

__all__ = ["TokenShardReader"]

Tokens = NDArray[np.integer[Any]]


class TokenShardReader:
    """Fixed-length samples from a flat token file, read through ``numpy.memmap``.

    The file is either raw tokens (``.bin``: ``dtype`` values, native byte order, no
    header) or a ``.npy`` array of shape ``(tokens,)`` or ``(samples, seq_len)``. Sample
    ``i`` is tokens ``[i * seq_len, (i + 1) * seq_len)``. Opening reads only the file size
    (and a ``.npy`` header): a missing file or a size that is not a whole number of samples
    is an error right away. Given ``num_samples`` (from an index), opening touches no file
    (10^4 shards open, and resume, in milliseconds): the file is checked against it at the
    first :meth:`load`, which raises the same errors, naming the file.

    Args:
        path: The shard file.
        seq_len: Tokens per sample.
        dtype: Token dtype of a ``.bin`` file (a ``.npy`` file must declare the same).
        num_samples: Expected samples (from an index); ``None`` trusts the file size.
        preload: ``load()`` copies the shard into memory in one sequential read (what the
            background prefetch should pay for), else it only maps the file and pages are
            read on first touch.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "shard.bin"
        >>> np.arange(12, dtype=np.uint16).tofile(path)
        >>> reader = TokenShardReader(path, seq_len=4)
        >>> len(reader), reader.read(2).tolist()
        (3, [8, 9, 10, 11])
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> TokenShardReader:
        """A URL (``s3://``, ``https://``, ...) builds a ``RemoteTokenShardReader``."""
        path = args[0] if args else kwargs.get("path")
        if cls is TokenShardReader and is_url(path):
            return super().__new__(url_token_shards().reader)
        return super().__new__(cls)

    def __init__(
        self,
        path: str | os.PathLike[str],
        seq_len: int,
        dtype: DTypeLike = np.uint16,
        *,
        num_samples: int | None = None,
        preload: bool = True,
    ) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"seq_len={seq_len!r} must be a positive int (tokens per sample).")
        self._location = os.fspath(path)  # a str: 10^4 readers are built in milliseconds
        self.seq_len = seq_len
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "iu":  # np.issubdtype(dtype, np.integer), 10x cheaper
            raise TypeError(f"dtype={self.dtype} must be an integer token dtype.")
        self.preload = bool(preload)
        self.loads = 0  # how many times load() really loaded (for tests and stats)
        self._data: Tokens | None = None
        self._offset: int | None = None  # None: not opened yet (see _open)
        if num_samples is None:
            self._offset, self._length = self._inspect()
        else:
            self._length = check_non_negative_int("num_samples", num_samples)

    @property
    def opened(self) -> bool:
        """Whether the file has been looked at (sized and checked) since construction."""
        return self._offset is not None

    def open(self) -> None:
        """Size the file and check it against ``num_samples`` now, without loading it.

        What the first :meth:`load` does anyway; idempotent. Raises as the constructor does.
        """
        if self._offset is None:
            self._open()

    def _open(self) -> int:
        """Size the file (and read a ``.npy`` header), check it against the index; the offset."""
        offset, length = self._inspect()
        if length != self._length:
            raise ValueError(
                f"token shard {str(self.path)!r} holds {length} samples of seq_len="
                f"{self.seq_len} ({self._file_size()} bytes), but its index says "
                f"{self._length}. The file was truncated, replaced or the index is stale: "
                "restore the file or rewrite the index (write_token_shards)."
            )
        self._offset = offset
        return offset

    @property
    def path(self) -> Path:
        """The shard file."""
        return Path(self._location)

    @property
    def name(self) -> str:
        """The file name (without the directory)."""
        return os.path.basename(self._location)

    def _file_size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            raise FileNotFoundError(
                f"token shard {str(self.path)!r} does not exist. Check the path, or rewrite the "
                "shard directory and its index with write_token_shards."
            ) from None

    def _header_file(self) -> IO[bytes]:
        """The start of the file, for its ``.npy`` header (a remote reader range-reads it)."""
        return self.path.open("rb")

    def _inspect(self) -> tuple[int, int]:
        """Byte offset of the tokens and number of samples, from the size (and header)."""
        size = self._file_size()
        sample_bytes = self.seq_len * self.dtype.itemsize
        offset, data_bytes = 0, size
        if self.path.suffix == ".npy":
            with self._header_file() as file:
                version = np.lib.format.read_magic(file)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(file)
                offset = file.tell()
            if dtype != self.dtype or fortran:
                raise ValueError(
                    f"token shard {str(self.path)!r} holds {dtype} "
                    f"({'Fortran' if fortran else 'C'} order), expected C-ordered "
                    f"{self.dtype}. Pass dtype={str(dtype)!r} or rewrite the shard."
                )
            if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == self.seq_len)):
                raise ValueError(
                    f"token shard {str(self.path)!r} has shape {shape}; expected (tokens,) or "
                    f"(samples, {self.seq_len}). Pass the seq_len it was written with."
                )
            data_bytes = int(np.prod(shape)) * self.dtype.itemsize
            if size - offset < data_bytes:
                raise ValueError(
                    f"token shard {str(self.path)!r} is truncated: its header declares "
                    f"{data_bytes} bytes of tokens but the file holds {size - offset}. "
                    "Restore or rewrite the shard."
                )
        if data_bytes % sample_bytes:
            raise ValueError(
                f"token shard {str(self.path)!r} has {data_bytes} bytes of tokens, not a "
                f"multiple of seq_len * itemsize = {self.seq_len} * {self.dtype.itemsize} = "
                f"{sample_bytes} bytes: the file is truncated, or seq_len={self.seq_len} / "
                f"dtype={self.dtype} are not the ones it was written with."
            )
        return offset, data_bytes // sample_bytes

    def __len__(self) -> int:
        return self._length

    @property
    def loaded(self) -> bool:
        """Whether the shard is resident."""
        return self._data is not None

    def load(self) -> None:
        """Map the file (and with ``preload``, copy it into memory). Idempotent."""
        self._tokens()

    def _tokens(self) -> Tokens:
        # One local reference: a close() on another thread cannot pull it from under a read.
        data = self._data
        if data is None:
            offset = self._open() if self._offset is None else self._offset
            mapped: Tokens = np.memmap(
                self.path, dtype=self.dtype, mode="r", offset=offset,
                shape=(self._length, self.seq_len),
            )  # fmt: skip
            # a plain ndarray view of the mapping: no memmap subclass overhead per read
            data = self._data = np.array(mapped) if self.preload else mapped.view(np.ndarray)
            self.loads += 1
        return data

    def close(self) -> None:
        """Release the memory or the mapping. Idempotent."""
        self._data = None

    def check(self) -> None:
        """Raise ``FileNotFoundError``/``ValueError`` if the file vanished or changed size.

        A reader not opened yet has nothing to compare: its first :meth:`load` checks it.
        """
        if self._offset is None:
            return
        expected = self._length
        offset, length = self._inspect()
        if (offset, length) != (self._offset, expected):
            raise ValueError(
                f"token shard {str(self.path)!r} now holds {length} samples, it held "
                f"{expected} when it was opened: it was rewritten or truncated."
            )

    def read(self, index: int) -> Tokens:
        """Sample ``index``: a ``(seq_len,)`` array (a copy, valid after ``close()``)."""
        return np.array(self._tokens()[check_index(self.name, index, self._length)])

    def read_many(self, indices: NDArray[np.intp]) -> list[Tokens]:
        """Samples at ``indices`` (in range), read with one gather: rows of one new array.

        Example:
            >>> import tempfile
            >>> path = Path(tempfile.mkdtemp()) / "shard.bin"
            >>> np.arange(12, dtype=np.uint16).tofile(path)
            >>> [row.tolist() for row in TokenShardReader(path, 4).read_many(np.array([2, 0]))]
            [[8, 9, 10, 11], [0, 1, 2, 3]]
        """
        if type(self).read is not TokenShardReader.read:  # a subclass reads its own way
            return [self.read(i) for i in indices.tolist()]
        return list(self._tokens()[indices])

    def gather_into(self, indices: NDArray[np.intp], out: Tokens, checked: bool = False) -> bool:
        """Write the samples at ``indices`` (``0 <= i < len``) into the rows of ``out``.

        Returns False, writing nothing, for a subclass that reads its own way. ``checked``:
        the caller has checked the range (skips the check).

        Example:
            >>> import tempfile
            >>> path = Path(tempfile.mkdtemp()) / "shard.bin"
            >>> np.arange(12, dtype=np.uint16).tofile(path)
            >>> out = np.empty((2, 4), dtype=np.uint16)
            >>> TokenShardReader(path, 4).gather_into(np.array([2, 0]), out), out.tolist()
            (True, [[8, 9, 10, 11], [0, 1, 2, 3]])
        """
        if type(self).read is not TokenShardReader.read:
            return False
        if not checked and indices.size and (indices.min() < 0 or indices.max() >= self._length):
            bad = indices[(indices < 0) | (indices >= self._length)][0]
            raise IndexError(
                f"index {bad} is out of range for shard {self.name!r} of {self._length} samples."
            )
        # mode="clip" (the indices are in range): "raise" buffers ``out``, 4x slower
        self._tokens().take(indices, axis=0, out=out, mode="clip")
        return True

    def read_range(self, start: int, stop: int) -> Tokens:
        """Samples ``start`` to ``stop`` (exclusive): a ``(stop - start, seq_len)`` array."""
        check_range(self.name, start, stop, self._length)
        return np.array(self._tokens()[start:stop])

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the loaded data: a worker process maps the file itself."""
        return {**self.__dict__, "_data": None}

    def __repr__(self) -> str:
        return (
            f"TokenShardReader({str(self.path)!r}, seq_len={self.seq_len}, "
            f"dtype={self.dtype}, samples={self._length})"
        )
