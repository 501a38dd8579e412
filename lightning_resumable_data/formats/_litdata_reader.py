""":class:`LitDataChunkReader`: one LitData chunk file, random access by item (see :mod:`.litdata`).

The chunk layouts are in :mod:`._litdata_chunks` and the others; a chunk at a URL is read by
the subclass in ``_remote_litdata``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.formats._litdata_chunks import Chunk, parse_chunk, zstd_decompress
from lightning_resumable_data.formats._litdata_index import LitDataIndex
from lightning_resumable_data.formats._litdata_leaves import decode_item, decoder
from lightning_resumable_data.formats._litdata_tokens import TokenLayout
from lightning_resumable_data.shards.protocol import check_index, check_range

__all__ = ["LitDataChunkReader"]


class LitDataChunkReader:
    """One LitData chunk file as a shard reader: random access by item index within the chunk.

    A ``PyTreeLoader`` chunk (the default) holds one item per sample ``fn`` returned, rebuilt
    as written: a dict, tuple or list of leaves (``int``, ``float``, ``bool``, ``str``,
    ``bytes``; NumPy arrays; torch tensors; ``json`` fields as lists/dicts; ``pickle`` leaves
    unpickled), an Arrow-footer chunk's rows as dicts. Encoded media (``pil``, ``jpeg``,
    ``image``, ``video``, ``audio``, ``file``, ...) stay the bytes LitData stored: decode them
    yourself (no vision stack is imported). A ``TokensLoader`` chunk is read as LitData's
    ``TokensLoader(block_size=...)`` reads it: item ``i`` is tokens
    ``[i * block_size, (i + 1) * block_size)`` of the chunk's token stream (a NumPy array or
    a tensor, as written), the chunk's last ``dim % block_size`` tokens unused.

    The reader touches no file until it is read: :meth:`load` reads the chunk into memory
    (inflating zstd), checking it against ``index.json`` (a missing file or a size that
    disagrees is an error naming the file and the item being read).

    Args:
        index: The directory's index (from :func:`read_litdata_index`).
        chunk: The chunk's position in the index.
        block_size: Tokens per item of a ``TokensLoader`` index (required there, refused
            elsewhere).

    Example:
        >>> import json, struct, tempfile
        >>> directory = Path(tempfile.mkdtemp())
        >>> items = [struct.pack("<I", 8) + struct.pack("<q", v) for v in (10, 20)]
        >>> body = np.array([2, 16, 28, 40], "<u4").tobytes() + b"".join(items)
        >>> _ = (directory / "chunk-0-0.bin").write_bytes(body)
        >>> config = {"data_format": ["int"], "data_spec": None, "item_loader": "PyTreeLoader"}
        >>> chunk = {"filename": "chunk-0-0.bin", "chunk_size": 2, "chunk_bytes": 40, "dim": None}
        >>> index_json = json.dumps({"chunks": [chunk], "config": config})
        >>> _ = (directory / "index.json").write_text(index_json)
        >>> from lightning_resumable_data.formats.litdata import read_litdata_index
        >>> reader = LitDataChunkReader(read_litdata_index(directory), 0)
        >>> len(reader), reader.read(1), reader.read_range(0, 2)
        (2, 20, [10, 20])
    """

    def __init__(self, index: LitDataIndex, chunk: int, *, block_size: int | None = None) -> None:
        if not 0 <= chunk < len(index.files):
            raise IndexError(f"chunk={chunk} is out of range for {len(index.files)} chunks.")
        tokens = index.item_loader == "TokensLoader"
        if tokens and (
            isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
        ):
            raise ValueError(
                f"{index.directory!r} was written with LitData's TokensLoader: pass the block "
                f"size (tokens per item), as TokensLoader(block_size=...) takes it: "
                f"open_litdata(directory, block_size=...) (got block_size={block_size!r})."
            )
        if not tokens and block_size is not None:
            raise ValueError(
                f"block_size={block_size} is for TokensLoader datasets; {index.directory!r} was "
                f"written with {index.item_loader} (one item per sample): leave it out."
            )
        self.index, self.chunk, self.block_size = index, chunk, block_size
        self.seq_len = block_size  # tokens per item (a batch of token rows is gathered at once)
        dim = index.dims[chunk] or 0
        self._length = dim // block_size if block_size else index.items[chunk]
        self._size: int | None = None  # the file's size when first opened
        self._chunk: Chunk | None = None
        self._tokens: NDArray[Any] | None = None
        self._layout = TokenLayout.of(index.data_format[0]) if tokens else None
        self.loads = 0

    @property
    def name(self) -> str:
        """The chunk's file name."""
        return self.index.files[self.chunk]

    @property
    def path(self) -> Path:
        """The chunk file."""
        return Path(self.index.directory) / self.name

    @property
    def location(self) -> str:
        """The chunk file, as errors name it (its URL for a chunk in object storage)."""
        return str(self.path)

    def _local(self, location: str) -> contextlib.AbstractContextManager[str]:
        """A local file with the bytes of ``location`` while the block runs: itself."""
        return contextlib.nullcontext(location)

    def __len__(self) -> int:
        return self._length

    @property
    def opened(self) -> bool:
        """Whether the file was looked at since construction (``check`` compares it then)."""
        return self._size is not None

    @property
    def loaded(self) -> bool:
        """Whether the chunk is in memory."""
        return self._chunk is not None

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The NumPy dtype of a ``TokensLoader`` chunk's tokens (``None`` otherwise)."""
        return None if self._layout is None else self._layout.numpy_dtype

    def _where(self, item: int | None) -> str:
        return (
            f"(reading item {item} of its {self._length})" if item is not None else "(loading it)"
        )

    def _file_size(self, item: int | None) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            raise FileNotFoundError(
                f"LitData chunk {self.location!r} does not exist {self._where(item)}; its "
                "index.json lists it. Restore the file, or write the dataset again."
            ) from None

    def _expect(self, size: int, what: str, item: int | None) -> None:
        expected = self.index.chunk_bytes[self.chunk]
        if size != expected:
            raise ValueError(
                f"LitData chunk {self.location!r} {what} {size} bytes but its index.json says "
                f"chunk_bytes={expected} {self._where(item)}: the file was truncated or "
                "replaced, or index.json is stale. Restore it or write the dataset again."
            )

    def open(self) -> None:
        """Check now that the file exists with the size ``index.json`` gives, without reading it."""
        size = self._file_size(None)
        if not self.index.whole_file_compressed:
            self._expect(size, "holds", None)
        self._size = size

    def load(self) -> None:
        """Read the chunk into memory, checked against ``index.json``. Idempotent."""
        self._load(None)

    def _load(self, item: int | None) -> Chunk:
        chunk = self._chunk
        if chunk is not None:
            return chunk
        size = self._file_size(item)
        index = self.index
        if not index.whole_file_compressed:
            self._expect(size, "holds", item)
        with self._local(str(self.path)) as local:
            data = Path(local).read_bytes()
        self._size = size
        if index.whole_file_compressed:
            data = zstd_decompress(data)
            self._expect(len(data), "inflates to", item)
        try:
            chunk = parse_chunk(
                data, index.items[self.chunk], index.compression, index.compression_level
            )
        except ValueError as error:
            raise ValueError(
                f"LitData chunk {self.location!r} is corrupt {self._where(item)}: {error}."
            ) from None
        if self._layout is not None and self.block_size is not None:
            start, end = int(chunk.offsets[0]), int(chunk.offsets[-1])
            dim = index.dims[self.chunk] or 0
            try:
                self._tokens = self._layout.blocks(chunk.data, start, end, dim, self.block_size)
            except ValueError as error:
                raise ValueError(
                    f"LitData chunk {self.location!r} is corrupt {self._where(item)}: {error}."
                ) from None
        self._decoders = [decoder(name) for name in index.data_format]
        self._chunk = chunk
        self.loads += 1
        return chunk

    def close(self) -> None:
        """Drop the chunk from memory. Idempotent."""
        self._chunk = self._tokens = None

    def check(self) -> None:
        """Raise ``FileNotFoundError``/``ValueError`` if the file vanished or changed size.

        A reader not opened yet has nothing to compare: its first load checks it.
        """
        if self._size is None:
            return
        size = self._file_size(None)
        if size != self._size:
            raise ValueError(
                f"LitData chunk {self.location!r} now holds {size} bytes, it held {self._size} "
                "when it was opened: it was rewritten or truncated."
            )

    def _rows(self, words: NDArray[Any]) -> Any:
        assert self._layout is not None
        return self._layout.rows(words)

    def read(self, index: int) -> Any:
        """Item ``index`` of the chunk, decoded (see the class docstring)."""
        index = check_index(self.name, index, self._length)
        chunk = self._load(index)
        if self._tokens is not None:
            return self._rows(self._tokens[index])
        try:
            return chunk.item(index, self._decode)
        except ModuleNotFoundError:
            raise
        except Exception as error:
            raise ValueError(
                f"item {index} of LitData chunk {self.location!r} cannot be decoded: {error}. "
                "The chunk is corrupt: restore it or write the dataset again."
            ) from error

    def _decode(self, raw: bytes) -> Any:
        return decode_item(raw, self.index.data_format, self._decoders, self.index.tree)

    def read_range(self, start: int, stop: int) -> Any:
        """Items ``start`` to ``stop`` (exclusive): a list, or one array/tensor of token rows."""
        check_range(self.name, start, stop, self._length)
        self._load(start if start < stop else None)
        if self._tokens is not None:
            return self._rows(self._tokens[start:stop])
        return [self.read(i) for i in range(start, stop)]

    def read_many(self, indices: NDArray[np.intp]) -> list[Any]:
        """Items at ``indices`` (in range): token rows with one gather, else item by item."""
        if self.block_size is None:
            return [self.read(i) for i in indices.tolist()]
        if not len(indices):
            return []
        self._load(int(indices[0]))
        assert self._tokens is not None
        return list(self._rows(self._tokens[indices]))

    def gather_into(
        self, indices: NDArray[np.intp], out: NDArray[Any], checked: bool = False
    ) -> bool:
        """Write token rows ``indices`` (``0 <= i < len``) into the rows of ``out``.

        Returns False, writing nothing, for a chunk of items that are not token blocks, or
        of blocks written as tensors (their batch is read item by item, as tensors).
        """
        if self.block_size is None or self.dtype is None or self._layout is None:
            return False
        if self._layout.tensor:  # written as tensors: the batch's rows must be tensors too
            return False
        if not indices.size:
            return True
        for bound in () if checked else (int(indices.min()), int(indices.max())):
            check_index(self.name, bound, self._length)
        self._load(int(indices[0]))
        assert self._tokens is not None
        out[:] = self._tokens[indices].view(out.dtype)
        return True

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the loaded chunk: a worker process reads the file itself."""
        state = {**self.__dict__, "_chunk": None, "_tokens": None}
        state.pop("_decoders", None)
        return state
