import functools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from lightning_resumable_data import (
    DatasetShardReader,
    ShardReader,
    TokenShardReader,
    open_token_shards,
    write_token_shards,
)
from lightning_resumable_data.shards import read_token_index


def documents(count: int = 7, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, size=int(rng.integers(5, 40))) for _ in range(count)]


def test_written_shards_hold_the_token_stream_in_order(tmp_path: Path) -> None:
    docs = documents()
    stream = np.concatenate(docs)
    index = write_token_shards(tmp_path, docs, seq_len=8, tokens_per_shard=40)
    whole = len(stream) // 8
    assert index.total_samples == whole
    assert index.dropped_tokens == len(stream) - whole * 8
    assert set(index.samples[:-1]) == {5}  # 40 tokens = 5 samples per shard, the last fewer
    readers = open_token_shards(tmp_path)
    assert [r.name for r in readers] == list(index.files)
    samples = np.concatenate([r.read_range(0, len(r)) for r in readers])
    np.testing.assert_array_equal(samples.reshape(-1), stream[: whole * 8])
    assert samples.dtype == np.uint16
    raw = json.loads((tmp_path / "index.json").read_text())
    assert raw["seq_len"] == 8
    assert raw["dtype"] == "uint16"
    assert [s["bytes"] for s in raw["shards"]] == [n * 16 for n in index.samples]


def test_opening_reads_sizes_without_loading_any_shard(tmp_path: Path) -> None:
    write_token_shards(tmp_path, documents(), seq_len=4, tokens_per_shard=16)
    readers = open_token_shards(tmp_path)
    assert all(isinstance(r, ShardReader) for r in readers)
    assert sum(len(r) for r in readers) > 0
    assert not any(r.loaded for r in readers)
    assert all(r.loads == 0 for r in readers)
    readers[1].read(0)  # a read loads on demand, once
    readers[1].read(1)
    assert [r.loads for r in readers[:3]] == [0, 1, 0]
    readers[1].close()
    assert not readers[1].loaded


@pytest.mark.parametrize("preload", [True, False])
def test_read_and_read_range_agree(tmp_path: Path, preload: bool) -> None:
    np.arange(60, dtype=np.uint32).tofile(tmp_path / "s.bin")
    reader = TokenShardReader(tmp_path / "s.bin", seq_len=6, dtype=np.uint32, preload=preload)
    assert len(reader) == 10
    block = reader.read_range(2, 5)
    assert block.shape == (3, 6)
    for offset in range(3):
        np.testing.assert_array_equal(block[offset], reader.read(2 + offset))
    assert reader.read(-1).tolist() == list(range(54, 60))
    kept = reader.read(0)
    reader.close()
    assert kept.tolist() == list(range(6))  # reads are copies, valid after close
    with pytest.raises(IndexError, match=r"index 10 is out of range for shard 's\.bin' of 10"):
        reader.read(10)
    with pytest.raises(IndexError, match=r"range \[4, 11\)"):
        reader.read_range(4, 11)


@pytest.mark.parametrize("shape", ["flat", "2d"])
def test_npy_shards_are_memory_mapped(tmp_path: Path, shape: str) -> None:
    tokens = np.arange(24, dtype=np.uint16)
    np.save(tmp_path / "s.npy", tokens if shape == "flat" else tokens.reshape(6, 4))
    reader = TokenShardReader(tmp_path / "s.npy", seq_len=4)
    assert len(reader) == 6
    assert reader.read(5).tolist() == [20, 21, 22, 23]


def test_index_less_directory_is_sized_from_file_sizes(tmp_path: Path) -> None:
    for number in range(3):
        np.full(12 * (number + 1), number, dtype=np.uint16).tofile(tmp_path / f"{number}.bin")
    readers = open_token_shards(tmp_path, seq_len=4, dtype=np.uint16)
    assert [len(r) for r in readers] == [3, 6, 9]
    assert readers[2].read(0).tolist() == [2, 2, 2, 2]


def test_readers_pickle_without_their_data(tmp_path: Path) -> None:
    write_token_shards(tmp_path, documents(), seq_len=4, tokens_per_shard=16)
    reader = open_token_shards(tmp_path)[0]
    expected = reader.read(1)
    copy = pickle.loads(pickle.dumps(reader))
    assert not copy.loaded
    np.testing.assert_array_equal(copy.read(1), expected)


def test_dataset_adapter_builds_lazily_from_a_factory() -> None:
    built: list[int] = []

    def build(start: int) -> list[int]:
        built.append(start)
        return list(range(start, start + 4))

    reader = DatasetShardReader(functools.partial(build, 10), length=4, name="s")
    assert isinstance(reader, ShardReader)
    assert len(reader) == 4
    assert built == []
    assert reader.read_range(1, 3) == [11, 12]
    reader.load()
    assert built == [10]
    reader.close()
    assert reader.read(3) == 13
    assert built == [10, 10]
    wrapped = DatasetShardReader([1, 2, 3])
    wrapped.close()
    assert wrapped.loaded  # a wrapped in-memory dataset is always resident


