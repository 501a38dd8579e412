r"""Megatron indexed datasets (``.bin`` + ``.idx``), read natively with ``numpy.memmap``.

The layout is the one Megatron-LM's ``IndexedDatasetBuilder`` (``preprocess_data.py``)
writes, also read by GPT-NeoX and NeMo. ``prefix.idx`` is, little-endian::

    magic    9 bytes   b"MMIDIDX\x00\x00"
    version  uint64    1
    dtype    uint8     token dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
                       8 uint16; 6 and 7 are floats and are refused)
    N        uint64    sequences
    M        uint64    document indices (documents + 1)
    lengths  int32[N]  tokens per sequence
    pointers int64[N]  byte offset of each sequence in prefix.bin
    docs     int64[M]  sequence index where each document starts, then N
    (modes   int8[N]   only in multimodal files)

``prefix.bin`` is the tokens, back to back. A document is its sequences concatenated
(one sequence per document unless ``--split-sentences`` was used). Opening checks the
layout (header, sizes, total, first and last pointers, document indices; every pointer
with ``verify_pointers=True``) in bounded vectorised passes before any token is read, and
every read is bounds-checked, so nothing is ever read past the end of either file. No
Megatron import. At a URL, the ``.idx`` is downloaded whole and the ``.bin`` read by byte
ranges through the cache (:mod:`~lightning_resumable_data.remote.chunks`).

Example:
    >>> import tempfile, os
    >>> prefix = os.path.join(tempfile.mkdtemp(), "corpus")
    >>> write_megatron(prefix, [[1, 2, 3], [4, 5]])
    >>> corpus = open_megatron(prefix)
    >>> len(corpus), corpus.document(1).tolist()
    (2, [4, 5])
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

from lightning_resumable_data.documents.corpus import CorpusPart, DocumentCorpus, TokenSource

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache
    from lightning_resumable_data.remote.chunks import ChunkedRemoteFile

__all__ = ["MEGATRON_DTYPES", "MEGATRON_MAGIC", "open_megatron", "write_megatron"]

MEGATRON_MAGIC: Final = b"MMIDIDX\x00\x00"
MEGATRON_VERSION: Final = 1
MEGATRON_DTYPES: Final = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}
_FLOAT_CODES: Final = {6: "float64", 7: "float32"}
_HEADER: Final = struct.Struct("<9sQBQQ")  # 34 bytes
_CHECK_CHUNK: Final = 2**16  # sequences per pass of the checks


def _prefix(prefix: str | os.PathLike[str]) -> str:
    text = os.fspath(prefix)
    for suffix in (".idx", ".bin"):
        text = text.removesuffix(suffix)
    return text


def _paths(prefix: str | os.PathLike[str]) -> tuple[Path, Path]:
    text = _prefix(prefix)
    return Path(text + ".idx"), Path(text + ".bin")


def _files(
    text: str, cache: ShardCache | None, chunk_bytes: int | None
) -> tuple[Path, Path | ChunkedRemoteFile, str]:
    """The ``.idx`` and the ``.bin`` of a prefix, and its name for errors.

    At a URL, the ``.idx`` is downloaded whole and the ``.bin`` read by ranges (downloaded
    whole if ``chunk_bytes`` is ``None``).
    """
    if "://" not in text:
        idx, binary = _paths(text)
        for path in (idx, binary):
            if not path.exists():
                raise FileNotFoundError(
                    f"{str(path)!r} does not exist; a Megatron dataset is a prefix with both "
                    f"{idx.name!r} and {binary.name!r}. Check the prefix."
                )
        return idx, binary, str(idx)
    from lightning_resumable_data.remote import default_cache, local_path, redact
    from lightning_resumable_data.remote.chunks import ChunkedRemoteFile

    cache = cache or default_cache()
    idx = local_path(text + ".idx", cache)
    if chunk_bytes is None:
        return idx, local_path(text + ".bin", cache), redact(text + ".idx")
    return idx, ChunkedRemoteFile(text + ".bin", cache, chunk_bytes=chunk_bytes), redact(text)


def _tokens(binary: Path | ChunkedRemoteFile, dtype: np.dtype[Any]) -> NDArray[Any] | TokenSource:
    if isinstance(binary, Path):
        return np.memmap(binary, dtype=dtype, mode="r")
    from lightning_resumable_data.remote.chunks import RemoteTokens

    return RemoteTokens(binary, dtype)


def _bad(path: Path, problem: str, fix: str) -> ValueError:
    return ValueError(f"{str(path)!r} is not a valid Megatron index: {problem}. {fix}")


def _header(idx: Path) -> tuple[np.dtype[Any], int, int, int]:
    size = idx.stat().st_size
    with idx.open("rb") as stream:
        raw = stream.read(_HEADER.size)
    if len(raw) < _HEADER.size:
        raise _bad(idx, f"{size} bytes, shorter than the 34-byte header", "Re-copy the file.")
    magic, version, code, sequences, documents = _HEADER.unpack(raw)
    if magic != MEGATRON_MAGIC:
        raise _bad(
            idx,
            f"magic {magic!r}, expected {MEGATRON_MAGIC!r}",
            "Pass the prefix of a file written by Megatron's IndexedDatasetBuilder (the "
            "older 'TNTIDX' lazy/cached format is not supported: re-run preprocess_data.py).",
        )
    if version != MEGATRON_VERSION:
        raise _bad(idx, f"version {version}, expected 1", "Rewrite it with a current Megatron.")
    if code not in MEGATRON_DTYPES:
        known = ", ".join(f"{c} ({n})" for c, n in MEGATRON_DTYPES.items())
        kind = f"{code} ({_FLOAT_CODES[code]}, not a token dtype)" if code in _FLOAT_CODES else code
        raise _bad(idx, f"dtype code {kind}", f"Token dtype codes are {known}.")
    body = size - _HEADER.size
    plain, multimodal = 12 * sequences + 8 * documents, 13 * sequences + 8 * documents
    if body not in (plain, multimodal):
        raise _bad(
            idx,
            f"{size} bytes, but its header (N={sequences} sequences, M={documents} document "
            f"indices) needs {_HEADER.size + plain} (or {_HEADER.size + multimodal} with modes)",
            "The file is truncated or its header is corrupt: re-copy or rebuild it.",
        )
    return np.dtype(MEGATRON_DTYPES[code]), sequences, documents, _HEADER.size


def _check_pointers(
    idx: Path, lengths: NDArray[np.int32], pointers: NDArray[np.int64], itemsize: int, full: bool
) -> int:
    """Check the lengths (and all pointers if ``full``) in passes; return the ``.bin`` size."""
    total, count = 0, len(lengths)
    for begin in range(0, count, _CHECK_CHUNK):  # bounded temporaries, not one per document
        sizes = lengths[begin : begin + _CHECK_CHUNK].astype(np.int64) * itemsize
        if sizes.size and int(sizes.min()) < 0:
            raise _bad(idx, "a negative sequence length", "Rebuild the index.")
        ends = total + np.cumsum(sizes)
        if full or begin == 0:
            starts = ends - sizes
            got = pointers[begin : begin + sizes.size] if full else pointers[:1]
            wrong = np.flatnonzero(got != starts[: got.size])
            if wrong.size:
                first = begin + int(wrong[0])
                raise _bad(
                    idx,
                    f"sequence {first} points at byte {int(pointers[first])}, but the lengths "
                    f"before it end at byte {int(starts[wrong[0]])}",
                    "The index does not describe a contiguous .bin: rebuild it.",
                )
        total = int(ends[-1]) if sizes.size else total
    if count and int(pointers[-1]) != total - int(lengths[-1]) * itemsize:
        raise _bad(
            idx,
            f"the last sequence points at byte {int(pointers[-1])}, but the lengths before it "
            f"end at byte {total - int(lengths[-1]) * itemsize}",
            "The index does not describe a contiguous .bin: rebuild it.",
        )
    return total


def _is_identity(documents: NDArray[np.int64]) -> bool:
    return all(
        np.array_equal(
            documents[b : b + _CHECK_CHUNK], np.arange(b, min(b + _CHECK_CHUNK, len(documents)))
        )
        for b in range(0, len(documents), _CHECK_CHUNK)
    )


def _rises(documents: NDArray[np.int64]) -> bool:
    return all(
        bool((np.diff(documents[b : b + _CHECK_CHUNK + 1]) >= 0).all())
        for b in range(0, len(documents), _CHECK_CHUNK)
    )


def open_megatron(
    prefix: str | os.PathLike[str],
    *,
    verify_pointers: bool = False,
    cache: ShardCache | None = None,
    chunk_bytes: int | None = 16 << 20,
) -> DocumentCorpus:
    """Open ``prefix.idx`` and ``prefix.bin`` as a :class:`DocumentCorpus`, reading no token.

    A URL prefix (``s3://bucket/corpus_text_document``) downloads the ``.idx`` whole into
    ``cache`` and reads the ``.bin`` by ranges, in cached chunks of ``chunk_bytes``
    (:mod:`~lightning_resumable_data.remote.chunks`): the cache may be smaller than the file.

    Args:
        prefix: The path or URL without ``.idx``/``.bin`` (either suffix works too).
        verify_pointers: Check every sequence pointer against the lengths (reads all of the
            ``.idx``: 12 bytes per sequence). By default the first and last pointers and the
            total size are checked; every read is bounds-checked either way.
        cache: Where a URL's files are cached (``remote.default_cache()`` if ``None``).
        chunk_bytes: Bytes per ranged read of a remote ``.bin`` (a multiple of 8); ``None``
            downloads it whole and maps it (for a corpus the cache holds whole).

    Returns:
        The documents. With one sequence per document (``M = N + 1`` document indices, the
        ``preprocess_data.py`` default) the document indices are not read (Megatron's
        ``GPTDataset`` packs sequences too) and the lengths and pointers stay memory maps
        of the ``.idx``; otherwise (``--split-sentences``) a document is its sequences,
        and document lengths and starts are computed (16 bytes per document).

    Raises:
        FileNotFoundError: Either file is missing.
        ValueError: A wrong magic, version or dtype code; a truncated ``.idx``; pointers or
            document indices that disagree with the lengths; a ``.bin`` whose size is not
            what the ``.idx`` says; an empty document.

    Example:
        >>> import tempfile, os
        >>> prefix = os.path.join(tempfile.mkdtemp(), "c")
        >>> write_megatron(prefix, [[7, 8]], dtype=np.int32)
        >>> open_megatron(prefix + ".bin").document(0).dtype
        dtype('int32')
    """
    text = _prefix(prefix)
    idx, binary, source = _files(text, cache, chunk_bytes)
    dtype, count, marks, offset = _header(idx)
    view = np.memmap(idx, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(view, "<i4", count, offset)
    pointers = np.frombuffer(view, "<i8", count, offset + 4 * count)
    documents = np.frombuffer(view, "<i8", marks, offset + 12 * count)
    needed = _check_pointers(idx, lengths, pointers, dtype.itemsize, verify_pointers)
    actual = binary.stat().st_size if isinstance(binary, Path) else binary.size
    if actual != needed:
        what = "truncated" if actual < needed else "longer than its index"
        shown = str(binary) if isinstance(binary, Path) else binary.name
        raise ValueError(
            f"{shown!r} has {actual} bytes, but {idx.name!r} describes {needed} "
            f"({count} sequences of {dtype}): the .bin is {what}, or the pair comes from two "
            "different runs. Re-copy both files of the prefix together."
        )
    if marks < 1 or documents[0] != 0 or documents[-1] != count:
        raise _bad(
            idx,
            f"document indices must rise from 0 to N={count}",
            "Rebuild the index (each document's first sequence, then N).",
        )
    tokens = _tokens(binary, dtype) if needed else np.zeros(0, dtype)
    reopen = (partial(open_megatron, verify_pointers=verify_pointers), (str(idx),))
    if "://" in text:  # the URL again (with the same cache), not the cached .idx
        opener = partial(open_megatron, cache=cache, chunk_bytes=chunk_bytes)
        reopen = (partial(opener, verify_pointers=verify_pointers), (text,))
    if marks == count + 1 and (not verify_pointers or _is_identity(documents)):
        part = CorpusPart(tokens, pointers, dtype.itemsize)  # one sequence per document
        return DocumentCorpus([part], lengths, name=source, reopen=reopen)
    if not _rises(documents):
        raise _bad(
            idx,
            f"document indices must not decrease from 0 to N={count}",
            "Rebuild the index (each document's first sequence, then N).",
        )
    ends = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    doc_lengths = ends[documents[1:]] - ends[documents[:-1]]
    part = CorpusPart(tokens, ends[documents[:-1]])
    return DocumentCorpus([part], doc_lengths, name=source, reopen=reopen)


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
    idx, binary = _paths(prefix)
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
        out.write(_HEADER.pack(MEGATRON_MAGIC, 1, codes[np_dtype.name], sizes.size, sizes.size + 1))
        out.write(sizes.astype(np.int32).tobytes())
        out.write(pointers.tobytes())
        out.write(np.arange(sizes.size + 1, dtype=np.int64).tobytes())
    temporary.replace(idx)
