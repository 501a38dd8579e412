"""``sample_pieces``/``document_samples`` name exactly the documents a packed sample holds.

The pieces of a sample, read back through the corpus (and through the file bytes they name),
are the sample's tokens; the pieces of samples ``0..n-1`` of an epoch cover every document's
tokens exactly once, in the epoch's document order; ``document_samples`` is the inverse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.documents import (
    DocumentCorpus,
    PackedDataset,
    open_megatron,
    open_parquet,
    write_megatron,
)
from lightning_resumable_data.documents.provenance import (
    Piece,
    document_samples,
    sample_pieces,
)


def _tokens(corpus: DocumentCorpus, pieces: list[Piece], eos: int | None) -> list[int]:
    out: list[int] = []
    for piece in pieces:
        out += corpus.document(piece.document)[piece.start : piece.stop].tolist()
        if piece.eos:
            assert eos is not None
            out.append(eos)
    return out


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=60),
    seq_len=st.integers(1, 25),
    eos=st.sampled_from([None, 0]),
    stride=st.integers(1, 9),
    epoch=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_pieces_cover_every_document_once_in_the_epoch_order(
    lengths: list[int], seq_len: int, eos: int | None, stride: int, epoch: int, shuffle: bool
) -> None:
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    corpus = DocumentCorpus.from_arrays(np.arange(1, offsets[-1] + 1), offsets)
    sep = 0 if eos is None else 1
    if sum(lengths) + sep * len(lengths) < seq_len:
        return
    dataset = PackedDataset(
        corpus, seq_len, eos_id=eos, seed=7, stride=stride, shuffle_documents=shuffle
    )
    pieces = [p for sample in sample_pieces(dataset, range(len(dataset)), epoch) for p in sample]
    order = dataset._order(epoch)
    positions = np.arange(len(lengths), dtype=np.int64)
    expected = (positions if order is None else order(positions)).tolist()
    # walk the stream: every document in the order, every token once, then the tail
    covered: dict[int, list[tuple[int, int, bool]]] = {}
    for piece in pieces:
        covered.setdefault(piece.document, []).append((piece.start, piece.stop, piece.eos))
    seen = list(dict.fromkeys(p.document for p in pieces))
    assert seen == expected[: len(seen)]
    tail = dataset.tail_tokens
    for position, document in enumerate(expected):
        ranges = covered.get(document, [])
        joined = [t for start, stop, _ in ranges for t in range(start, stop)]
        if position < len(seen) - 1:  # whole documents before the last one reached
            assert joined == list(range(lengths[document])), document
            assert [e for *_, e in ranges] == [False] * (len(ranges) - 1) + [bool(sep)]
        assert document_samples(dataset, document, epoch) == [
            p for p in pieces if p.document == document
        ]
    stored = sum(p.stop - p.start + p.eos for p in pieces)
    assert stored == len(dataset) * seq_len == dataset.stream_tokens - tail
    for number, sample in enumerate(sample_pieces(dataset, range(len(dataset)), epoch)):
        dataset.set_epoch(epoch)
        assert _tokens(corpus, sample, eos) == dataset[number]["input_ids"].tolist()


def test_megatron_pieces_name_the_bin_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    documents = [rng.integers(1, 60000, size=int(rng.integers(1, 50))) for _ in range(200)]
    write_megatron(tmp_path / "corpus", documents)
    corpus = open_megatron(tmp_path / "corpus")
    for mode in ("concat", "pad"):
        dataset = PackedDataset(corpus, 32, mode=mode, eos_id=0, seed=4)
        dataset.set_epoch(2)
        wanted = [0, 5, 5, len(dataset) - 1]
        for number, sample in zip(wanted, sample_pieces(dataset, wanted, 2), strict=True):
            got = dataset[number]["input_ids"].tolist()
            assert _tokens(corpus, sample, 0) == got[: len(_tokens(corpus, sample, 0))]
            for piece in sample:
                assert piece.file == str(tmp_path / "corpus.bin")
                assert piece.row == piece.document
                assert piece.byte_offset is not None
                assert piece.byte_length is not None
                raw = (tmp_path / "corpus.bin").read_bytes()
                at = raw[piece.byte_offset : piece.byte_offset + piece.byte_length]
                chunk = documents[piece.document][piece.start : piece.stop]
                assert np.frombuffer(at, np.uint16).tolist() == chunk.tolist()
    with pytest.raises(IndexError, match="out of range"):
        sample_pieces(dataset, [len(dataset)], 0)
    with pytest.raises(IndexError, match="document 200 is out of range"):
        document_samples(dataset, 200, 0)


def test_parquet_pieces_name_the_file_and_row(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    documents = [rng.integers(1, 900, size=int(rng.integers(1, 40))).tolist() for _ in range(90)]
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]
    pq.write_table(pa.table({"input_ids": documents[:50]}), paths[0], row_group_size=16)
    pq.write_table(pa.table({"input_ids": documents[50:]}), paths[1])
    corpus = open_parquet(paths)
    dataset = PackedDataset(corpus, 24, eos_id=0, seed=9)
    pieces = [p for s in sample_pieces(dataset, range(len(dataset)), 1) for p in s]
    for piece in pieces:
        assert piece.file is not None
        assert piece.row is not None
        assert piece.byte_offset is None
        rows = pq.read_table(piece.file).column("input_ids").to_pylist()
        assert rows[piece.row] == documents[piece.document]
    assert {p.file for p in pieces} == {str(p) for p in paths}


def test_arrow_pieces_name_the_arrow_file_and_row(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from lightning_resumable_data.documents import open_hf_dataset

    rng = np.random.default_rng(3)
    documents = [rng.integers(1, 900, size=int(rng.integers(1, 30))).tolist() for _ in range(70)]
    datasets.Dataset.from_dict({"input_ids": documents}).save_to_disk(tmp_path, num_shards=2)
    corpus = open_hf_dataset(tmp_path)
    dataset = PackedDataset(corpus, 20, eos_id=0, seed=2)
    pieces = [p for s in sample_pieces(dataset, range(len(dataset)), 0) for p in s]
    for piece in pieces:
        assert piece.file is not None
        assert piece.file.endswith(".arrow")
        assert piece.row is not None
        table = datasets.Dataset.from_file(piece.file)
        assert table[piece.row]["input_ids"] == documents[piece.document]
    assert len({p.file for p in pieces}) == 2
