"""Write documents as a Megatron indexed dataset (``.bin`` + ``.idx``), one sequence each."""

from __future__ import annotations

import os
from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from lightning_resumable_data.documents.megatron_index import (
    HEADER,
    MEGATRON_DTYPES,
    MEGATRON_MAGIC,
    megatron_paths,
)

__all__ = ["write_megatron"]


def write_megatron(
    prefix: str | os.PathLike[str],
    documents: Iterable[ArrayLike],
    *,
    dtype: DTypeLike = np.uint16,
) -> None:
    """Write documents as a Megatron indexed dataset, one sequence per document.

    The ``.bin`` is streamed (one document in memory at a time); the ``.idx`` is written
    last, so a crash leaves no index. Readable by Megatron-LM, GPT-NeoX and NeMo.

    Raises:
        ValueError: A token that does not fit ``dtype``, an empty document, or none.
        TypeError: ``dtype`` has no Megatron code, or a document is not integers.

    Example:
        >>> import tempfile, os
        >>> prefix = os.path.join(tempfile.mkdtemp(), "c")
        >>> write_megatron(prefix, [[70000]], dtype=np.uint16)
        Traceback (most recent call last):
        ...
        ValueError: document 0 holds token ids in [70000, 70000], outside uint16 ...
    """
    np_dtype = np.dtype(dtype)
    codes = {name: code for code, name in MEGATRON_DTYPES.items()}
    if np_dtype.name not in codes:
        raise TypeError(f"dtype={np_dtype} has no Megatron code; use one of {sorted(codes)}.")
    idx, binary = megatron_paths(prefix)
    idx.parent.mkdir(parents=True, exist_ok=True)
    info, lengths = np.iinfo(np_dtype), []
    with binary.open("wb") as out:
        for number, document in enumerate(documents):
            array = np.asarray(document)
            if array.ndim != 1 or array.size == 0:
                raise ValueError(f"document {number} has shape {array.shape}; expected 1-D, >= 1.")
            if not np.issubdtype(array.dtype, np.integer):
                raise TypeError(f"document {number} has dtype {array.dtype}; expected integers.")
            low, high = int(array.min()), int(array.max())
            if low < info.min or high > info.max:
                raise ValueError(
                    f"document {number} holds token ids in [{low}, {high}], outside {np_dtype} "
                    f"[{info.min}, {info.max}]; pass a wider dtype (e.g. dtype=np.int32)."
                )
            out.write(array.astype(np_dtype).tobytes())
            lengths.append(array.size)
    if not lengths:
        raise ValueError("no documents were given; a Megatron dataset needs at least one.")
    sizes = np.asarray(lengths, dtype=np.int64)
    pointers = (np.cumsum(sizes) - sizes) * np_dtype.itemsize
    temporary = idx.with_suffix(".idx.tmp")
    with temporary.open("wb") as out:
        out.write(HEADER.pack(MEGATRON_MAGIC, 1, codes[np_dtype.name], sizes.size, sizes.size + 1))
        out.write(sizes.astype(np.int32).tobytes())
        out.write(pointers.tobytes())
        out.write(np.arange(sizes.size + 1, dtype=np.int64).tobytes())
    temporary.replace(idx)
