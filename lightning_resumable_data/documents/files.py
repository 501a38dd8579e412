"""Which file holds which documents of a corpus: what provenance names as a piece's bytes.

The readers record, as they open a corpus, the files its documents come from, in document
order: a Megatron ``.bin``, each Parquet or Arrow file, each token shard. A file whose tokens
are mapped from its first byte (``.bin``, token shards: ``tokens_at_byte_0``) can name the
byte offset of any token; a Parquet or Arrow file names the document's row.

Example:
    >>> files = (CorpusFile("a.parquet", 2), CorpusFile("b.parquet", 3))
    >>> which, rows = file_rows(files, np.array([1, 4]))
    >>> [(files[f].path, row) for f, row in zip(which.tolist(), rows.tolist())]
    [('a.parquet', 1), ('b.parquet', 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["CorpusFile", "file_rows"]


@dataclass(frozen=True)
class CorpusFile:
    """One file of a corpus.

    Attributes:
        path: The file's path (or URL, with credentials redacted).
        documents: How many documents (rows) it holds, the next ones in document order.
        tokens_at_byte_0: Its tokens are the file's bytes from offset 0 (a Megatron ``.bin``,
            a token shard): a token's byte offset is its position times the token size.
    """

    path: str
    documents: int
    tokens_at_byte_0: bool = False


def file_rows(
    files: Sequence[CorpusFile], docs: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The file of each document (an index into ``files``) and its row in that file."""
    bounds = np.cumsum([0, *(f.documents for f in files)], dtype=np.int64)
    which = np.searchsorted(bounds, docs, side="right") - 1
    return which, docs - bounds[which]
