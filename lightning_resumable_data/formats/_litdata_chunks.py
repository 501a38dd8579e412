r"""The byte layouts of one LitData chunk: where item ``i``'s bytes are, and inflating them.

A ``PyTreeLoader`` chunk (``litdata/streaming/writer.py``, ``_create_chunk``) is
``num_items: u32``, ``offsets: u32[num_items + 1]`` (absolute byte offsets), then the items
back to back; an item is ``sizes: u32[leaves]`` then each leaf's bytes. Its variants:

* ``compression_level="chunk"``: the whole file is one zstd frame of that layout;
* ``"sample"``: that layout, each item's bytes one zstd frame;
* ``"batch"`` (``framed_zstd.py``): magic ``LDFZ01\\0\\0``, ``version: u16``, ``flags: u16``,
  ``num_items``, ``frame_rows``, ``n_frames: u32``, offsets relative to the uncompressed
  items, a table of frames (``first_item, n_items: u32``, ``offset: u64``,
  ``compressed, uncompressed: u32``), then the zstd frames of ``frame_rows`` items each;
* an Arrow footer (``LDARW01\\0`` at the end, after ``ipc_len: u32``): rows of JSON-like dicts
  as an Arrow IPC file; when every offset is the header's end the footer holds the items.

Example:
    >>> import numpy as np
    >>> data = np.array([2, 16, 18, 19], "<u4").tobytes() + b"abc"
    >>> chunk = parse_chunk(data, items=2, compression=None, level="chunk")
    >>> chunk.item(1, bytes), chunk.item(0, bytes)
    (b'c', b'ab')
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["Chunk", "parse_chunk", "zstd_decompress"]

FRAMED_MAGIC: Final = b"LDFZ01\0\0"
ARROW_MAGIC: Final = b"LDARW01\0"
_PREFIX: Final = struct.Struct("<8sHHIII")
_FRAME: Final = struct.Struct("<IIQII")


def zstd_decompress(data: bytes, size: int | None = None) -> bytes:
    """Inflate one zstd frame, with the first zstd module found (imported on first use).

    Raises:
        ModuleNotFoundError: No zstd module: ``pip install zstandard``.
    """
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

        return bytes(zstd.decompress(data))
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found, import-untyped, unused-ignore]

        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(data))
    except ImportError:
        pass
    try:
        import zstd  # type: ignore[import-not-found, import-untyped, unused-ignore]

        return bytes(zstd.decompress(data))
    except ImportError:
        raise ModuleNotFoundError(
            "this LitData dataset was written with compression='zstd' and no zstd module is "
            "installed: pip install zstandard (or zstd, which litdata itself uses)."
        ) from None


class Chunk:
    """A loaded chunk of items in the classic layout (optionally each item a zstd frame)."""

    def __init__(self, data: bytes, offsets: NDArray[np.int64], per_item_zstd: bool) -> None:
        self.data, self.offsets, self.per_item_zstd = data, offsets, per_item_zstd

    def raw(self, index: int) -> bytes:
        """The stored bytes of item ``index``, inflated."""
        payload = self.data[self.offsets[index] : self.offsets[index + 1]]
        return zstd_decompress(payload) if self.per_item_zstd else payload

    def item(self, index: int, decode: Callable[[bytes], Any]) -> Any:
        """Item ``index`` decoded by ``decode`` from its bytes."""
        return decode(self.raw(index))


class FramedChunk(Chunk):
    """A ``compression_level="batch"`` chunk: zstd frames of ``frame_rows`` items each."""

    def __init__(self, data: bytes, offsets: NDArray[np.int64], frames: NDArray[np.int64]) -> None:
        super().__init__(data, offsets, per_item_zstd=False)
        self.frames = frames  # (n_frames, 5): first_item, n_items, offset, compressed, size
        self._frame = -1
        self._inflated = b""

    def raw(self, index: int) -> bytes:
        frame = int(np.searchsorted(self.frames[:, 0], index, side="right")) - 1
        first, _, start, length, size = self.frames[frame].tolist()
        if frame != self._frame:  # one frame inflated at a time: a batch reads it in order
            inflated = zstd_decompress(self.data[start : start + length], size)
            if len(inflated) != size:
                raise ValueError(
                    f"zstd frame {frame} inflated to {len(inflated)} bytes, not {size}"
                )
            self._frame, self._inflated = frame, inflated
        base = self.offsets[first]
        return self._inflated[self.offsets[index] - base : self.offsets[index + 1] - base]


class ArrowChunk(Chunk):
    """Items stored only in the chunk's Arrow footer (rows of JSON-like dicts)."""

    def __init__(self, data: bytes, span: tuple[int, int]) -> None:
        super().__init__(data, np.zeros(1, np.int64), per_item_zstd=False)
        try:
            import pyarrow as pa
        except ImportError:
            raise ModuleNotFoundError(
                "this LitData chunk stores its rows as an Arrow footer (what litdata.optimize "
                "writes for dicts of strings, numbers and lists when pyarrow is installed): "
                "pip install pyarrow."
            ) from None
        start, length = span
        buffer = pa.py_buffer(data[start : start + length])
        is_file = data[start : start + 6] == b"ARROW1"
        reader = pa.ipc.open_file(buffer) if is_file else pa.ipc.open_stream(buffer)
        self.table = reader.read_all()

    def item(self, index: int, decode: Callable[[bytes], Any]) -> Any:
        return self.table.slice(index, 1).to_pylist()[0]


