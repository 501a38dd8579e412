"""A corpus of variable-length tokenised documents, read by random access.

Every format this package reads (Megatron ``.bin``/``.idx``, Arrow and Parquet token-list
columns, NumPy tokens with offsets, token shards) comes down to the same shape: one or
more *parts*, each a flat 1-D token array (usually a memory map; for a file in object
storage, a :class:`TokenSource` read by ranges) with the start of each document in it, and
one length per document. :class:`DocumentCorpus` holds that shape and answers one
question, vectorised: the tokens at ``(document, offset)`` pairs. Nothing is loaded when a
corpus is opened; pages are read when their tokens are asked for.

Example:
    >>> corpus = DocumentCorpus.from_arrays(np.arange(10, 16), offsets=[0, 2, 6])
    >>> len(corpus), corpus.lengths.tolist(), corpus.document(1).tolist()
    (2, [2, 4], [12, 13, 14, 15])
    >>> corpus.take(np.array([1, 0]), np.array([3, 1])).tolist()
    [15, 11]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lightning_resumable_data.documents.files import CorpusFile
from lightning_resumable_data.pins import dataset_pins

__all__ = ["CorpusPart", "DocumentCorpus", "TokenSource", "check_document_lengths"]

IntArray = NDArray[np.integer[Any]]


@runtime_checkable
class TokenSource(Protocol):
    """Tokens read on demand, not an array in memory (e.g. ``remote.chunks.RemoteTokens``).

    Indexed like a 1-D NumPy array with an integer array of positions; a corpus keeps it as
    it is instead of converting it with ``np.asarray``.
    """

    @property
    def dtype(self) -> np.dtype[Any]:
        """The token dtype."""

    def __len__(self) -> int:
        """Tokens in all."""

    def __getitem__(self, positions: NDArray[np.int64]) -> NDArray[Any]:
        """The tokens at ``positions`` (same shape)."""


def _array(tokens: IntArray | TokenSource) -> IntArray | TokenSource:
    """``tokens`` as a plain array (not a memmap subclass), or as it is if read on demand."""
    if not isinstance(tokens, np.ndarray) and isinstance(tokens, TokenSource):
        return tokens
    return np.asarray(tokens)


@dataclass(frozen=True)
class CorpusPart:
    """One flat token array and where its documents start in it.

    Attributes:
        tokens: 1-D integer tokens (a ``numpy.memmap``, an in-memory array or a
            :class:`TokenSource`).
        starts: Start of each document, in units of ``1 / scale`` tokens (Megatron stores
            byte pointers: ``scale`` is then the token size).
        scale: Divisor from ``starts`` to token offsets.
    """

    tokens: IntArray | TokenSource
    starts: IntArray
    scale: int = 1


def check_document_lengths(lengths: IntArray, source: str) -> None:
    """Raise ``ValueError`` naming ``source`` if a document is empty or a length negative.

    Example:
        >>> check_document_lengths(np.array([3, 0]), "corpus.idx")
        Traceback (most recent call last):
        ...
        ValueError: 'corpus.idx' holds 1 empty document(s), the first is document 1 ...
    """
    if not len(lengths):
        return
    empty = np.flatnonzero(np.asarray(lengths) <= 0)
    if empty.size:
        raise ValueError(
            f"{source!r} holds {empty.size} empty document(s), the first is document "
            f"{int(empty[0])} (length {int(lengths[empty[0]])}); every document needs at "
            "least one token. Drop empty documents when tokenising (e.g. filter "
            "len(ids) > 0 before writing)."
        )


class DocumentCorpus:
    """Documents of tokens in one or more flat token arrays, read by random access.

    Args:
        parts: The token arrays and document starts, in document order.
        lengths: Tokens per document over all parts, shape ``(D,)`` (a memory map is kept
            as is; nothing is copied).
        name: What to call the corpus in errors (usually a file path).
        reopen: ``(function, args)`` that opens this corpus again: pickling (into a
            ``spawn`` worker) then sends that instead of the memory-mapped tokens.
        files: The files the documents come from, in order (provenance; may be empty).

    Raises:
        ValueError: No documents, an empty document, or a part whose document count
            disagrees with ``lengths``.

    Example:
        >>> part = CorpusPart(np.array([5, 6, 7]), np.array([0, 2]))
        >>> DocumentCorpus([part], np.array([2, 1]), name="demo").document(1).tolist()
        [7]
    """

    def __init__(
        self,
        parts: Sequence[CorpusPart],
        lengths: IntArray,
        *,
        name: str,
        reopen: tuple[Callable[..., DocumentCorpus], tuple[Any, ...]] | None = None,
        files: Sequence[CorpusFile] = (),
    ) -> None:
        self.name = name
        self.files = tuple(files)
        self._reopen = reopen
        self.parts = tuple(parts)
        self.lengths = lengths
        counts = [len(part.starts) for part in self.parts]
        self._bounds = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
        if int(self._bounds[-1]) != len(lengths):
            raise ValueError(
                f"{name!r}: its parts hold {int(self._bounds[-1])} document starts but "
                f"{len(lengths)} lengths; the index is inconsistent, rewrite it."
            )
        if not len(lengths):
            raise ValueError(
                f"{name!r} holds no documents; check the path or the filter that built it."
            )
        check_document_lengths(lengths, name)
        self._arrays = [_array(part.tokens) for part in self.parts]
        dtypes = {np.dtype(part.tokens.dtype) for part in self.parts}
        self.dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.int64)
        for part in self.parts:
            if not np.issubdtype(part.tokens.dtype, np.integer):
                raise TypeError(
                    f"{name!r} holds {part.tokens.dtype} tokens; token ids must be integers."
                )

    @classmethod
    def from_arrays(
        cls, tokens: ArrayLike, offsets: ArrayLike, *, name: str = "arrays"
    ) -> DocumentCorpus:
        """A corpus from flat ``tokens`` and ``offsets`` (``D + 1`` document boundaries).

        Raises:
            ValueError: ``offsets`` is not 1-D, decreasing, or beyond ``len(tokens)``.

        Example:
            >>> DocumentCorpus.from_arrays([1, 2, 3], [0, 1, 3]).lengths.tolist()
            [1, 2]
        """
        flat, bounds = np.asarray(tokens), np.asarray(offsets)
        if flat.ndim != 1 or bounds.ndim != 1 or bounds.size < 2:
            raise ValueError(
                f"{name!r}: tokens must be 1-D and offsets 1-D with D + 1 >= 2 entries, got "
                f"shapes {flat.shape} and {bounds.shape}."
            )
        if not np.issubdtype(bounds.dtype, np.integer):
            raise TypeError(f"{name!r}: offsets have dtype {bounds.dtype}; expected integers.")
        lengths = np.diff(bounds).astype(np.int64)
        if int(bounds[0]) < 0 or int(bounds[-1]) > flat.size or (lengths < 0).any():
            raise ValueError(
                f"{name!r}: offsets must increase from >= 0 to <= len(tokens)={flat.size}, "
                f"got {int(bounds[0])} .. {int(bounds[-1])}; pass CSR offsets (D + 1 values)."
            )
        part = CorpusPart(flat, bounds[:-1].astype(np.int64))
        return cls([part], lengths, name=name)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def pins(self) -> dict[str, str]:
        """Identities of the remote files the tokens are read from (``remote.chunks``)."""
        pins: dict[str, str] = {}
        for part in self.parts:
            pins |= dataset_pins(part.tokens)
        return pins

    @property
    def num_tokens(self) -> int:
        """Tokens in all documents (one vectorised sum over the lengths)."""
        return int(np.sum(self.lengths, dtype=np.int64))

    def document(self, index: int) -> NDArray[np.integer[Any]]:
        """The tokens of one document.

        Example:
            >>> DocumentCorpus.from_arrays([4, 5, 6], [0, 1, 3]).document(-1).tolist()
            [5, 6]
        """
        if not -len(self) <= index < len(self):
            raise IndexError(f"document {index} is out of range for {self.name!r} of {len(self)}.")
        index %= len(self)
        size = int(self.lengths[index])
        return self.take(np.full(size, index, dtype=np.int64), np.arange(size, dtype=np.int64))

    def take(self, docs: IntArray, offsets: IntArray) -> NDArray[np.integer[Any]]:
        """Token ``offsets[k]`` of document ``docs[k]`` for every ``k`` (no bounds check).

        Callers keep ``0 <= offsets < lengths[docs]``; the dataset does. One fancy index
        per part touched (usually one), never a loop per token or document.
        """
        out = np.empty(len(docs), dtype=self.dtype)
        if len(self.parts) == 1:
            out[:] = self._arrays[0][self._starts(0, docs) + offsets]
            return out
        which = np.searchsorted(self._bounds, docs, side="right") - 1
        for number in np.unique(which).tolist():  # parts touched, not documents
            mask = which == number
            local = docs[mask] - self._bounds[number]
            out[mask] = self._arrays[number][self._starts(number, local) + offsets[mask]]
        return out

    def read_pieces(
        self,
        docs: IntArray,
        begins: IntArray,
        counts: IntArray,
        *,
        past_end: IntArray | None = None,
    ) -> NDArray[np.integer[Any]]:
        """Tokens ``[begins[k], begins[k] + counts[k])`` of ``docs[k]``, concatenated.

        Pieces must lie inside their documents, except at the output positions listed in
        ``past_end``: one past a document's last token (where a packer puts a separator),
        which read that last token instead, so that nothing outside the document is read.
        Cost: a few vectorised passes over the tokens read (one gather), whatever the
        number of pieces.

        Example:
            >>> corpus = DocumentCorpus.from_arrays(np.arange(10), [0, 4, 10])
            >>> corpus.read_pieces(np.array([1, 0]), np.array([2, 0]), np.array([3, 1])).tolist()
            [6, 7, 8, 0]
        """
        total = int(np.sum(counts))
        heads = np.cumsum(counts) - counts
        if len(self.parts) == 1:
            firsts = self._starts(0, docs) + begins - heads
            address = np.arange(total, dtype=np.int64) + np.repeat(firsts, counts)
            if past_end is not None:
                address[past_end] -= 1
            read: NDArray[np.integer[Any]] = self._arrays[0][address]
            return read
        piece = np.repeat(np.arange(len(docs), dtype=np.int64), counts)
        offsets = np.arange(total, dtype=np.int64) - heads[piece] + np.asarray(begins)[piece]
        if past_end is not None:
            offsets[past_end] -= 1
        return self.take(np.asarray(docs)[piece], offsets)

    def _starts(self, number: int, docs: IntArray) -> NDArray[np.int64]:
        part = self.parts[number]
        starts: NDArray[np.int64] = np.asarray(part.starts[docs], dtype=np.int64)
        return starts // part.scale if part.scale != 1 else starts

    def __reduce__(self) -> tuple[Any, ...]:
        if self._reopen is not None:
            return self._reopen
        return (_rebuild, (self.parts, self.lengths, self.name, self.files))

    def __repr__(self) -> str:
        return f"DocumentCorpus({self.name!r}, documents={len(self)}, parts={len(self.parts)})"


def _rebuild(
    parts: Sequence[CorpusPart], lengths: IntArray, name: str, files: Sequence[CorpusFile] = ()
) -> DocumentCorpus:
    return DocumentCorpus(parts, lengths, name=name, files=files)
