"""MDS column encodings: from the encoding's name to a decoder of one value's bytes.

The byte layouts are MosaicML Streaming's (``streaming/base/format/mds/encodings.py``,
0.13): numbers are little-endian; ``int`` is an int64; ``str_int``, ``str_float`` and
``str_decimal`` are UTF-8 digits; ``ndarray[:dtype[:shape]]`` is
``[dtype code: 1]? [ndim << 2 | shape dtype code: 1, shape]? [values]`` (the parts in
``[]?`` only where the encoding leaves dtype or shape open); ``jpeg_array`` is
``[count: u32] [sizes: count * u32] [images]`` and ``list[...]`` the same after a 4-byte
placeholder. Image values are returned as their stored bytes (see :func:`mds_pil_args`).
"""

from __future__ import annotations

import functools
import json
import pickle
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Final, NamedTuple, Protocol

import numpy as np

__all__ = ["Column", "mds_column", "mds_columns", "mds_pil_args"]

Decoder = Callable[[memoryview], Any]

# Streaming's NDArray codes: value dtypes and shape dtypes (the code is log2 of the size).
VALUE_DTYPES: Final = {
    8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
    33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64",
}  # fmt: skip
SCALARS: Final = frozenset(VALUE_DTYPES.values())
UNSAFE: Final = frozenset({"pkl"})  # unpickling runs code named by the data


class Column(NamedTuple):
    """One column of an MDS shard.

    Attributes:
        name: The column's name.
        encoding: Its MDS encoding (``"int"``, ``"ndarray:float32"``, ``"jpeg"``, ...).
        size: Bytes of every value for a fixed-size encoding, else ``None``.
        decode: One value from its bytes.
        dtype: The values' dtype where a batch can be decoded with one NumPy gather
            (fixed-size numbers and fixed-shape arrays), else ``None``.
        shape: The shape of each value of such a column (``()`` for a scalar).
        as_int: The gathered values are returned as Python ``int`` (the ``int`` encoding).
    """

    name: str
    encoding: str
    size: int | None
    decode: Decoder
    dtype: np.dtype[Any] | None = None
    shape: tuple[int, ...] = ()
    as_int: bool = False


def _le(name: str) -> np.dtype[Any]:
    dtype: np.dtype[Any] = np.dtype(name).newbyteorder("<")
    return dtype


def _scalar(dtype: np.dtype[Any], data: memoryview) -> Any:
    return np.frombuffer(data, dtype)[0]


def _int64(data: memoryview) -> int:
    return int.from_bytes(data, "little", signed=True)


def _str(data: memoryview) -> str:
    return str(data, "utf-8")


def _json(data: memoryview) -> Any:
    return json.loads(bytes(data))


def _unpickle(data: memoryview) -> Any:
    return pickle.loads(data)  # MDS's own decoding; refused unless allow_unsafe_types


def _parsed(kind: Callable[[str], Any], data: memoryview) -> Any:
    return kind(str(data, "utf-8"))


def _ndarray(dtype: str | None, shape: tuple[int, ...] | None, data: memoryview) -> Any:
    index = 0
    if dtype is None:
        code = data[0] if len(data) else -1
        if code not in VALUE_DTYPES:
            raise ValueError(f"its dtype code {code} is not one of MDS's {sorted(VALUE_DTYPES)}")
        dtype, index = VALUE_DTYPES[code], 1
    if shape is None:
        if len(data) <= index:
            raise ValueError("it ends before its shape")
        ndim, width = data[index] >> 2, 1 << (data[index] & 3)
        if len(data) < index + 1 + ndim * width:
            raise ValueError(f"it ends inside its shape of {ndim} dimensions")
        shape = tuple(np.frombuffer(data, _le(f"u{width}"), ndim, index + 1).tolist())
        index += 1 + ndim * width
    values = _le(dtype)
    expected = int(np.prod(shape)) * values.itemsize
    if len(data) - index != expected:
        raise ValueError(
            f"it holds {len(data) - index} bytes of values, but shape {shape} of {dtype} "
            f"needs {expected}"
        )
    return np.frombuffer(data, values, offset=index).reshape(shape).copy()


def _split(placeholder: int, data: memoryview) -> list[bytes]:
    """The items of a ``jpeg_array`` (``placeholder=0``) or a ``list[...]`` (4)."""
    head = placeholder + 4
    if len(data) < head:
        raise ValueError(f"it holds {len(data)} bytes, fewer than its {head}-byte header")
    count = int(np.frombuffer(data, "<u4", 1, placeholder)[0])
    if len(data) < head + 4 * count:
        raise ValueError(f"it ends inside the sizes of its {count} items")
    ends = np.frombuffer(data, "<u4", count, head).astype(np.int64).cumsum() + head + 4 * count
    if (ends[-1] if count else head) != len(data):
        raise ValueError(f"its {count} item sizes do not add up to its {len(data)} bytes")
    starts = [head + 4 * count, *ends[:-1].tolist()][:count]
    return [bytes(data[a:b]) for a, b in zip(starts, ends.tolist(), strict=True)]


