"""Where every value of an MDS shard lies: the header and sample layout, checked, vectorised.

An MDS shard (Streaming's ``MDSWriter.encode_joint_shard``) is ``[samples: u32]
[offsets: (samples + 1) * u32] [config JSON] [sample 0] [sample 1] ...``, little-endian;
sample ``i`` is bytes ``[offsets[i], offsets[i + 1])`` of the file, and is ``[the sizes of
its variable-size columns: u32 each] [each column's value, in column order]``
(``MDSWriter.encode_sample``). :func:`column_bounds` finds every value with a few array
operations over all samples, and names the first sample that breaks the layout.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.formats._mds_encodings import Column
from lightning_resumable_data.formats._mds_index import decompress

__all__ = ["check_size", "column_bounds", "read_shard"]


def check_size(path: str, expected: int, shown: str | None = None) -> None:
    """``FileNotFoundError``/``ValueError`` unless the file ``path`` has ``expected`` bytes.

    Errors name the file ``shown`` (its URL, for a cached copy), else ``path``.
    """
    shown = path if shown is None else shown
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise FileNotFoundError(
            f"MDS shard file {shown!r} does not exist, but its index lists it. Restore it, or "
            "rewrite the dataset with MDSWriter."
        ) from None
    if size != expected:
        raise ValueError(
            f"MDS shard file {shown!r} has {size} bytes, but its index says {expected}: it was "
            "truncated or rewritten after the index. Restore it or rewrite the dataset."
        )


def read_shard(
    path: str, compression: str | None, raw_bytes: int, preload: bool, shown: str | None = None
) -> NDArray[np.uint8]:
    """The uncompressed bytes of the shard file ``path``: decompressed, read or mapped.

    Errors name the file ``shown`` (its URL, for a cached copy), else ``path``.
    """
    if compression is not None:
        shown = path if shown is None else shown
        raw = decompress(compression, Path(path).read_bytes(), shown)
        if len(raw) != raw_bytes:
            raise ValueError(
                f"MDS shard file {shown!r} decompresses to {len(raw)} bytes, but its index "
                f"says {raw_bytes}: the file is corrupt; restore it."
            )
        return np.frombuffer(raw, np.uint8)
    if preload:
        return np.fromfile(path, np.uint8)
    mapped: NDArray[np.uint8] = np.memmap(path, np.uint8, "r").view(np.ndarray)
    return mapped


def _corrupt(path: str, problem: str) -> ValueError:
    return ValueError(
        f"MDS shard {path!r} is corrupt: {problem}. Restore the file, or rewrite the dataset "
        "with MDSWriter."
    )


def column_bounds(
    data: NDArray[np.uint8], samples: int, columns: Sequence[Column], path: str
) -> NDArray[np.int64]:
    """Where each value of each sample lies: ``(samples, len(columns) + 1)`` byte bounds.

    Value ``c`` of sample ``i`` is ``data[b[i, c]:b[i, c + 1]]``. A broken layout raises a
    ``ValueError`` naming the shard and the first sample that breaks it.

    Example:
        >>> from lightning_resumable_data.formats._mds_encodings import mds_column
        >>> columns = [mds_column("s", "str"), mds_column("x", "uint8")]
        >>> sample = np.array([2], "<u4").tobytes() + b"hi" + bytes([7])  # sizes, then values
        >>> shard = np.array([1, 12, 12 + len(sample)], "<u4").tobytes() + sample
        >>> column_bounds(np.frombuffer(shard, np.uint8), 1, columns, "s.mds").tolist()
        [[16, 18, 19]]
    """
    header = 4 * (samples + 2)  # the count, then samples + 1 offsets
    if data.size < header:
        raise _corrupt(
            path, f"it holds {data.size} bytes, fewer than the {header}-byte header of "
            f"{samples} samples its index lists",
        )  # fmt: skip
    count = int(np.frombuffer(data, "<u4", 1)[0])
    if count != samples:
        raise _corrupt(path, f"its header counts {count} samples, its index {samples}")
    offsets = np.frombuffer(data, "<u4", samples + 1, 4).astype(np.int64)
    lengths = np.diff(offsets)
    if offsets[0] < header:
        raise _corrupt(path, f"sample 0 starts at byte {offsets[0]}, inside the header")
    if samples and lengths.min() < 0:
        first = int(np.flatnonzero(lengths < 0)[0])
        raise _corrupt(
            path, f"sample {first} ends at byte {offsets[first + 1]}, before it starts at "
            f"byte {offsets[first]} (its offsets are out of order)",
        )  # fmt: skip
    if offsets[-1] != data.size:
        raise _corrupt(
            path, f"its last sample ({samples - 1}) ends at byte {offsets[-1]}, but the shard "
            f"holds {data.size} bytes",
        )  # fmt: skip
    variable = [c for c, column in enumerate(columns) if column.size is None]
    head = 4 * len(variable)  # each sample begins with its variable-size columns' sizes
    short = np.flatnonzero(lengths < head)
    if short.size:
        raise _corrupt(
            path, f"sample {short[0]} holds {lengths[short[0]]} bytes, fewer than the {head} "
            f"bytes of its {len(variable)} column sizes",
        )  # fmt: skip
    sizes = np.empty((samples, len(columns)), np.int64)
    for c, column in enumerate(columns):
        if column.size is not None:
            sizes[:, c] = column.size
    if variable:  # one gather of every sample's size header
        at = offsets[:-1, None] + np.arange(head)
        sizes[:, variable] = np.ascontiguousarray(data[at]).view("<u4").astype(np.int64)
    ends = np.cumsum(sizes, axis=1) + (offsets[:-1] + head)[:, None]
    wrong = np.flatnonzero(ends[:, -1] != offsets[1:]) if len(columns) else np.array([], int)
    if wrong.size:
        first = int(wrong[0])
        named = ", ".join(f"{columns[c].name}={sizes[first, c]}" for c in range(len(columns)))
        raise _corrupt(
            path, f"sample {first} holds {lengths[first]} bytes, but its column sizes "
            f"({named}) and their {head}-byte header add up to {head + sizes[first].sum()}",
        )  # fmt: skip
    bounds = np.empty((samples, len(columns) + 1), np.int64)
    bounds[:, 0] = offsets[:-1] + head
    bounds[:, 1:] = ends
    return bounds
