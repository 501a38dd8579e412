""":class:`MDSShardReader`: one MDS shard, random access by sample (see :mod:`.mds`).

The shard layout is in :mod:`~lightning_resumable_data.formats._mds_layout`, the encodings
in ``_mds_encodings``; a shard at a URL is read by the subclass in ``_remote_mds``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.formats._mds_encodings import mds_columns
from lightning_resumable_data.formats._mds_index import MDSShardInfo
from lightning_resumable_data.formats._mds_layout import check_size, column_bounds, read_shard
from lightning_resumable_data.shards.protocol import check_index, check_range

__all__ = ["MDSShardReader"]

Sample = dict[str, Any]


class _Loaded(NamedTuple):
    path: str  # the file read
    size: int  # its size
    data: NDArray[np.uint8]  # the uncompressed shard
    view: memoryview  # of ``data``, sliced per value
    bounds: NDArray[np.int64]  # (samples, columns + 1): column c of sample i is [b[i,c], b[i,c+1])


class MDSShardReader:
    """One MDS shard: its samples by index, each a ``dict`` of column name to value.

    Opening reads nothing (the index gives the length and columns; an unknown encoding is
    refused here). :meth:`load` reads the shard file (decompressing a ``zip_data`` file once),
    checks its size against the index and every sample's offsets and column sizes against
    each other (vectorised), and keeps it in memory (``preload``) or mapped. A compressed
    shard with only its uncompressed file (Streaming's local cache) is read from that.

    Args:
        directory: The directory of the dataset's ``index.json`` (file names are relative
            to it).
        shard: The shard's entry of ``index.json`` (a dict) or its :class:`MDSShardInfo`.
        preload: ``load()`` reads an uncompressed shard into memory in one sequential read;
            ``False`` maps it (pages read on first touch).
        allow_unsafe_types: Decode ``pkl`` columns (unpickling runs code named by the data);
            refused by default, as MDS does.

    Example:
        A shard of one sample ``{"s": "hi", "x": 7}`` (``str`` and ``int`` columns), by hand:

        >>> import tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> sample = np.array([2], "<u4").tobytes() + b"hi" + np.int64(7).tobytes()
        >>> offsets = np.array([1, 12, 12 + len(sample)], "<u4").tobytes()  # count, offsets
        >>> _ = (directory / "shard.00000.mds").write_bytes(offsets + sample)
        >>> reader = MDSShardReader(directory, {
        ...     "format": "mds", "version": 2, "samples": 1, "compression": None,
        ...     "column_names": ["s", "x"], "column_encodings": ["str", "int"],
        ...     "column_sizes": [None, 8], "zip_data": None,
        ...     "raw_data": {"basename": "shard.00000.mds", "bytes": 26}})
        >>> len(reader), reader.loaded, reader.read(0), reader.loaded
        (1, False, {'s': 'hi', 'x': 7}, True)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        shard: MDSShardInfo | dict[str, Any],
        *,
        preload: bool = True,
        allow_unsafe_types: bool = False,
    ) -> None:
        self._directory = os.fspath(directory)
        self.info = shard if isinstance(shard, MDSShardInfo) else MDSShardInfo.from_json(shard)
        self.preload = bool(preload)
        self.allow_unsafe_types = bool(allow_unsafe_types)
        self.columns = mds_columns(self.info, self.allow_unsafe_types, self._where())
        self._vector = [c for c, column in enumerate(self.columns) if column.dtype is not None]
        self.loads = 0  # how many times load() really loaded (for tests and stats)
        self._opened = False
        self._loaded: _Loaded | None = None

    def _where(self) -> str:
        return os.path.join(self._directory, self.info.raw_basename)

    @property
    def name(self) -> str:
        """The shard's file name in the index (``shard.00000.mds``)."""
        return self.info.raw_basename

    @property
    def path(self) -> Path:
        """The file :meth:`load` reads: the compressed one, unless only the raw one exists."""
        return Path(self._source()[0])

    def _source(self) -> tuple[str, int, str | None]:
        """The file to read, its expected size, and its compression."""
        info = self.info
        raw = os.path.join(self._directory, info.raw_basename)
        if info.zip_basename is None or info.zip_bytes is None or info.compression is None:
            return raw, info.raw_bytes, None
        compressed = os.path.join(self._directory, info.zip_basename)
        if not os.path.exists(compressed) and os.path.exists(raw):
            return raw, info.raw_bytes, None  # decompressed by Streaming's cache
        return compressed, info.zip_bytes, info.compression

    def __len__(self) -> int:
        return self.info.samples

    @property
    def opened(self) -> bool:
        """Whether the shard has been loaded (and checked) since construction."""
        return self._opened

    def open(self) -> None:
        """Check the shard file's size against the index now, without loading it.

        Afterwards a resume checks this shard (see :meth:`check`) even if it was never loaded.
        """
        check_size(*self._source()[:2])
        self._opened = True

    @property
    def loaded(self) -> bool:
        """Whether the shard is resident."""
        return self._loaded is not None

    def load(self) -> None:
        """Read (and decompress) the shard, check it, keep it resident. Idempotent."""
        self._data()

    def _data(self) -> _Loaded:
        # One local reference: a close() on another thread cannot pull it from under a read.
        loaded = self._loaded
        if loaded is None:
            path, expected, compression = self._source()
            with self._local(path) as local:
                check_size(local, expected, path)
                data = read_shard(local, compression, self.info.raw_bytes, self.preload, path)
            bounds = column_bounds(data, len(self), self.columns, path)
            loaded = self._loaded = _Loaded(path, expected, data, memoryview(data.data), bounds)
            self._opened = True
            self.loads += 1
        return loaded

    def _local(self, path: str) -> contextlib.AbstractContextManager[str]:
        """A local file with the bytes of ``path`` while the block runs: ``path`` itself."""
        return contextlib.nullcontext(path)

    def close(self) -> None:
        """Release the shard's memory or mapping. Idempotent."""
        self._loaded = None

    def check(self) -> None:
        """Raise ``FileNotFoundError``/``ValueError`` if the shard file vanished or changed size.

        The file loaded (else the one :meth:`load` would read) is compared with the index.
        """
        loaded = self._loaded
        check_size(*(self._source()[:2] if loaded is None else (loaded.path, loaded.size)))

    def _decode(self, loaded: _Loaded, index: int, c: int) -> Any:
        column, bounds = self.columns[c], loaded.bounds
        value = loaded.view[bounds[index, c] : bounds[index, c + 1]]
        try:
            return column.decode(value)
        except Exception as error:  # a corrupt value: each encoding fails its own way
            raise ValueError(
                f"MDS shard {loaded.path!r}: sample {index}, column {column.name!r} "
                f"({column.encoding}) cannot be decoded from its {len(value)} bytes: "
                f"{type(error).__name__}: {error}. The shard is corrupt: restore or rewrite it."
            ) from error

    def _data_for(self, index: int) -> _Loaded:
        """The loaded shard, loading it for sample ``index`` (named if that fails)."""
        loaded = self._loaded
        if loaded is not None:
            return loaded
        try:
            return self._data()
        except (OSError, ValueError) as error:
            raise type(error)(f"cannot read sample {index}: {error}") from error

    def read(self, index: int) -> Sample:
        """Sample ``index``: a ``dict`` of column name to decoded value."""
        index = check_index(self.name, index, len(self))
        loaded = self._data_for(index)
        return {
            column.name: self._decode(loaded, index, c) for c, column in enumerate(self.columns)
        }

    def read_many(self, indices: NDArray[np.intp]) -> list[Sample]:
        """Samples at ``indices`` (in range); fixed-size numeric columns in one gather each."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            bad = indices[(indices < 0) | (indices >= len(self))][0]
            check_index(self.name, int(bad), len(self))  # raises the IndexError naming it
        loaded = self._data_for(int(indices[0])) if indices.size else self._data()
        gathered: list[list[Any] | None] = [None] * len(self.columns)
        for c in self._vector:  # one gather per fixed-size numeric column
            column = self.columns[c]
            starts = loaded.bounds[indices, c]
            raw = loaded.data[starts[:, None] + np.arange(column.size or 0)]
            values = raw.view(cast(np.dtype[Any], column.dtype)).reshape(
                len(indices), *column.shape
            )
            gathered[c] = values.tolist() if column.as_int else list(values)
        return [
            {
                column.name: self._decode(loaded, i, c) if values is None else values[j]
                for c, (column, values) in enumerate(zip(self.columns, gathered, strict=True))
            }
            for j, i in enumerate(indices.tolist())
        ]

    def read_range(self, start: int, stop: int) -> list[Sample]:
        """Samples ``start`` to ``stop`` (exclusive)."""
        check_range(self.name, start, stop, len(self))
        return self.read_many(np.arange(start, stop))

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the loaded shard: a worker process reads the file itself."""
        return {**self.__dict__, "_loaded": None}

    def __repr__(self) -> str:
        return f"MDSShardReader({self._where()!r}, samples={len(self)})"
