"""A packed batch read at once equals the brute-force stream, whatever the corpus layout.

The batch path copies pieces by slices (one array in memory or memory mapped) or through
``read_pieces`` (several parts, remote tokens); both must give, for random batches,
corpora and ``seq_len``, the samples cut from the stream built by hand.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.documents import DocumentCorpus, PackedDataset, collate_packed
from lightning_resumable_data.documents._rows import read_spans
from lightning_resumable_data.documents.corpus import CorpusPart
from lightning_resumable_data.index.permutation import feistel_keys, feistel_permute
from lightning_resumable_data.randomness import KeyedBatch

EOS = 7


def _layouts(lengths: list[int], dtype: str, cut: int) -> list[DocumentCorpus]:
    """One corpus four ways: one array, byte starts, a strided array, two parts."""
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    tokens = (np.arange(offsets[-1]) * 31 % 60000 + 11).astype(dtype)
    sizes = np.array(lengths, dtype=np.int64)
    one = DocumentCorpus([CorpusPart(tokens, offsets[:-1])], sizes, name="one")
    itemsize = tokens.dtype.itemsize
    scaled = CorpusPart(tokens, offsets[:-1] * itemsize, scale=itemsize)
    strided = CorpusPart(np.repeat(tokens, 2)[::2], offsets[:-1])  # not contiguous
    layouts = [one, DocumentCorpus([scaled], sizes, name="bytes")]
    layouts.append(DocumentCorpus([strided], sizes, name="strided"))
    cut = min(max(cut, 1), len(lengths) - 1)
    if cut >= 1:
        split = int(offsets[cut])
        parts = [CorpusPart(tokens[:split], offsets[:cut]),
                 CorpusPart(tokens[split:], offsets[cut:-1] - split)]  # fmt: skip
        layouts.append(DocumentCorpus(parts, sizes, name="two"))
    return layouts


def _stream(corpus: DocumentCorpus, order: np.ndarray, eos: bool) -> tuple[np.ndarray, ...]:
    """Tokens and position ids of the epoch's stream, built document by document."""
    tokens, positions = [], []
    for doc in order.tolist():
        body = corpus.document(doc).astype(np.int64)
        if eos:
            body = np.append(body, EOS)
        tokens.append(body)
        positions.append(np.arange(body.size))
    return np.concatenate(tokens), np.concatenate(positions)


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=2, max_size=150),
    seq_len=st.integers(1, 90),
    eos=st.booleans(),
    dtype=st.sampled_from(["uint16", "int32", "int64"]),
    stride=st.sampled_from([1, 5, 64]),
    shuffle=st.booleans(),
    data=st.data(),
)
def test_a_batch_is_the_stream_cut_into_samples(
    lengths: list[int], seq_len: int, eos: bool, dtype: str, stride: int, shuffle: bool,
    data: st.DataObject,
) -> None:  # fmt: skip
    if sum(lengths) + eos * len(lengths) < seq_len:
        return
    seed, epoch = data.draw(st.integers(0, 2**64 - 1)), data.draw(st.integers(0, 3))
    cut = data.draw(st.integers(1, len(lengths) - 1))
    for corpus in _layouts(lengths, dtype, cut):
        eos_id = EOS if eos else None
        packed = PackedDataset(corpus, seq_len, eos_id=eos_id, seed=seed, stride=stride,
                               shuffle_documents=shuffle, boundaries="both")  # fmt: skip
        order = np.arange(len(lengths))
        if shuffle:
            order = feistel_permute(order, len(lengths), feistel_keys(seed, epoch))
        tokens, positions = _stream(corpus, order, eos)
        picks = data.draw(st.lists(st.integers(0, len(packed) - 1), min_size=1, max_size=20))
        batch = packed.__getitems__(KeyedBatch(picks, seed=0, epoch=epoch, start=0, step=1))
        rows = np.array(picks)[:, None] * seq_len + np.arange(seq_len)
        # a document begun in an earlier sample restarts at 0 where this sample starts
        pieces = np.minimum(positions[rows], np.arange(seq_len))
        collated = collate_packed(batch)
        assert collated["input_ids"].tolist() == tokens[rows].tolist(), corpus.name
        assert collated["position_ids"].tolist() == pieces.tolist(), corpus.name
        assert collated["loss_mask"].all()
        assert collated["input_ids"].dtype == collated["position_ids"].dtype == torch.int64
        for sample, row, piece in zip(batch, rows, pieces, strict=True):
            assert sample["input_ids"].tolist() == tokens[row].tolist()
            starts = np.flatnonzero(piece == 0)
            assert sample["cu_seqlens"].tolist() == [*starts.tolist(), seq_len]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=2, max_size=40), data=st.data())
def test_read_spans_is_read_pieces_but_past_the_end(
    lengths: list[int], data: st.DataObject
) -> None:
    """Whole documents plus the token past each (a separator's place), last one included."""
    for corpus in _layouts(lengths, "uint16", data.draw(st.integers(1, len(lengths) - 1))):
        docs = np.array(data.draw(st.lists(st.integers(0, len(lengths) - 1), min_size=1)))
        begins = np.array([data.draw(st.integers(0, lengths[d] - 1)) for d in docs.tolist()])
        counts = np.asarray(corpus.lengths[docs], dtype=np.int64) - begins + 1
        past_end = np.cumsum(counts) - 1
        expected = corpus.read_pieces(docs, begins, counts, past_end=past_end).astype(np.int64)
        out = np.full(int(counts.sum()), -5, dtype=np.int64)
        read_spans(corpus, docs, begins, counts, past_end, out)
        inside = np.ones(out.size, dtype=bool)
        inside[past_end] = False
        assert out[inside].tolist() == expected[inside].tolist()