def _arrow_span(data: bytes) -> tuple[int, int] | None:
    if len(data) < 12 or data[-8:] != ARROW_MAGIC:
        return None
    (length,) = struct.unpack_from("<I", data, len(data) - 12)
    start = len(data) - 12 - length
    return (start, length) if start >= 0 and length > 0 else None


def parse_chunk(data: bytes, items: int, compression: str | None, level: str) -> Chunk:
    """The chunk stored in ``data`` (already inflated if whole-file compressed).

    Raises:
        ValueError: The bytes do not hold ``items`` items in a LitData layout (the message
            says what disagrees).
    """
    if data[:8] == FRAMED_MAGIC:
        return _framed(data, items)
    if compression is not None and level == "batch":
        raise ValueError(
            "index.json says compression_level='batch' but the LDFZ01 magic is missing"
        )
    if len(data) < 4:
        raise ValueError(f"{len(data)} bytes cannot hold a chunk header")
    (count,) = struct.unpack_from("<I", data, 0)
    header = 4 + 4 * (count + 1)
    if count != items or len(data) < header:
        raise ValueError(
            f"its header says {count} items in {len(data)} bytes, index.json says {items} items"
        )
    offsets = np.frombuffer(data, dtype="<u4", count=count + 1, offset=4).astype(np.int64)
    _check_offsets(offsets, header, len(data))
    span = _arrow_span(data)
    if span is not None and count and bool((offsets == header).all()):
        return ArrowChunk(data, span)
    return Chunk(data, offsets, per_item_zstd=compression is not None and level == "sample")


def _check_offsets(offsets: NDArray[np.int64], start: int, end: int) -> None:
    steps = np.diff(offsets)
    if offsets[0] != start or (steps < 0).any() or offsets[-1] > end:
        bad = int(np.argmax(steps < 0)) if (steps < 0).any() else len(offsets) - 2
        raise ValueError(
            f"its offset table is corrupt (item {max(bad, 0)}: offsets "
            f"{offsets[bad : bad + 2].tolist()},"
            f" items must lie in [{start}, {end}])"
        )


def _framed(data: bytes, items: int) -> FramedChunk:
    if len(data) < _PREFIX.size:
        raise ValueError("its framed zstd header is truncated")
    _, version, _, count, rows, n_frames = _PREFIX.unpack_from(data, 0)
    if version != 1 or count != items or rows <= 0 or n_frames != -(-count // rows):
        raise ValueError(
            f"its framed zstd header (version {version}, {count} items, {rows} per frame, "
            f"{n_frames} frames) disagrees with index.json ({items} items)"
        )
    table = _PREFIX.size + 4 * (count + 1)
    end = table + _FRAME.size * n_frames
    if len(data) < end:
        raise ValueError("its framed zstd tables are truncated")
    offsets = np.frombuffer(data, dtype="<u4", count=count + 1, offset=_PREFIX.size)
    frames = np.array([_FRAME.unpack_from(data, table + _FRAME.size * f) for f in range(n_frames)],
                      dtype=np.int64).reshape(n_frames, 5)  # fmt: skip
    _check_offsets(offsets.astype(np.int64), 0, int(offsets[-1]))
    if (frames[:, 2] < end).any() or (frames[:, 2] + frames[:, 3] > len(data)).any():
        raise ValueError("its zstd frames lie outside the file: the chunk is truncated or corrupt")
    return FramedChunk(data, offsets.astype(np.int64), frames)
