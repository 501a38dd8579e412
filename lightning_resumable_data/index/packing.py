"""Packing documents into fixed-length samples by random access: the pure index math.

An epoch's *stream* is every document in the epoch's order (a keyed permutation of the
documents, :func:`~lightning_resumable_data.index.permutation.feistel_permute`), each
followed by ``sep`` separator tokens (1 for an EOS token, 0 for none). Sample ``i`` is
stream tokens ``[i * seq_len, (i + 1) * seq_len)``; the last ``total % seq_len`` tokens of
the stream (the *tail*) belong to no sample that epoch. The number of samples,
``total // seq_len``, does not depend on the epoch, so a sampler sees a fixed length.

The index of an epoch is one ``int64`` per ``stride`` documents: the stream offset at
every ``stride``-th position of the order (``checkpoints``). It costs ``8 / stride`` bytes
per document (0.125 at the default 64) and nothing per sample. Sample ``i`` is found by a
binary search in the checkpoints and one vectorised pass over the ``stride``-document
blocks it touches (:func:`locate`): no sample before ``i`` is looked at, so a resume is
O(1) once the epoch's checkpoints are built (one streaming pass over the document lengths).

Example:
    >>> lengths = np.array([3, 1, 2])
    >>> checkpoints = build_checkpoints(lengths, sep=1, order=None, stride=2)
    >>> checkpoints.tolist()  # stream offsets of positions 0, 2 and the end
    [0, 6, 9]
    >>> docs, begins, counts = locate(checkpoints, lengths, 1, None, 2, start=4, stop=8)
    >>> docs.tolist(), begins.tolist(), counts.tolist()
    ([1, 2], [0, 0], [2, 2])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DEFAULT_STRIDE",
    "Order",
    "build_checkpoints",
    "locate",
    "locate_many",
    "piece_offsets",
]

DEFAULT_STRIDE: Final = 32  # documents per checkpoint: 8 / 32 = 0.25 bytes per document
_BUILD_CHUNK: Final = 2**16  # documents per pass of the build: ~3 MiB of temporaries

Order = Callable[[NDArray[np.int64]], NDArray[np.int64]]
"""Maps positions of the epoch's order to document ids (``None``: the identity)."""


def _documents(order: Order | None, positions: NDArray[np.int64]) -> NDArray[np.int64]:
    return positions if order is None else order(positions)


