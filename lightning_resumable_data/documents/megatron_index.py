"""The ``.idx`` of a Megatron indexed dataset: its header, and the checks of its arrays.

The layout is in :mod:`~lightning_resumable_data.documents.megatron`. The checks run in
bounded vectorised passes (``CHECK_CHUNK`` sequences at a time) before any token is read;
each failure is a ``ValueError`` naming the file, the problem and the fix.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CHECK_CHUNK",
    "HEADER",
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "MEGATRON_VERSION",
    "bad_index",
    "check_pointers",
    "documents_are_identity",
    "documents_rise",
    "megatron_paths",
    "megatron_prefix",
    "read_header",
]

MEGATRON_MAGIC: Final = b"MMIDIDX\x00\x00"
MEGATRON_VERSION: Final = 1
MEGATRON_DTYPES: Final = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}
_FLOAT_CODES: Final = {6: "float64", 7: "float32"}
HEADER: Final = struct.Struct("<9sQBQQ")  # 34 bytes
CHECK_CHUNK: Final = 2**16  # sequences per pass of the checks


def megatron_prefix(prefix: str | os.PathLike[str]) -> str:
    """``prefix`` without a ``.idx`` or ``.bin`` suffix."""
    text = os.fspath(prefix)
    for suffix in (".idx", ".bin"):
        text = text.removesuffix(suffix)
    return text


def megatron_paths(prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The ``.idx`` and the ``.bin`` of ``prefix``."""
    text = megatron_prefix(prefix)
    return Path(text + ".idx"), Path(text + ".bin")


def bad_index(path: Path, problem: str, fix: str) -> ValueError:
    """The error of an invalid ``.idx``: the file, the problem and the fix."""
    return ValueError(f"{str(path)!r} is not a valid Megatron index: {problem}. {fix}")


def read_header(idx: Path) -> tuple[np.dtype[Any], int, int, int]:
    """Token dtype, sequences, document indices and header size, checked against the size."""
    size = idx.stat().st_size
    with idx.open("rb") as stream:
        raw = stream.read(HEADER.size)
    if len(raw) < HEADER.size:
        raise bad_index(idx, f"{size} bytes, shorter than the 34-byte header", "Re-copy the file.")
    magic, version, code, sequences, documents = HEADER.unpack(raw)
    if magic != MEGATRON_MAGIC:
        raise bad_index(
            idx,
            f"magic {magic!r}, expected {MEGATRON_MAGIC!r}",
            "Pass the prefix of a file written by Megatron's IndexedDatasetBuilder (the "
            "older 'TNTIDX' lazy/cached format is not supported: re-run preprocess_data.py).",
        )
    if version != MEGATRON_VERSION:
        raise bad_index(
            idx, f"version {version}, expected 1", "Rewrite it with a current Megatron."
        )
    if code not in MEGATRON_DTYPES:
        known = ", ".join(f"{c} ({n})" for c, n in MEGATRON_DTYPES.items())
        kind = f"{code} ({_FLOAT_CODES[code]}, not a token dtype)" if code in _FLOAT_CODES else code
        raise bad_index(idx, f"dtype code {kind}", f"Token dtype codes are {known}.")
    body = size - HEADER.size
    plain, multimodal = 12 * sequences + 8 * documents, 13 * sequences + 8 * documents
    if body not in (plain, multimodal):
        raise bad_index(
            idx,
            f"{size} bytes, but its header (N={sequences} sequences, M={documents} document "
            f"indices) needs {HEADER.size + plain} (or {HEADER.size + multimodal} with modes)",
            "The file is truncated or its header is corrupt: re-copy or rebuild it.",
        )
    return np.dtype(MEGATRON_DTYPES[code]), sequences, documents, HEADER.size


def check_pointers(
    idx: Path, lengths: NDArray[np.int32], pointers: NDArray[np.int64], itemsize: int, full: bool
) -> int:
    """Check the lengths (and all pointers if ``full``) in passes; return the ``.bin`` size."""
    total, count = 0, len(lengths)
    for begin in range(0, count, CHECK_CHUNK):  # bounded temporaries, not one per document
        sizes = lengths[begin : begin + CHECK_CHUNK].astype(np.int64) * itemsize
        if sizes.size and int(sizes.min()) < 0:
            raise bad_index(idx, "a negative sequence length", "Rebuild the index.")
        ends = total + np.cumsum(sizes)
        if full or begin == 0:
            starts = ends - sizes
            got = pointers[begin : begin + sizes.size] if full else pointers[:1]
            wrong = np.flatnonzero(got != starts[: got.size])
            if wrong.size:
                first = begin + int(wrong[0])
                raise bad_index(
                    idx,
                    f"sequence {first} points at byte {int(pointers[first])}, but the lengths "
                    f"before it end at byte {int(starts[wrong[0]])}",
                    "The index does not describe a contiguous .bin: rebuild it.",
                )
        total = int(ends[-1]) if sizes.size else total
    if count and int(pointers[-1]) != total - int(lengths[-1]) * itemsize:
        raise bad_index(
            idx,
            f"the last sequence points at byte {int(pointers[-1])}, but the lengths before it "
            f"end at byte {total - int(lengths[-1]) * itemsize}",
            "The index does not describe a contiguous .bin: rebuild it.",
        )
    return total


def documents_are_identity(documents: NDArray[np.int64]) -> bool:
    """Whether document ``i`` starts at sequence ``i`` (one sequence per document)."""
    return all(
        np.array_equal(
            documents[b : b + CHECK_CHUNK], np.arange(b, min(b + CHECK_CHUNK, len(documents)))
        )
        for b in range(0, len(documents), CHECK_CHUNK)
    )


def documents_rise(documents: NDArray[np.int64]) -> bool:
    """Whether the document indices never decrease."""
    return all(
        bool((np.diff(documents[b : b + CHECK_CHUNK + 1]) >= 0).all())
        for b in range(0, len(documents), CHECK_CHUNK)
    )
