"""Write the MDS test corpora with MosaicML Streaming's own ``MDSWriter``.

Run under the peers' interpreter (``.venv-peers/bin/python``, built by ``make setup``)::

    python tests/formats/write_mds.py OUT_DIRECTORY

It writes one corpus per compression (``plain``, ``gz``, ``bz2``, ``zstd``, ``br``,
``snappy``) of the same :data:`SAMPLES` samples, each in several shards (a small
``size_limit``), with a column of every encoding MDS users write (:data:`COLUMNS`), and
``corpora.json`` (what was written, with the peer's version). The samples come from
:func:`sample_fields`, a pure function of the sample's number (NumPy only, no import of the
peer): the test module calls it too and compares what the reader returns, sample for
sample. Images are made here as PIL images from :func:`sample_fields`' pixel arrays, so
``MDSWriter`` encodes them itself (JPEG/PNG/raw PIL).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import json
import sys
import types
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import numpy as np

SAMPLES: Final = 61
SEED: Final = 29
SIZE_LIMIT: Final = 24_000  # bytes: the corpus spans ~10 shards of uneven sample counts
COMPRESSIONS: Final = {
    "plain": None,
    "gz": "gz",
    "bz2": "bz2",
    "zstd": "zstd:7",
    "br": "br:5",
    "snappy": "snappy",
}
# MDS's ndarray value dtypes, in the order the dynamic-dtype column cycles through them.
ARRAY_DTYPES: Final = (
    "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
    "uint64", "int64", "float64",
)  # fmt: skip
SCALARS: Final = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
)  # fmt: skip
COLUMNS: Final[dict[str, str]] = {
    "id": "int",
    "big": "int",
    "blob": "bytes",
    "text": "str",
    **{f"s_{dtype}": dtype for dtype in SCALARS},
    "str_int": "str_int",
    "str_float": "str_float",
    "str_decimal": "str_decimal",
    "array": "ndarray",
    "array_f32": "ndarray:float32",
    "array_fixed": "ndarray:int16:2,3",
    "meta": "json",
    "obj": "pkl",
    "jpg": "jpeg",
    "png": "png",
    "raw": "pil",
    "jpgs": "jpeg_array",
    "pngs": "list[png]",
}
# Pixel arrays of the image columns (the test decodes them back, exactly for PNG and PIL).
IMAGE_COLUMNS: Final = ("jpg", "png", "raw", "jpgs", "pngs")


def _scalar(rng: np.random.Generator, dtype: str) -> Any:
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return kind.type(rng.standard_normal() * 1e3)
    info = np.iinfo(kind)
    return kind.type(rng.integers(info.min, info.max, endpoint=True, dtype=kind))


def _array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> Any:
    kind = np.dtype(dtype)
    if kind.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(kind)
    info = np.iinfo(kind)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=kind)


def _pixels(rng: np.random.Generator, channels: int) -> Any:
    height, width = (int(n) for n in rng.integers(1, 12, size=2))
    shape = (height, width) if channels == 1 else (height, width, channels)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def sample_fields(i: int) -> dict[str, Any]:
    """Sample ``i`` as written (image columns as pixel arrays: ``(H, W[, C])`` uint8).

    Example:
        >>> sample_fields(3)["id"], sorted(sample_fields(3)) == sorted(COLUMNS)
        (3, True)
    """
    rng = np.random.default_rng([SEED, i])
    ndim = 1 + i % 3
    shape = (300,) if i % 17 == 5 else tuple(int(n) for n in rng.integers(1, 5, size=ndim))
    text = "".join(rng.choice(list("aé€😀 \n\x00z"), size=int(rng.integers(0, 30))))
    return {
        "id": i,
        "big": (-1) ** i * (2**62 + i),
        "blob": rng.bytes(int(rng.integers(0, 50))),
        "text": text,
        **{f"s_{dtype}": _scalar(rng, dtype) for dtype in SCALARS},
        "str_int": (-1) ** i * (10**40 + i),  # beyond int64: why str_int exists
        "str_float": float(rng.standard_normal() * 10.0 ** int(rng.integers(-30, 30))),
        "str_decimal": Decimal(f"{i}.{int(rng.integers(0, 10**12)):012d}"),
        # sample 33 (uint8): a dimension past 65535, so MDS stores its shape as uint32
        "array": _array(
            rng, ARRAY_DTYPES[i % len(ARRAY_DTYPES)], (2, 66_000) if i == 33 else shape
        ),
        "array_f32": _array(rng, "float32", shape[::-1]),
        "array_fixed": _array(rng, "int16", (2, 3)),
        "meta": {"i": i, "tags": ["a", "é"][: i % 3], "x": i / 7, "none": None},
        "obj": (i, frozenset({i, -i}), complex(i, 1), Decimal(i)),
        "jpg": _pixels(rng, 3),
        "png": _pixels(rng, (1, 3, 4)[i % 3]),
        "raw": _pixels(rng, (1, 3, 4)[i % 3]),
        "jpgs": [_pixels(rng, 3) for _ in range(1 + i % 3)],
        "pngs": [_pixels(rng, 1) for _ in range(i % 3)],
    }


def _image(pixels: Any) -> Any:
    from PIL import Image

    return Image.fromarray(pixels)


def _jpeg_bytes(pixels: Any) -> bytes:
    from io import BytesIO

    out = BytesIO()
    _image(pixels).save(out, format="JPEG")
    return out.getvalue()


def as_written(i: int) -> dict[str, Any]:
    """Sample ``i`` as handed to ``MDSWriter.write``: images as PIL images (JPEG bytes)."""
    fields = sample_fields(i)
    for name in ("jpg", "png", "raw"):
        fields[name] = _image(fields[name])
    fields["jpgs"] = [_jpeg_bytes(p) for p in fields["jpgs"]]  # jpeg_array takes JPEG bytes
    fields["pngs"] = [_image(p) for p in fields["pngs"]]
    return fields


STUBBED: Final = (
    "torchvision",
    "torchvision.datasets",
    "torchvision.transforms",
    "torchvision.transforms.functional",
)


def import_streaming() -> Any:
    """``streaming``, imported with placeholders for the two torchvision names it imports.

    The trick of ``benchmarks/peers_mosaic.py``, always: the peers' venv may have no
    torchvision, or one built for another torch (whose import fails); MDS needs neither.
    """
    if "torchvision" not in sys.modules:
        modules = {name: types.ModuleType(name) for name in STUBBED}
        for name, module in modules.items():
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        import torch.utils.data

        vision = type("VisionDataset", (torch.utils.data.Dataset,), {})
        modules["torchvision.datasets"].VisionDataset = vision  # type: ignore[attr-defined]
        modules["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]
        sys.modules.update(modules)
    return importlib.import_module("streaming")


def main(out: Path) -> None:
    """Write every corpus under ``out`` and ``out / "corpora.json"``."""
    streaming = import_streaming()
    samples = [as_written(i) for i in range(SAMPLES)]
    written = {}
    for name, compression in COMPRESSIONS.items():
        hashes = ["sha1", "xxh64"] if name == "plain" else None
        with streaming.MDSWriter(
            out=str(out / name),
            columns=COLUMNS,
            compression=compression,
            hashes=hashes,
            size_limit=SIZE_LIMIT,
        ) as writer:
            for sample in samples:
                writer.write(sample)
        written[name] = compression
    version = importlib.metadata.version("mosaicml-streaming")
    info = {"streaming": version, "corpora": written, "samples": SAMPLES}
    (out / "corpora.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIRECTORY")
    main(Path(sys.argv[1]))
