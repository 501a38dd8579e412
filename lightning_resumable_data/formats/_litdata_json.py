"""LitData's ``json`` leaf: a list or dict field stored as one leaf, in its compact binary form.

``litdata.optimize`` stores a list/dict field of a dict sample as one ``json`` leaf (its
``JsonLeaf``): a tag byte, then homogeneous lists packed (strings, int64, float64, bools),
records (lists of flat dicts with the same keys) column-tagged, anything else as JSON text.
A payload starting with ``[`` or ``{`` is legacy plain JSON. Layout from
``litdata/streaming/serializers.py`` (``_nested_dumps``); all integers little-endian.

Example:
    >>> import struct
    >>> nested_loads(bytes([2]) + struct.pack("<I", 2) + struct.pack("<2q", 7, -1))
    [7, -1]
    >>> nested_loads(b'{"a": [1, 2]}')
    {'a': [1, 2]}
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

import numpy as np

__all__ = ["nested_loads"]

_U32: Final = struct.Struct("<I")
_I64: Final = struct.Struct("<q")
_F64: Final = struct.Struct("<d")
(JSON, STRS, I64S, F64S, BOOLS, DICT, RECS, STR, I64, F64, BOOL, NONE) = range(12)
_REC_NONE, _REC_STR, _REC_I64, _REC_F64, _REC_BOOL = range(0x10, 0x15)


def nested_loads(data: bytes) -> Any:
    """Decode one ``json`` leaf (the compact form, or legacy JSON text)."""
    if not data or data[0] > 0x20:
        return json.loads(data)
    value, end = _load(data, 0)
    if end != len(data):
        raise ValueError(f"json leaf has {len(data) - end} bytes after its value")
    return value


def _utf8(raw: bytes, offset: int) -> tuple[str, int]:
    (length,) = _U32.unpack_from(raw, offset)
    offset += 4
    if offset + length > len(raw):
        raise ValueError("json leaf string runs past its end")
    return raw[offset : offset + length].decode("utf-8"), offset + length


def _array(raw: bytes, offset: int, dtype: str, itemsize: int) -> tuple[list[Any], int]:
    (count,) = _U32.unpack_from(raw, offset + 1)
    start = offset + 5
    end = start + itemsize * count
    if end > len(raw):
        raise ValueError("json leaf array runs past its end")
    return np.frombuffer(raw, dtype=dtype, count=count, offset=start).tolist(), end


def _load(raw: bytes, offset: int) -> tuple[Any, int]:
    tag = raw[offset]
    if tag == JSON:
        (length,) = _U32.unpack_from(raw, offset + 1)
        start = offset + 5
        return json.loads(raw[start : start + length]), start + length
    if tag == I64S:
        return _array(raw, offset, "<i8", 8)
    if tag == F64S:
        return _array(raw, offset, "<f8", 8)
    if tag == BOOLS:
        values, end = _array(raw, offset, "u1", 1)
        return [bool(v) for v in values], end
    if tag == STRS:
        (count,) = _U32.unpack_from(raw, offset + 1)
        offset += 5
        strings = []
        for _ in range(count):
            text, offset = _utf8(raw, offset)
            strings.append(text)
        return strings, offset
    if tag == STR:
        return _utf8(raw, offset + 1)
    if tag == I64:
        return _I64.unpack_from(raw, offset + 1)[0], offset + 9
    if tag == F64:
        return _F64.unpack_from(raw, offset + 1)[0], offset + 9
    if tag == BOOL:
        return raw[offset + 1] != 0, offset + 2
    if tag == NONE:
        return None, offset + 1
    if tag == DICT:
        (count,) = _U32.unpack_from(raw, offset + 1)
        offset += 5
        mapping: dict[str, Any] = {}
        for _ in range(count):
            key, offset = _utf8(raw, offset)
            mapping[key], offset = _load(raw, offset)
        return mapping, offset
    if tag == RECS:
        return _records(raw, offset)
    raise ValueError(f"unknown json leaf tag {tag}")


def _records(raw: bytes, offset: int) -> tuple[list[dict[str, Any]], int]:
    rows_count, keys_count = struct.unpack_from("<II", raw, offset + 1)
    offset += 9
    keys = []
    for _ in range(keys_count):
        key, offset = _utf8(raw, offset)
        keys.append(key)
    rows: list[dict[str, Any]] = []
    for _ in range(rows_count):
        row: dict[str, Any] = {}
        for key in keys:
            kind = raw[offset]
            offset += 1
            if kind == _REC_NONE:
                row[key] = None
            elif kind == _REC_STR:
                row[key], offset = _utf8(raw, offset)
            elif kind == _REC_I64:
                row[key] = _I64.unpack_from(raw, offset)[0]
                offset += 8
            elif kind == _REC_F64:
                row[key] = _F64.unpack_from(raw, offset)[0]
                offset += 8
            elif kind == _REC_BOOL:
                row[key] = raw[offset] != 0
                offset += 1
            else:
                raise ValueError(f"unknown json leaf record tag {kind}")
        rows.append(row)
    return rows, offset