def test_dataset_adapter_errors() -> None:
    with pytest.raises(ValueError, match="needs length="):
        DatasetShardReader(lambda: [1, 2])
    with pytest.raises(ValueError, match="length=3 disagrees with len"):
        DatasetShardReader([1, 2], length=3)
    reader = DatasetShardReader(lambda: [1, 2], length=3, name="bad")
    with pytest.raises(ValueError, match="declared with length=3 but its factory built"):
        reader.load()


# -- bad input -------------------------------------------------------------------------------


def write(tmp_path: Path, shards: int = 3) -> None:
    write_token_shards(tmp_path, [np.arange(8 * 4 * shards)], seq_len=8, tokens_per_shard=32)


def test_missing_shard_is_named(tmp_path: Path) -> None:
    write(tmp_path)
    (tmp_path / "shard_00001.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"shard_00001.bin' is listed in index.json"):
        open_token_shards(tmp_path, verify=True)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TokenShardReader(tmp_path / "shard_00001.bin", seq_len=8)
    readers = open_token_shards(tmp_path)  # by default no file is touched: its load says so
    with pytest.raises(FileNotFoundError, match=r"shard_00001.bin' does not exist"):
        readers[1].load()
    assert not readers[1].loaded


def test_truncated_shard_is_named(tmp_path: Path) -> None:
    write(tmp_path)
    path = tmp_path / "shard_00002.bin"
    path.write_bytes(path.read_bytes()[:-16])  # one whole sample short
    with pytest.raises(ValueError, match=r"has 48 bytes, but index.json says 64"):
        open_token_shards(tmp_path, verify=True)
    readers = open_token_shards(tmp_path)
    with pytest.raises(ValueError, match=r"shard_00002.bin' holds 3 samples .* index says 4"):
        readers[2].read(0)


def test_size_not_a_multiple_of_the_sample_is_refused(tmp_path: Path) -> None:
    np.arange(10, dtype=np.uint16).tofile(tmp_path / "s.bin")
    with pytest.raises(ValueError, match=r"20 bytes of tokens, not a multiple of seq_len \* "):
        TokenShardReader(tmp_path / "s.bin", seq_len=4)
    with pytest.raises(ValueError, match="not a multiple"):
        open_token_shards(tmp_path, seq_len=4, dtype=np.uint16)


def test_index_disagreeing_with_itself_or_the_file(tmp_path: Path) -> None:
    write(tmp_path)
    raw = json.loads((tmp_path / "index.json").read_text())
    raw["shards"][0]["samples"] = 5  # 5 * 8 * 2 != 64 bytes
    (tmp_path / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"lists bytes=64, but samples \* seq_len \* itemsize"):
        read_token_index(tmp_path)
    raw["shards"][0]["bytes"] = 80  # consistent with itself, not with the file
    (tmp_path / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"has 64 bytes, but index\.json says 80"):
        open_token_shards(tmp_path, verify=True)
    with pytest.raises(ValueError, match="its index says 5"):
        TokenShardReader(tmp_path / "shard_00000.bin", seq_len=8, num_samples=5).load()


def test_empty_shard_lists_are_refused(tmp_path: Path) -> None:
    write(tmp_path)
    raw = json.loads((tmp_path / "index.json").read_text())
    raw["shards"] = []
    (tmp_path / "index.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="shard list is empty"):
        open_token_shards(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no files match"):
        open_token_shards(empty, seq_len=4, dtype=np.uint16)
    with pytest.raises(FileNotFoundError, match=r"no index\.json in"):
        open_token_shards(empty)


def test_open_arguments_must_agree_with_the_index(tmp_path: Path) -> None:
    write(tmp_path)
    with pytest.raises(ValueError, match=r"seq_len=4 disagrees with index\.json, which says 8"):
        open_token_shards(tmp_path, seq_len=4)
    with pytest.raises(ValueError, match="dtype='uint32' disagrees"):
        open_token_shards(tmp_path, dtype=np.uint32)


def test_writer_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"values in \[0, 70000\], outside dtype=uint16"):
        write_token_shards(tmp_path / "a", [np.array([0, 70000])], seq_len=1)
    with pytest.raises(ValueError, match="less than one sample of seq_len=8"):
        write_token_shards(tmp_path / "b", [np.arange(5)], seq_len=8)
    with pytest.raises(ValueError, match="tokens_per_shard=4 is smaller than seq_len=8"):
        write_token_shards(tmp_path / "c", [np.arange(16)], seq_len=8, tokens_per_shard=4)
    write(tmp_path / "d")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        write(tmp_path / "d")
    write_token_shards(tmp_path / "d", [np.arange(8)], seq_len=8, overwrite=True)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["index.json", "shard_00000.bin"]


def test_vanished_or_rewritten_file_fails_check(tmp_path: Path) -> None:
    write(tmp_path)
    readers = open_token_shards(tmp_path)
    readers[0].check()  # not opened: nothing to compare, no file touched
    readers[0].load()
    readers[1].load()
    readers[0].check()
    (tmp_path / "shard_00000.bin").unlink()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        readers[0].check()
    np.arange(8, dtype=np.uint16).tofile(tmp_path / "shard_00001.bin")
    with pytest.raises(ValueError, match="now holds 1 samples, it held 4"):
        readers[1].check()
