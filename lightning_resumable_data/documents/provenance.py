"""Which documents a packed sample holds, and where their bytes are: no token is read.

A :class:`~lightning_resumable_data.documents.PackedDataset` sample is pieces of documents
(``"concat"``: the epoch's document order cut into ``seq_len`` tokens; ``"pad"``: one
document). :func:`sample_pieces` names them, in order, for any samples of any epoch: the
document id, its token range ``[start, stop)``, whether the separator follows, and the
file the tokens are in (the corpus's :class:`~.files.CorpusFile`: a Megatron ``.bin`` or
token shard with the byte offset and length of the piece, a Parquet or Arrow file with the
document's row). It asks the dataset's own index (:meth:`PackedDataset.pieces`), so it costs
what locating the samples costs, never a read. :func:`document_samples` is the inverse:
the samples (and token ranges) that hold document ``D`` in an epoch, from the inverse of
the epoch's document order and the index (O(``stride``) documents looked at, not the
corpus).

Example:
    >>> from lightning_resumable_data.documents import DocumentCorpus, PackedDataset
    >>> corpus = DocumentCorpus.from_arrays([1, 2, 3, 4, 5, 6], offsets=[0, 3, 4, 6])
    >>> packed = PackedDataset(corpus, seq_len=4, eos_id=0, shuffle_documents=False)
    >>> [(p.document, p.start, p.stop, p.eos) for p in sample_pieces(packed, [1], 0)[0]]
    [(1, 0, 1, True), (2, 0, 2, False)]
    >>> [(p.sample, p.start, p.stop) for p in document_samples(packed, 2, 0)]
    [(1, 0, 2)]
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.documents.files import file_rows
from lightning_resumable_data.documents.packed import PackedDataset

__all__ = ["Piece", "document_samples", "piece_arrays", "sample_pieces"]

Int64 = NDArray[np.int64]


class Piece(NamedTuple):
    """One piece of a document in a packed sample (a named tuple: a step has thousands).

    Attributes:
        sample: The packed sample (dataset index) the piece is in.
        document: The document id (its index in the corpus).
        start: First token of the document in the piece.
        stop: One past the last (``start == stop``: only the separator).
        eos: The separator token follows the piece in the sample.
        file: The file the document is in (``None``: the corpus names no file).
        row: The document's row in ``file`` (a Parquet/Arrow row; in a ``.bin``, its index).
        byte_offset: Where token ``start`` begins in ``file`` (``.bin``, token shards).
        byte_length: Bytes of tokens ``[start, stop)`` there.
    """

    sample: int
    document: int
    start: int
    stop: int
    eos: bool
    file: str | None = None
    row: int | None = None
    byte_offset: int | None = None
    byte_length: int | None = None


def _checked(dataset: PackedDataset, indices: Iterable[int]) -> Int64:
    wanted = np.array([int(i) for i in indices], dtype=np.int64)
    length = len(dataset)
    if wanted.size and (int(wanted.min()) < 0 or int(wanted.max()) >= length):
        bad = next(int(i) for i in wanted.tolist() if not 0 <= i < length)
        raise IndexError(f"sample {bad} is out of range for {length} packed samples.")
    return wanted


def piece_arrays(
    dataset: PackedDataset, indices: Iterable[int], epoch: int
) -> tuple[Int64, Int64, Int64, Int64, NDArray[np.bool_]]:
    """:func:`sample_pieces` as arrays ``(ranges, documents, starts, stops, eos)``.

    Piece ``k`` belongs to ``indices[ranges[k]]``; ``ranges`` is sorted.

    Raises:
        IndexError: A sample outside ``[0, len(dataset))``.
    """
    wanted = _checked(dataset, indices)
    lengths = dataset.corpus.lengths
    if dataset.mode == "pad":
        size = np.asarray(lengths[wanted], dtype=np.int64)
        stops = np.minimum(size, dataset.seq_len)
        eos = (stops < dataset.seq_len) & (dataset.eos_id is not None)
        return np.arange(wanted.size), wanted.copy(), np.zeros_like(wanted), stops, eos
    ranges, docs, begins, counts = dataset.pieces(wanted, epoch)
    real = np.minimum(counts, np.asarray(lengths[docs], dtype=np.int64) - begins)
    return ranges, docs, begins, begins + real, real < counts


def _pieces(
    dataset: PackedDataset,
    samples: Int64,
    docs: Int64,
    starts: Int64,
    stops: Int64,
    eos: NDArray[np.bool_],
) -> list[Piece]:
    """Pieces with the file, row and bytes of each (vectorised over the pieces)."""
    corpus, count = dataset.corpus, samples.size
    files, rows = corpus.files, np.full(count, -1, dtype=np.int64)
    offsets, sizes = np.full(count, -1, dtype=np.int64), np.full(count, -1, dtype=np.int64)
    which = np.full(count, -1, dtype=np.int64)
    if files and count:
        which, rows = file_rows(files, docs)
        bounds = np.cumsum([0, *(len(part.starts) for part in corpus.parts)], dtype=np.int64)
        parts = np.searchsorted(bounds, docs, side="right") - 1
        for number in np.unique(parts).tolist():  # the parts touched, not the pieces
            part, mask = corpus.parts[number], parts == number
            if len(files) != len(corpus.parts) or not files[number].tokens_at_byte_0:
                continue  # a row, no byte offset (Parquet, Arrow)
            first = np.asarray(part.starts[docs[mask] - bounds[number]], dtype=np.int64)
            size = np.dtype(part.tokens.dtype).itemsize
            offsets[mask] = (first // part.scale + starts[mask]) * size
            sizes[mask] = (stops[mask] - starts[mask]) * size
    paths = [f.path for f in files] + [None]  # which == -1: no file
    columns = (samples, docs, starts, stops, eos, which, rows, offsets, sizes)
    out = []
    for sample, doc, start, stop, end, number, row, at, size in zip(
        *(c.tolist() for c in columns), strict=True
    ):  # lists, not NumPy scalars: a piece costs a tuple, not nine conversions
        file = paths[number]
        where = (file, None if file is None else row)
        span = (None, None) if at < 0 else (at, size)
        out.append(Piece(sample, doc, start, stop, end, *where, *span))
    return out


def sample_pieces(dataset: PackedDataset, indices: Iterable[int], epoch: int) -> list[list[Piece]]:
    """The document pieces of each packed sample of ``epoch``, in order, and their files.

    ``"concat"`` builds the epoch's index on first use (one pass over the document lengths,
    kept by the dataset), then costs one vectorised locate of the samples; ``"pad"`` is one
    gather of lengths. No token is read.

    Raises:
        IndexError: A sample outside ``[0, len(dataset))``.
    """
    wanted = _checked(dataset, indices)
    ranges, docs, starts, stops, eos = piece_arrays(dataset, wanted, epoch)
    flat = _pieces(dataset, wanted[ranges], docs, starts, stops, eos)
    bounds = np.searchsorted(ranges, np.arange(wanted.size + 1)).tolist()
    return [flat[a:b] for a, b in pairwise(bounds)]


def _stream_offsets(dataset: PackedDataset, positions: Int64, epoch: int) -> Int64:
    """Where each position of ``epoch``'s document order begins in the epoch's stream."""
    stride, sep = dataset.stride, dataset.sep
    checkpoints = dataset.checkpoints(epoch)
    low = positions // stride * stride
    sizes = positions - low
    ranges = np.repeat(np.arange(positions.size, dtype=np.int64), sizes)
    heads = np.cumsum(sizes) - sizes
    before = np.arange(int(sizes.sum()), dtype=np.int64) - heads[ranges] + low[ranges]
    order = dataset._order(epoch)
    docs = before if order is None else order(before)
    tokens = np.asarray(dataset.corpus.lengths[docs], dtype=np.int64) + sep
    running = np.concatenate(([0], np.cumsum(tokens)))
    offsets: Int64 = checkpoints[positions // stride] + running[heads + sizes] - running[heads]
    return offsets


def document_samples(dataset: PackedDataset, document: int, epoch: int) -> list[Piece]:
    """The pieces of ``document`` in ``epoch``: each sample that holds it, in order.

    ``"concat"``: the document's position in the epoch's order (the order's inverse), its
    stream offset (the index entry before it plus at most ``stride - 1`` lengths) and the
    samples its tokens fall in; none if they fall in the epoch's tail (``tail_tokens``).
    ``"pad"``: sample ``document``.

    Raises:
        IndexError: ``document`` outside the corpus.
    """
    count = len(dataset.corpus)
    if not 0 <= document < count:
        raise IndexError(f"document {document} is out of range for {dataset.corpus.name!r} "
                         f"of {count} documents.")  # fmt: skip
    doc = np.array([document], dtype=np.int64)
    if dataset.mode == "pad":
        _, docs, starts, stops, eos = piece_arrays(dataset, doc, epoch)
        return _pieces(dataset, doc, docs, starts, stops, eos)
    begin = int(_stream_offsets(dataset, dataset.positions(doc, epoch), epoch)[0])
    size, seq_len = int(dataset.corpus.lengths[document]), dataset.seq_len
    end = begin + size + dataset.sep
    samples = np.arange(begin // seq_len, min((end - 1) // seq_len + 1, len(dataset)))
    lows = np.maximum(samples * seq_len, begin) - begin
    highs = np.minimum((samples + 1) * seq_len, end) - begin
    stops = np.minimum(highs, size)
    docs = np.full(samples.size, document, dtype=np.int64)
    return _pieces(dataset, samples.astype(np.int64), docs, lows, stops, highs > stops)
