"""Format compatibility with the peers' own writers, and bad input."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from datasets import Dataset
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

from lightning_resumable_data.documents import (
    DocumentCorpus,
    open_hf_dataset,
    open_megatron,
    open_parquet,
    open_token_shard_documents,
    write_megatron,
)
from lightning_resumable_data.shards import write_token_shards


def _documents(count: int, high: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, int(rng.integers(1, 50))) for _ in range(count)]


def _all(corpus: DocumentCorpus) -> list[list[int]]:
    return [corpus.document(i).tolist() for i in range(len(corpus))]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.uint8])
def test_megatron_builder_reads_back(tmp_path: Path, dtype: type[np.integer]) -> None:
    docs = _documents(40, np.iinfo(dtype).max)
    prefix = str(tmp_path / "corpus")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for doc in docs:
        builder.add_item(torch.from_numpy(doc.astype(np.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    corpus = open_megatron(prefix)
    assert corpus.dtype == np.dtype(dtype)
    assert _all(corpus) == [d.tolist() for d in docs]


def test_megatron_multi_sequence_documents(tmp_path: Path) -> None:
    """--split-sentences corpora: a document is several sequences."""
    docs = _documents(12, 1000)
    prefix = str(tmp_path / "sentences")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for doc in docs:
        cut = max(1, doc.size // 2)
        lengths = [cut, doc.size - cut] if doc.size > 1 else [1]
        builder.add_document(torch.from_numpy(doc), lengths)
    builder.finalize(prefix + ".idx")
    assert _all(open_megatron(prefix)) == [d.tolist() for d in docs]


def test_our_writer_reads_in_megatron(tmp_path: Path) -> None:
    docs = _documents(30, 60000)
    prefix = str(tmp_path / "ours")
    write_megatron(prefix, docs, dtype=np.uint16)
    theirs = IndexedDataset(prefix)
    assert len(theirs) == len(docs)
    assert [theirs[i].tolist() for i in range(len(docs))] == [d.tolist() for d in docs]
    assert _all(open_megatron(prefix)) == [d.tolist() for d in docs]


def test_megatron_corpus_pickles_by_reopening(tmp_path: Path) -> None:
    prefix = str(tmp_path / "c")
    write_megatron(prefix, [[1, 2], [3]])
    corpus = open_megatron(prefix)
    payload = pickle.dumps(corpus)
    assert len(payload) < 400  # the path, not the tokens
    assert _all(pickle.loads(payload)) == [[1, 2], [3]]


def test_hf_save_to_disk_and_parquet(tmp_path: Path) -> None:
    docs = [d.tolist() for d in _documents(50, 50000)]
    dataset = Dataset.from_dict({"text": [str(i) for i in range(50)], "input_ids": docs})
    dataset.save_to_disk(str(tmp_path / "disk"), max_shard_size=2000)  # several files
    assert _all(open_hf_dataset(tmp_path / "disk")) == docs
    sliced = dataset.select(range(10, 30))  # an indices mapping: flatten before saving
    sliced.flatten_indices().save_to_disk(str(tmp_path / "sliced"))
    assert _all(open_hf_dataset(tmp_path / "sliced")) == docs[10:30]
    dataset.to_parquet(str(tmp_path / "a.parquet"))
    assert _all(open_parquet(tmp_path / "a.parquet")) == docs
    assert _all(open_parquet([tmp_path / "a.parquet"] * 2)) == docs * 2


def test_numpy_and_token_shards(tmp_path: Path) -> None:
    corpus = DocumentCorpus.from_arrays(np.arange(10), [0, 4, 5, 10])
    assert _all(corpus) == [[0, 1, 2, 3], [4], [5, 6, 7, 8, 9]]
    docs = [[1, 2, 3, 0], [4, 0], [5, 6, 0], [7, 8, 9, 0]]
    write_token_shards(tmp_path, docs, seq_len=2, tokens_per_shard=4)
    got = open_token_shard_documents(tmp_path, eos_id=0)
    # shards of 4 tokens: [1 2 3 0] [4 0 5 6] [0 7 8 9] (the last token is dropped)
    assert _all(got) == [[1, 2, 3], [4], [5, 6], [7, 8, 9]]
    assert open_token_shard_documents(tmp_path).lengths.tolist() == [2] * 6


# ----------------------------------------------------------------------------- bad input


def _write(tmp_path: Path) -> str:
    prefix = str(tmp_path / "bad")
    write_megatron(prefix, [[1, 2, 3], [4, 5]])
    return prefix


def test_truncated_bin(tmp_path: Path) -> None:
    prefix = _write(tmp_path)
    Path(prefix + ".bin").write_bytes(Path(prefix + ".bin").read_bytes()[:-2])
    with pytest.raises(ValueError, match=r"bad\.bin' has 8 bytes.*10.*truncated"):
        open_megatron(prefix)


def test_bin_longer_than_idx(tmp_path: Path) -> None:
    prefix = _write(tmp_path)
    write_megatron(str(tmp_path / "other"), [[1, 2, 3, 4, 5, 6]])
    Path(prefix + ".bin").write_bytes(Path(str(tmp_path / "other.bin")).read_bytes())
    with pytest.raises(ValueError, match=r"longer than its index.*two different runs"):
        open_megatron(prefix)


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (0, b"TNTIDX\x00\x00\x00", "magic"),
        (9, struct.pack("<Q", 2), "version 2"),
        (17, struct.pack("<B", 6), r"dtype code 6 \(float64, not a token dtype\)"),
        (17, struct.pack("<B", 9), "dtype code 9"),
        (18, struct.pack("<Q", 3), "truncated or its header is corrupt"),
    ],
)
def test_bad_idx_header(tmp_path: Path, offset: int, value: bytes, message: str) -> None:
    prefix = _write(tmp_path)
    raw = bytearray(Path(prefix + ".idx").read_bytes())
    raw[offset : offset + len(value)] = value
    Path(prefix + ".idx").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=message) as error:
        open_megatron(prefix)
    assert "bad.idx" in str(error.value)


def test_truncated_idx_and_missing_files(tmp_path: Path) -> None:
    prefix = _write(tmp_path)
    Path(prefix + ".idx").write_bytes(Path(prefix + ".idx").read_bytes()[:-8])
    with pytest.raises(ValueError, match="truncated"):
        open_megatron(prefix)
    Path(prefix + ".idx").write_bytes(b"MMIDIDX")
    with pytest.raises(ValueError, match="shorter than the 34-byte header"):
        open_megatron(prefix)
    with pytest.raises(FileNotFoundError, match=r"nothere\.idx"):
        open_megatron(tmp_path / "nothere")


def test_pointers_disagree(tmp_path: Path) -> None:
    prefix = _write(tmp_path)
    raw = bytearray(Path(prefix + ".idx").read_bytes())
    raw[34 + 8 + 8 : 34 + 8 + 16] = struct.pack("<q", 2)  # second (and last) pointer
    Path(prefix + ".idx").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="last sequence points at byte 2"):
        open_megatron(prefix)
    raw[34 + 8 + 8 : 34 + 8 + 16] = struct.pack("<q", 6)
    raw[34 + 8 : 34 + 8 + 8] = struct.pack("<q", 1)  # first pointer
    Path(prefix + ".idx").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="sequence 0 points at byte 1"):
        open_megatron(prefix)


def test_verify_pointers_checks_every_pointer(tmp_path: Path) -> None:
    prefix = str(tmp_path / "three")
    write_megatron(prefix, [[1], [2, 3], [4]])
    raw = bytearray(Path(prefix + ".idx").read_bytes())
    pointers = 34 + 4 * 3
    raw[pointers + 8 : pointers + 16] = struct.pack("<q", 4)  # the middle pointer: 2 -> 4
    Path(prefix + ".idx").write_bytes(bytes(raw))
    assert len(open_megatron(prefix)) == 3  # the cheap check sees first, last and sizes
    with pytest.raises(ValueError, match=r"sequence 1 points at byte 4.*end at byte 2"):
        open_megatron(prefix, verify_pointers=True)


def test_empty_document(tmp_path: Path) -> None:
    prefix = str(tmp_path / "empty")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for doc in ([1, 2], [], [3]):
        builder.add_item(torch.tensor(doc, dtype=torch.int64))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    with pytest.raises(ValueError, match=r"empty\.idx' holds 1 empty document.*document 1"):
        open_megatron(prefix)
    with pytest.raises(ValueError, match="empty document"):
        DocumentCorpus.from_arrays([1, 2], [0, 2, 2])


def test_token_that_does_not_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\[-1, 5\], outside uint16.*wider dtype"):
        write_megatron(tmp_path / "x", [[5, -1]])
    with pytest.raises(TypeError, match="float64 has no Megatron code"):
        write_megatron(tmp_path / "x", [[5]], dtype=np.float64)


def test_bad_columns(tmp_path: Path) -> None:
    Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(str(tmp_path / "text"))
    with pytest.raises(ValueError, match=r"no column 'input_ids'; its columns are \['text'\]"):
        open_hf_dataset(tmp_path / "text")
    Dataset.from_dict({"input_ids": [[0.5], [1.5]]}).save_to_disk(str(tmp_path / "floats"))
    with pytest.raises(TypeError, match=r"list<item: double>.*list of integer"):
        open_hf_dataset(tmp_path / "floats")
    pq.write_table(pa.table({"input_ids": ["a", "b"]}), tmp_path / "s.parquet")
    with pytest.raises(TypeError, match="has type string"):
        open_parquet(tmp_path / "s.parquet")
    pq.write_table(pa.table({"input_ids": [[1], None]}), tmp_path / "n.parquet")
    with pytest.raises(ValueError, match="null documents"):
        open_parquet(tmp_path / "n.parquet")
    with pytest.raises(FileNotFoundError, match=r"no state\.json"):
        open_hf_dataset(tmp_path)