def build_checkpoints(
    lengths: NDArray[np.integer[Any]],
    sep: int,
    order: Order | None,
    stride: int = DEFAULT_STRIDE,
) -> NDArray[np.int64]:
    """Stream offsets at positions ``0, stride, 2 * stride, ...`` of the order, and the total.

    Args:
        lengths: Tokens per document, shape ``(D,)`` (may be a memory map).
        sep: Separator tokens after each document (0 or 1).
        order: Positions to document ids for this epoch; ``None`` keeps file order.
        stride: Documents per checkpoint.

    Returns:
        ``int64`` array of shape ``(ceil(D / stride) + 1,)``; the last entry is the stream
        length. Built in passes of ``2**16`` documents: temporaries are a few MiB, whatever ``D``.

    Example:
        >>> build_checkpoints(np.array([2, 2, 2]), sep=0, order=None, stride=2).tolist()
        [0, 4, 6]
    """
    count = len(lengths)
    blocks = -(-count // stride)
    sums = np.zeros(blocks + 1, dtype=np.int64)
    chunk = max(stride, _BUILD_CHUNK // stride * stride)
    for begin in range(0, count, chunk):  # one pass per 2**16 documents, not per document
        stop = min(count, begin + chunk)
        docs = _documents(order, np.arange(begin, stop, dtype=np.int64))
        sizes = np.asarray(lengths[docs], dtype=np.int64) + sep
        padded = np.zeros(-(-sizes.size // stride) * stride, dtype=np.int64)
        padded[: sizes.size] = sizes
        first = begin // stride
        sums[first + 1 : first + 1 + padded.size // stride] = padded.reshape(-1, stride).sum(1)
    checkpoints: NDArray[np.int64] = np.cumsum(sums)
    return checkpoints


def locate(
    checkpoints: NDArray[np.int64],
    lengths: NDArray[np.integer[Any]],
    sep: int,
    order: Order | None,
    stride: int,
    start: int,
    stop: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The pieces of documents that make stream range ``[start, stop)``, in stream order.

    Returns:
        ``(docs, begins, counts)``: piece ``k`` is ``counts[k]`` tokens of document
        ``docs[k]`` from offset ``begins[k]``. Offset ``lengths[doc]`` (one past the last
        token) is the separator.

    Raises:
        IndexError: The range is empty or outside the stream.

    Example:
        >>> checkpoints = build_checkpoints(np.array([4]), 1, None, 64)
        >>> [a.tolist() for a in locate(checkpoints, np.array([4]), 1, None, 64, 2, 5)]
        [[0], [2], [3]]
    """
    if not start < stop:
        raise IndexError(f"stream range [{start}, {stop}) is empty.")
    starts = np.array([start], dtype=np.int64)
    _, docs, begins, counts = locate_many(
        checkpoints, lengths, sep, order, stride, starts, stop - start
    )
    return docs, begins, counts


def locate_many(
    checkpoints: NDArray[np.int64],
    lengths: NDArray[np.integer[Any]],
    sep: int,
    order: Order | None,
    stride: int,
    starts: NDArray[np.int64],
    width: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """:func:`locate` for many ranges ``[starts[k], starts[k] + width)`` in one pass.

    One permutation call and one gather of lengths for all ranges together (a batch of
    samples costs about what one does), no loop per range or document.

    Returns:
        ``(ranges, docs, begins, counts)``: the pieces of every range, range by range, and
        the range each piece belongs to.

    Raises:
        IndexError: A range is outside the stream.

    Example:
        >>> checkpoints = build_checkpoints(np.array([3, 3]), 0, None, 1)
        >>> out = locate_many(checkpoints, np.array([3, 3]), 0, None, 1, np.array([4, 1]), 2)
        >>> [a.tolist() for a in out]
        [[0, 1], [1, 0], [1, 1], [2, 2]]
    """
    total = int(checkpoints[-1])
    stops = starts + width
    if starts.size and (int(starts.min()) < 0 or int(stops.max()) > total):
        raise IndexError(
            f"stream ranges must lie in [0, {total}); got starts {int(starts.min())} .. "
            f"{int(starts.max())} of width {width}."
        )
    first = checkpoints.searchsorted(starts, side="right") - 1
    last = checkpoints.searchsorted(stops, side="left")  # exclusive blocks
    low = first * stride
    sizes = np.minimum(last * stride, len(lengths)) - low
    heads = sizes.cumsum() - sizes  # where each range's positions begin
    positions = (low - heads).repeat(sizes)  # per range, repeated: no gather by range
    positions += np.arange(positions.size, dtype=np.int64)
    docs = _documents(order, positions)
    tokens = np.add(lengths[docs], sep, dtype=np.int64)
    ends = tokens.cumsum()  # then each document's stream end minus its range's start:
    ends += (checkpoints[first] - starts - ends[heads] + tokens[heads]).repeat(sizes)
    begins = ends - tokens
    keep = ends > 0
    keep &= begins < width
    if not sep:  # an empty document (lengths of 0) makes no piece
        keep &= tokens > 0
    ranges = np.arange(starts.size, dtype=np.int64).repeat(sizes)[keep]
    docs, begins, ends = docs[keep], begins[keep], ends[keep]
    offsets = np.maximum(begins, 0) - begins  # where in the document the range begins
    counts = np.minimum(ends, width) - np.maximum(begins, 0)
    return ranges, docs, offsets, counts


def piece_offsets(
    begins: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Flatten pieces into per-token ``(piece number, offset in its document)`` arrays.

    Example:
        >>> [a.tolist() for a in piece_offsets(np.array([3, 0]), np.array([1, 2]))]
        [[0, 1, 1], [3, 0, 1]]
    """
    piece = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    firsts = np.cumsum(counts) - counts
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - firsts[piece] + begins[piece]
    return piece, offsets
