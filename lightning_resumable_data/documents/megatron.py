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
The ``.idx`` checks are in :mod:`~lightning_resumable_data.documents.megatron_index`,
the writer in :mod:`~lightning_resumable_data.documents.megatron_writer`.

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
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.documents.corpus import CorpusPart, DocumentCorpus, TokenSource
from lightning_resumable_data.documents.files import CorpusFile
from lightning_resumable_data.documents.megatron_index import (
    MEGATRON_DTYPES,
    MEGATRON_MAGIC,
    MEGATRON_VERSION,
    bad_index,
    check_pointers,
    documents_are_identity,
    documents_rise,
    megatron_paths,
    megatron_prefix,
    read_header,
)
from lightning_resumable_data.documents.megatron_writer import write_megatron

if TYPE_CHECKING:
    from lightning_resumable_data.remote.cache import ShardCache
    from lightning_resumable_data.remote.chunks import ChunkedRemoteFile

__all__ = [
    "MEGATRON_DTYPES",
    "MEGATRON_MAGIC",
    "MEGATRON_VERSION",
    "open_megatron",
    "write_megatron",
]


def _files(
    text: str, cache: ShardCache | None, chunk_bytes: int | None
) -> tuple[Path, Path | ChunkedRemoteFile, str]:
    """The ``.idx`` and the ``.bin`` of a prefix, and its name for errors.

    At a URL, the ``.idx`` is downloaded whole and the ``.bin`` read by ranges (downloaded
    whole if ``chunk_bytes`` is ``None``).
    """
    if "://" not in text:
        idx, binary = megatron_paths(text)
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
    text = megatron_prefix(prefix)
    idx, binary, source = _files(text, cache, chunk_bytes)
    dtype, count, marks, offset = read_header(idx)
    view = np.memmap(idx, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(view, "<i4", count, offset)
    pointers = np.frombuffer(view, "<i8", count, offset + 4 * count)
    documents = np.frombuffer(view, "<i8", marks, offset + 12 * count)
    needed = check_pointers(idx, lengths, pointers, dtype.itemsize, verify_pointers)
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
        raise bad_index(
            idx,
            f"document indices must rise from 0 to N={count}",
            "Rebuild the index (each document's first sequence, then N).",
        )
    tokens = _tokens(binary, dtype) if needed else np.zeros(0, dtype)
    reopen = (partial(open_megatron, verify_pointers=verify_pointers), (str(idx),))
    if "://" in text:  # the URL again (with the same cache), not the cached .idx
        opener = partial(open_megatron, cache=cache, chunk_bytes=chunk_bytes)
        reopen = (partial(opener, verify_pointers=verify_pointers), (text,))
    shown = str(binary) if isinstance(binary, Path) else binary.name
    if marks == count + 1 and (not verify_pointers or documents_are_identity(documents)):
        part = CorpusPart(tokens, pointers, dtype.itemsize)  # one sequence per document
        files = [CorpusFile(shown, count, tokens_at_byte_0=True)]
        return DocumentCorpus([part], lengths, name=source, reopen=reopen, files=files)
    if not documents_rise(documents):
        raise bad_index(
            idx,
            f"document indices must not decrease from 0 to N={count}",
            "Rebuild the index (each document's first sequence, then N).",
        )
    ends = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    doc_lengths = ends[documents[1:]] - ends[documents[:-1]]
    part = CorpusPart(tokens, ends[documents[:-1]])
    files = [CorpusFile(shown, marks - 1, tokens_at_byte_0=True)]
    return DocumentCorpus([part], doc_lengths, name=source, reopen=reopen, files=files)
