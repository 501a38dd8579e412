"""Token shards of ``write_token_shards`` (this package's own format) as a document corpus.

Token shards keep no document boundaries: they are one stream cut into fixed-length
samples. With ``eos_id`` the boundaries are recovered from the end-of-document tokens the
writer was given (one vectorised scan per shard at open: the EOS tokens are dropped, since
the packer adds its own separator); a document that the writer split across two shard
files comes back as two documents, and an EOS that opens a shard ends the document before.
Without ``eos_id`` every stored sample is a document.

Example:
    >>> import tempfile
    >>> from lightning_resumable_data.shards import write_token_shards
    >>> directory = tempfile.mkdtemp()
    >>> _ = write_token_shards(directory, [[5, 6, 0], [7, 0]], seq_len=5)
    >>> corpus = open_token_shard_documents(directory, eos_id=0)
    >>> [corpus.document(i).tolist() for i in range(len(corpus))]
    [[5, 6], [7]]
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lightning_resumable_data.documents.corpus import CorpusPart, DocumentCorpus
from lightning_resumable_data.documents.files import CorpusFile
from lightning_resumable_data.shards.tokens import read_token_index

__all__ = ["open_token_shard_documents"]


def open_token_shard_documents(
    directory: str | os.PathLike[str], *, eos_id: int | None = None
) -> DocumentCorpus:
    """Open a ``write_token_shards`` directory as documents (memory-mapped shards).

    Args:
        directory: The directory with ``index.json``.
        eos_id: The end-of-document token the stream was written with; ``None`` makes each
            stored fixed-length sample one document.

    Raises:
        FileNotFoundError: No ``index.json`` or a listed shard is missing.
        ValueError: A shard's size disagrees with the index; empty documents (two EOS
            tokens in a row).

    Example:
        >>> import tempfile
        >>> from lightning_resumable_data.shards import write_token_shards
        >>> directory = tempfile.mkdtemp()
        >>> _ = write_token_shards(directory, [range(6)], seq_len=3)
        >>> open_token_shard_documents(directory).lengths.tolist()
        [3, 3]
    """
    root = Path(directory)
    index = read_token_index(root)
    parts, lengths, files = [], [], []
    for file, size in zip(index.files, index.shard_bytes, strict=True):
        path = root / file
        if not path.exists() or path.stat().st_size != size:
            actual = path.stat().st_size if path.exists() else "no"
            raise ValueError(
                f"token shard {str(path)!r} has {actual} bytes, but index.json says {size}: "
                "restore it or rewrite the directory with write_token_shards."
            )
        tokens = np.memmap(path, dtype=index.dtype, mode="r")
        if eos_id is None:
            starts = np.arange(0, tokens.size, index.seq_len, dtype=np.int64)
            ends = starts + index.seq_len
        else:
            marks = np.flatnonzero(tokens == eos_id)
            starts = np.concatenate(([0], marks + 1))
            ends = np.concatenate((marks, [tokens.size]))
            keep = np.ones(starts.size, dtype=bool)
            keep[-1] = ends[-1] > starts[-1]  # the shard ends with EOS: no trailing document
            keep[0] &= ends[0] > starts[0]  # it starts with the EOS of the shard before
            starts, ends = starts[keep], ends[keep]
        parts.append(CorpusPart(tokens, starts))
        lengths.append(ends - starts)
        files.append(CorpusFile(str(path), starts.size, tokens_at_byte_0=True))
    return DocumentCorpus(parts, np.concatenate(lengths), name=str(root), files=files)
