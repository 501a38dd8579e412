"""``decode=True`` for WebDataset samples: fields decoded by their extension, as WebDataset does.

The table is WebDataset's basic handlers (``webdataset.autodecode.decoders``) less the
unsafe (pickle) and optional-package ones (torch, msgpack, cbor, tenbin), plus ``idx``; a
field ending in ``.gz`` is gunzipped first (WebDataset's ``gzfilter``). Images and audio are
left as bytes: decode them with ``PIL.Image.open(io.BytesIO(data))`` or
``soundfile.read(io.BytesIO(data))`` where they are used, or pass a mapping of your own.

Example:
    >>> sample = {"__key__": "k", "cls": b"7", "seg.npy": _npy_bytes(), "jpg": b"JFIF"}
    >>> decode_fields(sample, DEFAULT_DECODERS, "shard 's.tar'")
    >>> sample["cls"], sample["seg.npy"].tolist(), sample["jpg"]
    (7, [0, 1], b'JFIF')
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["DEFAULT_DECODERS", "Decoders", "decode_fields"]

Decoders = Mapping[str, Callable[[bytes], Any]]


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> NDArray[Any]:
    return np.load(io.BytesIO(data), allow_pickle=False)  # type: ignore[no-any-return]


def _npy_bytes() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(2))
    return buffer.getvalue()


DEFAULT_DECODERS: Final[Decoders] = MappingProxyType(
    {
        **dict.fromkeys(("txt", "text", "transcript"), _text),
        **dict.fromkeys(("json", "jsn"), json.loads),
        **dict.fromkeys(("cls", "cls2", "idx", "index", "inx", "id"), int),
        "npy": _npy,
    }
)
"""``decode=True``: the field's extension (after its last dot) -> decoder of its bytes."""


def decode_fields(sample: dict[str, Any], decoders: Decoders, where: str) -> None:
    """Decode, in place, the fields of ``sample`` whose extension ``decoders`` names.

    Raises:
        ValueError: A decoder failed; the message names ``where``, the key and the field.
    """
    for field, value in sample.items():
        if field.startswith("__"):
            continue
        inner = field[:-3] if field.endswith(".gz") else field
        decoder = decoders.get(inner.rsplit(".", 1)[-1])
        if decoder is None and inner == field:
            continue
        try:
            raw = gzip.decompress(value) if inner != field else value
            sample[field] = raw if decoder is None else decoder(raw)
        except Exception as error:
            raise ValueError(
                f"WebDataset {where}: cannot decode field {field!r} of sample key "
                f"{sample['__key__']!r}: {error!r}. Read it with decode=False to see its "
                "bytes, or map its extension to another decoder."
            ) from error
