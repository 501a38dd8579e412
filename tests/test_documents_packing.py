"""Packing properties: every token once per epoch, correct boundaries, random access exact."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import SampleKey
from lightning_resumable_data.documents import (
    DocumentCorpus,
    PackedDataset,
    collate_packed,
    token_weights,
)
from lightning_resumable_data.index.packing import build_checkpoints
from lightning_resumable_data.index.permutation import feistel_keys, feistel_permute
from lightning_resumable_data.randomness import KeyedBatch

EOS = -1


def _corpus(lengths: list[int]) -> DocumentCorpus:
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    # token value = document * 1000 + offset, so every token names its document and place
    tokens = np.concatenate([d * 1000 + np.arange(n) for d, n in enumerate(lengths)])
    return DocumentCorpus.from_arrays(tokens, offsets)


def _sequential(corpus: DocumentCorpus, order: np.ndarray, seq_len: int, eos: bool) -> np.ndarray:
    """The reference: concatenate in order with separators, cut, drop the tail."""
    parts = []
    for doc in order:
        parts.append(corpus.document(int(doc)))
        if eos:
            parts.append(np.array([EOS]))
    stream = np.concatenate(parts).astype(np.int64)
    count = stream.size // seq_len
    return stream[: count * seq_len].reshape(count, seq_len)


lengths_st = st.lists(st.integers(1, 40), min_size=1, max_size=200)


@settings(max_examples=60, deadline=None)
@given(
    lengths=lengths_st,
    seq_len=st.integers(1, 64),
    eos=st.booleans(),
    stride=st.sampled_from([1, 3, 64]),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 5),
)
def test_random_access_equals_sequential_packing(
    lengths: list[int], seq_len: int, eos: bool, stride: int, seed: int, epoch: int
) -> None:
    corpus = _corpus(lengths)
    if sum(lengths) + eos * len(lengths) < seq_len:
        with pytest.raises(ValueError, match="fewer than one sample"):
            PackedDataset(corpus, seq_len, eos_id=EOS if eos else None)
        return
    packed = PackedDataset(corpus, seq_len, eos_id=EOS if eos else None, seed=seed, stride=stride,
                           boundaries="both")  # fmt: skip
    order = feistel_permute(np.arange(len(lengths)), len(lengths), feistel_keys(seed, epoch))
    expected = _sequential(corpus, order, seq_len, eos)
    assert len(packed) == len(expected)
    assert packed.tail_tokens == sum(lengths) + eos * len(lengths) - len(expected) * seq_len
    for i in np.random.default_rng(0).permutation(len(packed))[:50]:  # any order: random access
        sample = packed[SampleKey(int(i), seed=0, epoch=epoch, position=0)]
        assert sample["input_ids"].tolist() == expected[i].tolist()
        # boundaries: a piece starts where the document (or its continuation) starts
        tokens, positions, cu = sample["input_ids"], sample["position_ids"], sample["cu_seqlens"]
        assert cu[0] == 0
        assert cu[-1] == seq_len
        assert (np.diff(cu) > 0).all()
        starts = np.zeros(seq_len, dtype=bool)
        starts[cu[:-1]] = True
        assert ((positions == 0) == starts).all()
        for begin, end in itertools.pairwise(cu):  # one document per piece
            piece = tokens[begin:end]
            real = piece[piece != EOS]
            assert len({int(t) // 1000 for t in real}) <= 1
            assert (np.diff(real) == 1).all()  # consecutive tokens of that document
            if eos and (piece == EOS).any():
                assert piece[-1] == EOS
                assert (piece == EOS).sum() == 1


@settings(max_examples=40, deadline=None)
@given(lengths=lengths_st, seq_len=st.integers(1, 50), epoch=st.integers(0, 3))
def test_every_token_once_per_epoch_except_the_tail(
    lengths: list[int], seq_len: int, epoch: int
) -> None:
    total = sum(lengths) + len(lengths)
    if total < seq_len:
        return
    packed = PackedDataset(_corpus(lengths), seq_len, eos_id=EOS, seed=3)
    packed.set_epoch(epoch)
    tokens = np.concatenate([packed[i]["input_ids"] for i in range(len(packed))])
    real = tokens[tokens != EOS]
    assert len(np.unique(real)) == real.size  # nothing twice
    everything = {d * 1000 + k for d, n in enumerate(lengths) for k in range(n)}
    missing = everything - set(real.tolist())
    eos_missing = len(lengths) - int((tokens == EOS).sum())
    assert len(missing) + eos_missing == packed.tail_tokens  # only the tail is missing
    assert real.size + (tokens == EOS).sum() == len(packed) * seq_len


def test_epochs_pack_differently_and_keys_win_over_set_epoch() -> None:
    packed = PackedDataset(_corpus([5] * 100), 16, eos_id=EOS, seed=0)
    first = [packed[SampleKey(i, seed=0, epoch=0, position=i)]["input_ids"] for i in range(5)]
    packed.set_epoch(1)
    plain = [packed[i]["input_ids"] for i in range(5)]
    assert any((a != b).any() for a, b in zip(first, plain, strict=True))
    again = [packed[SampleKey(i, seed=0, epoch=0, position=i)]["input_ids"] for i in range(5)]
    assert all((a == b).all() for a, b in zip(first, again, strict=True))


def test_large_corpus_uses_the_network_and_index_is_small() -> None:
    lengths = np.random.default_rng(0).integers(1, 30, 2**17 + 5)
    corpus = DocumentCorpus.from_arrays(np.zeros(int(lengths.sum()), np.uint16),
                                        np.concatenate(([0], np.cumsum(lengths))))  # fmt: skip
    packed = PackedDataset(corpus, 2048, eos_id=0)
    assert packed.index_nbytes == 8 * (-(-len(corpus) // 32) + 1)  # the default stride
    assert packed.index_nbytes / len(corpus) < 0.26
    checkpoints = packed.checkpoints(0)
    assert checkpoints[-1] == packed.stream_tokens
    assert (packed[len(packed) - 1]["input_ids"] == 0).all()
    order = feistel_permute(np.arange(len(corpus)), len(corpus), feistel_keys(0, 0))
    ref = build_checkpoints(lengths, 1, lambda p: order[p], 32)
    assert (ref == checkpoints).all()


def test_pad_mode() -> None:
    packed = PackedDataset(_corpus([3, 6]), 5, mode="pad", eos_id=EOS, pad_id=7,
                           boundaries="both")  # fmt: skip
    assert len(packed) == 2
    assert packed.tail_tokens == packed.index_nbytes == 0
    short, long = packed[0], packed[1]
    assert short["input_ids"].tolist() == [0, 1, 2, EOS, 7]
    assert short["loss_mask"].tolist() == [True, True, True, True, False]
    assert short["cu_seqlens"].tolist() == [0, 4, 5]
    assert long["input_ids"].tolist() == [1000, 1001, 1002, 1003, 1004]  # truncated
    assert long["cu_seqlens"].tolist() == [0, 5]
    assert long["loss_mask"].all()
    batch = collate_packed([short, long])
    assert batch["cu_seqlens"].tolist() == [0, 4, 5, 10]
    assert batch["max_seqlen"] == 5
    assert batch["input_ids"].shape == (2, 5)


def test_bad_arguments() -> None:
    corpus = _corpus([3, 3])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=r"seq_len=.* must be an int >= 1"):
            PackedDataset(corpus, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode='zip' is not one of 'concat', 'pad'"):
        PackedDataset(corpus, 2, mode="zip")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="boundaries='x'"):
        PackedDataset(corpus, 2, boundaries="x")  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="sample 3 is out of range for 3"):
        PackedDataset(corpus, 2)[3]


def test_token_weights() -> None:
    a = PackedDataset(_corpus([10] * 10), 4)
    b = PackedDataset(_corpus([2] * 10), 8, mode="pad", eos_id=EOS)  # 3 real tokens a sample
    weights = token_weights({"a": a, "b": b}, {"a": 1.0, "b": 1.0})
    assert weights["b"] / weights["a"] == pytest.approx(4 / 3)
    with pytest.raises(ValueError, match="one share per source"):
        token_weights({"a": a}, {"b": 1.0})


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=3, max_size=120),
    seq_len=st.integers(1, 40),
    mode=st.sampled_from(["concat", "pad"]),
    data=st.data(),
)
def test_batched_reads_equal_single_reads(
    lengths: list[int], seq_len: int, mode: str, data: st.DataObject
) -> None:
    if sum(lengths) + len(lengths) < seq_len:
        return
    packed = PackedDataset(_corpus(lengths), seq_len, mode=mode, eos_id=EOS,  # type: ignore[arg-type]
                           boundaries="both", stride=4)  # fmt: skip
    picks = data.draw(st.lists(st.integers(0, len(packed) - 1), min_size=1, max_size=12))
    epochs = data.draw(st.lists(st.integers(0, 2), min_size=len(picks), max_size=len(picks)))
    keys = [SampleKey(i, seed=0, epoch=e, position=0) for i, e in zip(picks, epochs, strict=True)]
    batch = packed.__getitems__(keys)
    for key, got in zip(keys, batch, strict=True):
        single = packed[key]
        assert got.keys() == single.keys()
        for name in got:
            assert got[name].tolist() == single[name].tolist()


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=60),
    sep=st.integers(0, 2),
    stride=st.sampled_from([1, 2, 5, 64]),
    shuffled=st.booleans(),
    data=st.data(),
)
def test_locate_reads_the_stream_range_of_a_brute_force_stream(
    lengths: list[int], sep: int, stride: int, shuffled: bool, data: st.DataObject
) -> None:
    """index.packing.locate / locate_many against the stream written out token by token:
    (document, offset) pairs, offset >= length being a separator token."""
    from lightning_resumable_data.index.packing import locate, locate_many, piece_offsets

    size = np.array(lengths)
    permutation = np.random.default_rng(len(lengths)).permutation(len(lengths))
    order = (lambda positions: permutation[positions]) if shuffled else None
    visit = permutation if shuffled else np.arange(len(lengths))
    stream = [(int(d), k) for d in visit for k in range(lengths[d] + sep)]
    checkpoints = build_checkpoints(size, sep, order, stride)
    assert int(checkpoints[-1]) == len(stream)
    if not stream:
        return
    start = data.draw(st.integers(0, len(stream) - 1))
    stop = data.draw(st.integers(start + 1, len(stream)))
    docs, begins, counts = locate(checkpoints, size, sep, order, stride, start, stop)
    piece, offsets = piece_offsets(begins, counts)
    assert list(zip(docs[piece].tolist(), offsets.tolist(), strict=True)) == stream[start:stop]
    assert (counts > 0).all()  # no empty piece
    with pytest.raises(IndexError, match="empty"):
        locate(checkpoints, size, sep, order, stride, stop, stop)
    with pytest.raises(IndexError, match="must lie in"):
        locate(checkpoints, size, sep, order, stride, start, len(stream) + 1)
    width = stop - start  # many ranges at once: the same as one by one
    starts = np.array([0, start, len(stream) - width], dtype=np.int64)
    ranges, many_docs, many_begins, many_counts = locate_many(
        checkpoints, size, sep, order, stride, starts, width
    )
    for number, first in enumerate(starts.tolist()):
        mine = ranges == number
        piece, offsets = piece_offsets(many_begins[mine], many_counts[mine])
        pairs = list(zip(many_docs[mine][piece].tolist(), offsets.tolist(), strict=True))
        assert pairs == stream[first : first + width]


def test_the_stream_arithmetic_is_64_bit_with_32_bit_lengths() -> None:
    """Megatron indexes store lengths as int32: a stream past 2**31 tokens must not wrap."""
    from lightning_resumable_data.index.packing import locate, locate_many

    lengths = np.full(5, 10**9, dtype=np.int32)  # 5e9 tokens, no token array needed
    checkpoints = build_checkpoints(lengths, 1, None, 2)
    assert checkpoints.tolist() == [0, 2 * (10**9 + 1), 4 * (10**9 + 1), 5 * (10**9 + 1)]
    start = 3 * (10**9 + 1) + 5  # inside document 3, past 2**31
    docs, begins, counts = locate(checkpoints, lengths, 1, None, 2, start, start + 10)
    assert (docs.tolist(), begins.tolist(), counts.tolist()) == ([3], [5], [10])
    starts = np.array([start, 4 * (10**9 + 1) - 3], dtype=np.int64)
    _, docs, begins, counts = locate_many(checkpoints, lengths, 1, None, 2, starts, 10)
    assert (docs.tolist(), begins.tolist(), counts.tolist()) == (
        [3, 3, 4],
        [5, 10**9 - 2, 0],
        [10, 3, 7],
    )


def _copies(samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The samples as plain dicts of fresh arrays: collate_packed's per-sample path."""
    return [{key: np.array(value) for key, value in sample.items()} for sample in samples]


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    seq_len=st.integers(1, 24),
    mode=st.sampled_from(["concat", "pad"]),
    boundaries=st.sampled_from(["position_ids", "cu_seqlens", "both"]),
    data=st.data(),
)
def test_a_batch_read_collates_to_the_stack_of_its_samples(
    lengths: list[int], seq_len: int, mode: str, boundaries: str, data: st.DataObject
) -> None:
    """docs/documents.md: a batch read at once collates, without a stack, to what
    collate_packed makes of the same samples one by one; every position id counts from
    the start of its piece, and the pieces tile each sample."""
    if sum(lengths) + len(lengths) < seq_len:
        return
    packed = PackedDataset(_corpus(lengths), seq_len, mode=mode, eos_id=EOS,  # type: ignore[arg-type]
                           boundaries=boundaries, stride=4)  # type: ignore[arg-type]  # fmt: skip
    picks = data.draw(st.lists(st.integers(0, len(packed) - 1), min_size=1, max_size=12))
    epoch = data.draw(st.integers(0, 2))
    batch = packed.__getitems__(KeyedBatch(picks, seed=0, epoch=epoch, start=0, step=1))
    fast, slow = collate_packed(batch), collate_packed(_copies(batch))
    assert fast.keys() == slow.keys()
    for key in fast:
        if key == "max_seqlen":
            assert fast[key] == slow[key]
        else:
            assert fast[key].dtype == slow[key].dtype
            assert torch.equal(fast[key], slow[key]), key
    if boundaries == "both":
        for sample in batch:
            cu = sample["cu_seqlens"].tolist()
            assert cu[0] == 0
            assert cu[-1] == seq_len
            assert all(a < b for a, b in itertools.pairwise(cu))
            expected = [j - max(c for c in cu if c <= j) for j in range(seq_len)]
            assert sample["position_ids"].tolist() == expected


def test_a_batch_whose_samples_were_replaced_collates_what_it_holds() -> None:
    """A wrapper that replaces a sample's array after the read gets its own values, not
    the batch arrays read before."""
    packed = PackedDataset(_corpus([5, 7, 3, 9]), 4, eos_id=EOS, boundaries="both")
    batch = packed.__getitems__([0, 1, 2])
    batch[1]["input_ids"] = np.full(4, 77)
    assert collate_packed(batch)["input_ids"][1].tolist() == [77] * 4
    rows = packed.__getitems__([0, 1])
    rows[0] = _copies([rows[1]])[0]
    assert torch.equal(collate_packed(rows)["input_ids"][0], collate_packed(rows)["input_ids"][1])