def mds_pil_args(value: bytes) -> tuple[str, tuple[int, int], bytes]:
    r"""``(mode, (width, height), pixels)`` of a ``pil`` value, for ``PIL.Image.frombytes``.

    MDS's ``pil`` encoding stores ``[width: u32] [height: u32] [len(mode): u32] [mode]
    [raw pixels]``; ``PIL.Image.frombytes(*mds_pil_args(value))`` is the image MDS decodes.

    Example:
        >>> value = np.array([2, 1, 1], "<u4").tobytes() + b"L" + bytes([7, 9])
        >>> mds_pil_args(value)
        ('L', (2, 1), b'\x07\t')
    """
    if len(value) < 12:
        raise ValueError(f"a pil value of {len(value)} bytes is shorter than its 12-byte header.")
    width, height, mode_size = np.frombuffer(value, "<u4", 3).tolist()
    mode = bytes(value[12 : 12 + mode_size]).decode("utf-8")
    return mode, (width, height), bytes(value[12 + mode_size :])


_BYTES: Final = {"jpeg", "png", "pil", "bytes"}  # images stay their stored bytes
_SPLIT: Final = {"jpeg_array": 0, "jpegarray": 0, "list[pil]": 4, "list[jpeg]": 4, "list[png]": 4}
_PARSED: Final[dict[str, Decoder]] = {
    "str": _str,
    "str_int": functools.partial(_parsed, int),
    "str_float": functools.partial(_parsed, float),
    "str_decimal": functools.partial(_parsed, Decimal),
    "json": _json,
    "pkl": _unpickle,
}
KNOWN: Final = sorted(
    {"int", "ndarray", "ndarray:DTYPE", "ndarray:DTYPE:SHAPE"}
    | SCALARS
    | _BYTES
    | set(_SPLIT)
    | set(_PARSED)
)


def _array_column(name: str, encoding: str) -> Column:
    parts = encoding.split(":")[1:]
    if parts == [""]:
        parts = []
    dtype = parts[0] if parts else None
    if len(parts) > 2 or (dtype is not None and dtype not in SCALARS):
        raise ValueError(
            f"column {name!r} has encoding {encoding!r}: expected ndarray, ndarray:DTYPE or "
            f"ndarray:DTYPE:SHAPE with DTYPE one of {sorted(SCALARS)} and SHAPE like 3,224,224"
        )
    shape: tuple[int, ...] | None = None
    if len(parts) == 2:
        try:
            shape = tuple(int(n) for n in parts[1].split(","))
        except ValueError:
            shape = (0,)
        if min(shape) < 1:
            raise ValueError(
                f"column {name!r} has encoding {encoding!r}: its shape must be positive "
                "integers separated by commas (like 3,224,224)"
            )
    decode = functools.partial(_ndarray, dtype, shape)
    if dtype is None or shape is None:
        return Column(name, encoding, None, decode)
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return Column(name, encoding, size, decode, _le(dtype), shape)


def mds_column(name: str, encoding: str, allow_unsafe_types: bool = False) -> Column:
    """The :class:`Column` decoding ``encoding``; ``ValueError`` for one MDS does not write.

    Example:
        >>> column = mds_column("x", "ndarray:int16:2")
        >>> column.size, column.decode(memoryview(bytes([1, 0, 2, 0]))).tolist()
        (4, [1, 2])
    """
    if encoding in UNSAFE and not allow_unsafe_types:
        raise ValueError(
            f"column {name!r} has encoding {encoding!r}: decoding it unpickles, which can run "
            "any code the shard names. Pass allow_unsafe_types=True (as MDS asks) to read "
            "shards you trust."
        )
    if encoding == "int":
        return Column(name, encoding, 8, _int64, _le("int64"), as_int=True)
    if encoding in SCALARS:
        dtype = _le(encoding)
        return Column(name, encoding, dtype.itemsize, functools.partial(_scalar, dtype), dtype)
    if encoding in _BYTES:
        return Column(name, encoding, None, bytes)
    if encoding in _SPLIT:
        return Column(name, encoding, None, functools.partial(_split, _SPLIT[encoding]))
    if encoding in _PARSED:
        return Column(name, encoding, None, _PARSED[encoding])
    if encoding == "ndarray" or encoding.startswith("ndarray:"):
        return _array_column(name, encoding)
    raise ValueError(
        f"column {name!r} has encoding {encoding!r}, which this reader does not decode "
        f"(MDS 0.13's encodings are: {', '.join(KNOWN)}). Rewrite the column with one of "
        "them, or read this dataset with mosaicml-streaming."
    )


class _Columns(Protocol):
    @property
    def column_names(self) -> Sequence[str]: ...
    @property
    def column_encodings(self) -> Sequence[str]: ...
    @property
    def column_sizes(self) -> Sequence[int | None]: ...


def mds_columns(shard: _Columns, allow_unsafe_types: bool, where: str) -> tuple[Column, ...]:
    """The columns of a shard (an ``MDSShardInfo``), checked against the index's sizes.

    ``ValueError`` naming the shard ``where`` for an encoding this reader does not decode, or
    a column size the encoding contradicts.
    """
    names, encodings = shard.column_names, shard.column_encodings
    try:
        columns = tuple(
            mds_column(name, encoding, allow_unsafe_types)
            for name, encoding in zip(names, encodings, strict=True)
        )
    except ValueError as error:
        raise ValueError(f"MDS shard {where!r}: {error}") from None
    for column, size in zip(columns, shard.column_sizes, strict=True):
        if column.size != size:
            raise ValueError(
                f"MDS shard {where!r}: column {column.name!r} ({column.encoding}) has "
                f"column_size {size} in the index, but that encoding's values are "
                f"{column.size or 'variable'} bytes. The index is corrupt: rewrite it."
            )
    return columns
