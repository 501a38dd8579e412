"""A batch of packed samples as batch arrays, and its samples as views of them.

:class:`~lightning_resumable_data.documents.PackedDataset` reads a batch in one vectorised
pass: :func:`read_spans` copies the document pieces of every sample of the batch into one
array (the pieces' bytes joined, then cast once), and :func:`packed_rows` splits the flat
result into the per-sample dicts torch's fetcher expects (every array a view, no copy per
token), and keeps the batch arrays, so that
:func:`~lightning_resumable_data.documents.collate_packed` returns them without stacking.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import chain
from operator import is_
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from lightning_resumable_data.documents.corpus import DocumentCorpus

__all__ = ["PackedRows", "packed_rows", "read_spans"]

Sample = dict[str, NDArray[Any]]


class PackedRows(list[Sample]):
    """The samples of a batch (dicts of views), with the batch's arrays beside them.

    ``arrays`` holds each fixed-length key as one ``(batch, seq_len)`` array;
    ``cu_seqlens`` (or None) the boundaries of the flattened batch, ``max_seqlen`` its
    longest piece.
    """

    __slots__ = ("_samples", "_values", "arrays", "cu_seqlens", "max_seqlen")

    def __init__(
        self,
        samples: list[Sample],
        arrays: dict[str, NDArray[Any]],
        cu_seqlens: NDArray[np.int32] | None,
        max_seqlen: int,
    ) -> None:
        super().__init__(samples)
        self.arrays, self.cu_seqlens, self.max_seqlen = arrays, cu_seqlens, max_seqlen
        self._samples = samples
        self._values = list(chain.from_iterable(map(dict.values, samples)))

    def intact(self) -> bool:
        """Whether the samples are still the views it was built with (none replaced)."""
        if len(self) != len(self._samples) or not all(map(is_, self, self._samples)):
            return False
        values = list(chain.from_iterable(map(dict.values, self._samples)))  # ours, checked
        return len(values) == len(self._values) and all(map(is_, values, self._values))


@lru_cache(maxsize=8)
def _arange(size: int, dtype: np.dtype[Any]) -> NDArray[np.signedinteger[Any]]:
    """``np.arange(size, dtype=dtype)``, read-only and kept: the token places in a row."""
    places = np.arange(size, dtype=dtype)
    places.setflags(write=False)
    return places


def read_spans(
    corpus: DocumentCorpus,
    docs: NDArray[np.int64],
    begins: NDArray[np.int64],
    counts: NDArray[np.int64],
    past_end: NDArray[np.int64] | None,
    out: NDArray[np.int64],
) -> None:
    """:meth:`~.DocumentCorpus.read_pieces` into ``out``, except at ``past_end``.

    The output positions ``past_end`` (one past a document's last token) are left to the
    caller, who writes a separator there. A corpus of one array (in memory or memory
    mapped) is read by joining the bytes of its pieces (one memory-view slice each, no
    address per token) and casting them into ``out`` in one pass; any other by
    :meth:`~.DocumentCorpus.read_pieces`.

    Example:
        >>> from lightning_resumable_data.documents import DocumentCorpus
        >>> corpus = DocumentCorpus.from_arrays(np.arange(10), [0, 4, 10])
        >>> out = np.empty(4, dtype=np.int64)
        >>> read_spans(corpus, np.array([1, 0]), np.array([2, 0]), np.array([3, 1]), None, out)
        >>> out.tolist()
        [6, 7, 8, 0]
    """
    part = corpus.parts[0]
    if len(corpus.parts) == 1 and isinstance(part.tokens, np.ndarray) and docs.size:
        tokens, size = np.asarray(part.tokens), part.tokens.dtype.itemsize
        firsts = np.asarray(part.starts[docs], dtype=np.int64)
        if part.scale != 1:
            firsts //= part.scale
        firsts += begins
        firsts *= size  # in bytes: the pieces' bytes are joined, then cast once
        ends = firsts + counts * size
        if int(ends.max()) <= tokens.nbytes and tokens.flags.c_contiguous:  # else: below
            flat = memoryview(tokens).cast("B")  # type: ignore[arg-type]
            spans = map(flat.__getitem__, map(slice, firsts.tolist(), ends.tolist()))
            joined = np.frombuffer(b"".join(spans), dtype=tokens.dtype)
            np.copyto(out, joined, casting="unsafe")
            return
    out[:] = corpus.read_pieces(docs, begins, counts, past_end=past_end)


def packed_rows(
    tokens: NDArray[np.int64],
    ranges: NDArray[np.int64],
    counts: NDArray[np.int64],
    real: NDArray[np.int64] | None,
    seq_len: int,
    boundaries: str,
    heads: NDArray[np.int64] | None = None,
) -> PackedRows:
    """Split flat batch arrays into per-sample dicts (views) and keep the batch arrays.

    ``tokens``: the batch's tokens, row after row; ``ranges``/``counts``: the sample and
    the length of each piece (a document's part, or padding), in order; ``real``: each
    sample's tokens before padding.

    Example:
        >>> rows = packed_rows(np.arange(6), np.array([0, 0, 1]), np.array([1, 2, 3]),
        ...                    np.array([3, 3]), 3, "both")
        >>> rows[0]["cu_seqlens"].tolist(), rows[1]["position_ids"].tolist()
        ([0, 1, 3], [0, 1, 2])
        >>> rows.cu_seqlens.tolist(), rows.max_seqlen
        ([0, 1, 3, 6], 3)
    """
    rows = tokens.size // seq_len
    ids = tokens.reshape(rows, seq_len)
    if real is None:  # no padding: one fill
        mask = np.ones((rows, seq_len), dtype=np.bool_)
    else:
        mask = np.arange(seq_len) < real[:, None]
    if heads is None:
        heads = counts.cumsum() - counts  # piece starts in the flat batch
    arrays: dict[str, NDArray[Any]] = {"input_ids": ids, "loss_mask": mask}
    if boundaries != "cu_seqlens":  # a token's place in its row minus its piece's start
        small = np.min_scalar_type(-seq_len)  # int16 at seq_len 2049: a quarter the bytes
        starts = (heads - ranges * seq_len).astype(small).repeat(counts)
        positions = np.empty((rows, seq_len), dtype=np.int64)
        np.subtract(_arange(seq_len, small), starts.reshape(rows, seq_len), out=positions)
        arrays["position_ids"] = positions
    cu_seqlens = None
    per_row: list[NDArray[np.int32]] = []
    if boundaries != "position_ids":
        # each row's piece starts (relative to the row) then seq_len, one flat int32 array
        pieces = np.bincount(ranges, minlength=rows)
        ends = np.cumsum(pieces + 1)
        flat = np.empty(int(ends[-1]), dtype=np.int32)
        slot = np.arange(ranges.size) + ranges  # a piece's place: its index plus its row
        flat[slot] = heads - ranges * seq_len
        flat[ends - 1] = seq_len
        bounds = [0, *ends.tolist()]
        per_row = [flat[bounds[r] : bounds[r + 1]] for r in range(rows)]
        cu_seqlens = np.append(heads, rows * seq_len).astype(np.int32)
    keys, columns = list(arrays), [list(array) for array in arrays.values()]  # row views
    if per_row:
        keys.append("cu_seqlens")
        columns.append(per_row)
    return PackedRows(
        _dicts(keys, columns), arrays, cu_seqlens, int(counts.max()) if counts.size else 0
    )


def _dicts(keys: list[str], columns: list[list[NDArray[Any]]]) -> list[Sample]:
    """One dict per row of ``columns`` (a dict display: twice as fast as ``dict(zip())``)."""
    if len(keys) == 3:
        k0, k1, k2 = keys
        return [{k0: a, k1: b, k2: c} for a, b, c in zip(*columns, strict=True)]
    if len(keys) == 4:
        k0, k1, k2, k3 = keys
        return [{k0: a, k1: b, k2: c, k3: d} for a, b, c, d in zip(*columns, strict=True)]
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
