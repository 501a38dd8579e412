"""Fixed-length samples packed from documents: a map-style dataset any sampler can shuffle.

``mode="concat"``: each epoch the documents are shuffled (keyed on ``(seed, epoch)`` with
:func:`~lightning_resumable_data.index.permutation.feistel_permute`), joined with an
``eos_id`` separator and cut into ``seq_len`` tokens; a document longer than what is left
of a sample continues in the next one. ``len()`` is ``stream_tokens // seq_len`` in every
epoch; the last ``tail_tokens`` tokens of each epoch's stream are in no sample (a
different tail each epoch). ``mode="pad"``: sample ``i`` is document ``i`` (the sampler
shuffles), cut to ``seq_len`` and padded with ``pad_id``.

Each sample is a dict of NumPy arrays: ``input_ids`` (``int64``, ``seq_len``) and the
document boundaries, ``position_ids`` (restarting at 0 where each document, or piece of a
document, starts) and/or ``cu_seqlens`` (``int32`` piece boundaries ``[0, ..., seq_len]``
for variable-length attention; batch them with :func:`collate_packed`), and ``loss_mask``
(``bool``, true on real tokens and the EOS, false on padding: all true under ``"concat"``,
so that sources of both modes can be mixed in one batch).

The epoch comes from the :class:`~lightning_resumable_data.SampleKey` indices that the
samplers yield with ``sample_keys=True`` (the right way: every worker and rank then packs
the same epoch, also after a resume), or from :meth:`PackedDataset.set_epoch` for plain
integer indices. The epoch's index (:mod:`~lightning_resumable_data.index.packing`, 8
bytes per 32 documents) is built on the first sample of an epoch and the last two epochs'
are kept.

Example:
    >>> from lightning_resumable_data.documents import DocumentCorpus
    >>> corpus = DocumentCorpus.from_arrays([1, 2, 3, 4, 5, 6], offsets=[0, 3, 4, 6])
    >>> packed = PackedDataset(corpus, seq_len=4, eos_id=0, shuffle_documents=False)
    >>> len(packed), packed.tail_tokens
    (2, 1)
    >>> sample = packed[0]
    >>> sample["input_ids"].tolist(), sample["position_ids"].tolist()
    ([1, 2, 3, 0], [0, 1, 2, 3])
    >>> packed[1]["input_ids"].tolist(), packed[1]["position_ids"].tolist()
    ([4, 0, 5, 6], [0, 1, 0, 1])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from functools import partial
from typing import Any, Final, Literal, get_args

import numpy as np
import torch.utils.data
from numpy.typing import NDArray

from lightning_resumable_data.documents._rows import packed_rows, read_spans
from lightning_resumable_data.documents.corpus import DocumentCorpus
from lightning_resumable_data.index.inverse import feistel_inverse
from lightning_resumable_data.index.packing import (
    DEFAULT_STRIDE,
    build_checkpoints,
    locate_many,
    piece_offsets,
)
from lightning_resumable_data.index.permutation import _permute, feistel_keys
from lightning_resumable_data.pins import dataset_pins
from lightning_resumable_data.randomness import KeyedBatch, SampleKey
from lightning_resumable_data.samplers._arguments import check_key_seed
from lightning_resumable_data.samplers.distributed import check_non_negative_int

__all__ = ["BOUNDARIES", "PACKING_MODES", "Boundaries", "PackedDataset", "PackingMode"]

PackingMode = Literal["concat", "pad"]
Boundaries = Literal["position_ids", "cu_seqlens", "both"]
PACKING_MODES: Final[tuple[str, ...]] = get_args(PackingMode)
BOUNDARIES: Final[tuple[str, ...]] = get_args(Boundaries)
_CACHED_EPOCHS: Final = 2
Sample = dict[str, NDArray[Any]]
Pieces = tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}.")
    return value


def _order(n: int, key: tuple[int, ...], positions: NDArray[np.int64]) -> NDArray[np.int64]:
    return _permute(positions, n, key)  # positions in [0, n): the index math keeps them there


class PackedDataset(torch.utils.data.Dataset[Sample]):
    """Documents packed into ``seq_len``-token samples, sample ``i`` by random access.

    Args:
        corpus: The documents (:func:`open_megatron`, :func:`open_hf_dataset`, ...).
        seq_len: Tokens per sample, ``>= 1`` (use ``context + 1`` for shifted labels).
        mode: ``"concat"`` (pack, no padding) or ``"pad"`` (one document per sample).
        eos_id: Separator after each document (``"concat"``: ``None`` joins documents with
            no separator; ``"pad"``: appended when the document is shorter than ``seq_len``).
        pad_id: Padding token of ``"pad"``.
        seed: Seed of the document shuffle of ``"concat"``.
        shuffle_documents: Shuffle the documents every epoch before packing (``"concat"``).
        boundaries: ``"position_ids"``, ``"cu_seqlens"`` or ``"both"``.
        stride: Documents per index entry: memory ``8 / stride`` bytes per document, time
            per sample proportional to ``stride``.

    Raises:
        ValueError: ``seq_len < 1``, an unknown ``mode``/``boundaries``, or a corpus with
            fewer tokens than one sample.
    """

    def __init__(
        self,
        corpus: DocumentCorpus,
        seq_len: int,
        *,
        mode: PackingMode = "concat",
        eos_id: int | None = None,
        pad_id: int = 0,
        seed: int = 0,
        shuffle_documents: bool = True,
        boundaries: Boundaries = "position_ids",
        stride: int = DEFAULT_STRIDE,
    ) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
            raise ValueError(
                f"seq_len={seq_len!r} must be an int >= 1 (tokens per sample); pass e.g. 2049."
            )
        if check_non_negative_int("stride", stride) == 0:
            raise ValueError("stride=0 must be >= 1 (documents per index entry; default 32).")
        self.corpus, self.seq_len, self.stride = corpus, int(seq_len), int(stride)
        self.mode: PackingMode = _choice("mode", mode, PACKING_MODES)  # type: ignore[assignment]
        self.boundaries: Boundaries = _choice(  # type: ignore[assignment]
            "boundaries", boundaries, BOUNDARIES
        )
        self.eos_id, self.pad_id = eos_id, int(pad_id)
        self.seed = check_key_seed(seed)
        self.shuffle_documents = bool(shuffle_documents)
        self.sep = 0 if eos_id is None else 1
        self.epoch = 0
        self._indices: OrderedDict[int, NDArray[np.int64]] = OrderedDict()
        self._keys: dict[int, NDArray[np.uint64]] = {}
        self.stream_tokens = corpus.num_tokens + self.sep * len(corpus)
        if mode == "concat" and self.stream_tokens < self.seq_len:
            raise ValueError(
                f"{corpus.name!r} holds {self.stream_tokens} tokens with separators, fewer "
                f"than one sample of seq_len={self.seq_len}; lower seq_len or add documents."
            )

    def __len__(self) -> int:
        if self.mode == "pad":
            return len(self.corpus)
        return self.stream_tokens // self.seq_len

    @property
    def pins(self) -> dict[str, str]:
        """The corpus's pinned files (:mod:`~lightning_resumable_data.pins`)."""
        return dataset_pins(self.corpus)

    @property
    def packing(self) -> dict[str, Any]:
        """How the corpus is packed (a data module saves it: ``lrd trace --documents``)."""
        return {
            "seq_len": self.seq_len, "mode": self.mode,
            "eos_id": None if self.eos_id is None else int(self.eos_id),
            "seed": self.seed, "shuffle_documents": self.shuffle_documents,
            "documents": len(self.corpus), "stream_tokens": self.stream_tokens,
        }  # fmt: skip

    @property
    def tail_tokens(self) -> int:
        """Tokens at the end of each epoch's ``"concat"`` stream that are in no sample."""
        return 0 if self.mode == "pad" else self.stream_tokens % self.seq_len

    def set_epoch(self, epoch: int) -> None:
        """Pack epoch ``epoch`` for plain integer indices (``SampleKey`` indices override).

        Builds that epoch's index now, so that worker processes forked afterwards share it.
        """
        self.epoch = check_non_negative_int("epoch", epoch)
        if self.mode == "concat":
            self.checkpoints(self.epoch)

    def _order(self, epoch: int) -> partial[NDArray[np.int64]] | None:
        if not self.shuffle_documents:
            return None
        keys = self._keys.get(epoch)
        if keys is None:
            keys = self._keys[epoch] = feistel_keys(self.seed, epoch)
            while len(self._keys) > _CACHED_EPOCHS:
                del self._keys[next(iter(self._keys))]
        return partial(_order, len(self.corpus), tuple(keys.tolist()))

    def positions(self, docs: NDArray[np.int64], epoch: int) -> NDArray[np.int64]:
        """Where documents ``docs`` are in ``epoch``'s document order (its inverse, O(1) each)."""
        order = self._order(epoch)
        if order is None:
            return np.array(docs, dtype=np.int64)
        return feistel_inverse(docs, len(self.corpus), self._keys[epoch])

    def checkpoints(self, epoch: int) -> NDArray[np.int64]:
        """The index of ``epoch``: stream offsets every ``stride`` documents (built once)."""
        key = epoch if self.shuffle_documents else 0
        index = self._indices.get(key)
        if index is None:
            lengths = self.corpus.lengths
            index = build_checkpoints(lengths, self.sep, self._order(epoch), self.stride)
            self._indices[key] = index
            while len(self._indices) > _CACHED_EPOCHS:
                self._indices.popitem(last=False)
        return index

    @property
    def index_nbytes(self) -> int:
        """Bytes of one epoch's index (0 for ``"pad"``)."""
        return 0 if self.mode == "pad" else 8 * (-(-len(self.corpus) // self.stride) + 1)

    def __getitem__(self, index: int) -> Sample:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """A batch of samples in one vectorised pass (``DataLoader`` calls this per batch).

        ``SampleKey`` indices carry their epoch; plain ones use :attr:`epoch`.
        """
        length = len(self)
        epochs, epoch = None, self.epoch
        if isinstance(indices, KeyedBatch):  # one epoch, no key object per index
            flat, epoch = np.array(indices[:], dtype=np.int64), indices.epoch
        else:
            flat = np.array([int(i) for i in indices], dtype=np.int64)
            epochs = np.array(
                [i.epoch if isinstance(i, SampleKey) else self.epoch for i in indices],
                dtype=np.int64,
            )
        if flat.size:
            low, high = int(flat.min()), int(flat.max())
            if low < -length or high >= length:
                bad = next(int(i) for i in flat.tolist() if not -length <= i < length)
                raise IndexError(f"sample {bad} is out of range for {length} packed samples.")
            if low < 0:
                flat %= length
        read = self._padded if self.mode == "pad" else self._packed
        if epochs is None:
            return read(flat, epoch) if flat.size else []
        present = np.unique(epochs).tolist()
        if len(present) == 1:
            return read(flat, present[0])
        out: list[Sample] = [{} for _ in range(flat.size)]
        for epoch in present:  # one pass per epoch in the batch (2 at an epoch's end)
            where = np.flatnonzero(epochs == epoch)
            for slot, sample in zip(where.tolist(), read(flat[where], epoch), strict=True):
                out[slot] = sample
        return out

    def pieces(self, indices: NDArray[np.int64], epoch: int) -> Pieces:
        """``"concat"``: the document pieces of samples ``indices`` (in ``[0, len)``).

        ``(ranges, docs, begins, counts)`` of :func:`~.index.packing.locate_many`: piece
        ``k`` of sample ``indices[ranges[k]]`` is ``counts[k]`` tokens of ``docs[k]`` from
        ``begins[k]`` (offset ``lengths[doc]`` is the separator). No token is read.
        """
        return locate_many(
            self.checkpoints(epoch), self.corpus.lengths, self.sep, self._order(epoch),
            self.stride, indices * self.seq_len, self.seq_len,
        )  # fmt: skip

    def _packed(self, indices: NDArray[np.int64], epoch: int) -> list[Sample]:
        ranges, docs, begins, counts = self.pieces(indices, epoch)
        heads = counts.cumsum() - counts  # where each piece starts in the batch
        separators = None
        if self.sep:  # pieces that end with the separator (one token past the document)
            ends = np.subtract(self.corpus.lengths[docs], begins, dtype=np.int64)
            closing = ends < counts
            separators = heads[closing] + ends[closing]
        tokens = np.empty(indices.size * self.seq_len, dtype=np.int64)
        read_spans(self.corpus, docs, begins, counts, separators, tokens)
        if separators is not None and self.eos_id is not None:
            tokens[separators] = self.eos_id
        return packed_rows(tokens, ranges, counts, None, self.seq_len, self.boundaries, heads)

    def _padded(self, indices: NDArray[np.int64], epoch: int = 0) -> list[Sample]:
        lengths = np.asarray(self.corpus.lengths[indices], dtype=np.int64)
        kept = np.minimum(lengths, self.seq_len)
        real = np.minimum(kept + self.sep, self.seq_len)
        piece, offsets = piece_offsets(np.zeros_like(kept), kept)
        tokens = np.full((indices.size, self.seq_len), self.pad_id, dtype=np.int64)
        tokens[piece, offsets] = self.corpus.read_pieces(indices, np.zeros_like(kept), kept)
        if self.eos_id is not None:
            short = np.flatnonzero(kept < self.seq_len)
            tokens[short, kept[short]] = self.eos_id
        rows = np.arange(indices.size, dtype=np.int64)
        counts = np.stack([real, self.seq_len - real], axis=1).reshape(-1)
        ranges = np.repeat(rows, 2)
        keep = counts > 0  # a padding piece only where there is padding
        flat, pieces = tokens.reshape(-1), counts[keep]
        return packed_rows(flat, ranges[keep], pieces, real, self.seq_len, self.boundaries)

    def __repr__(self) -> str:
        return (
            f"PackedDataset({self.corpus!r}, seq_len={self.seq_len}, mode={self.mode!r}, "
            f"samples={len(self)})"
        )
