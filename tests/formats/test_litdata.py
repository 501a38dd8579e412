"""LitData chunks read natively, against corpora written by ``litdata.optimize`` itself.

The corpora come from ``tests/formats/write_litdata.py`` run under the peers' interpreter
(``LRD_PEERS_PYTHON``, default ``.venv-peers/bin/python``: ``make setup``); the expected items
come from the same rules, computed here without importing litdata.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.write_litdata import (
    BLOCK_SIZE,
    CORPORA,
    ITEMS,
    ROWS,
    SCALARS,
    pytree_item,
    row_item,
    scalar_item,
    token_doc,
)
from lightning_resumable_data import DistributedShardedDataset, StatefulDataLoader
from lightning_resumable_data.formats import _litdata_chunks
from lightning_resumable_data.formats.litdata import LitDataChunkReader, open_litdata

ROOT = Path(__file__).resolve().parents[2]
PYTREE = ["pytree", "zstd", "zstd_chunk", "zstd_sample"]  # the same items, four encodings


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = Path(os.environ.get("LRD_PEERS_PYTHON", ROOT / ".venv-peers" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no peers interpreter at {python} (litdata's writer): run `make setup`")
    out = tmp_path_factory.mktemp("litdata")
    script = Path(__file__).with_name("write_litdata.py")
    subprocess.run([str(python), str(script), str(out)], check=True, cwd=out, timeout=300)
    return out


@pytest.fixture
def copy_of(corpora: Path, tmp_path: Path) -> Any:
    def copy(name: str) -> Path:
        return Path(shutil.copytree(corpora / name, tmp_path / name))

    return copy


def assert_same(got: Any, want: Any, where: str = "item") -> None:
    """Equal values of the same kind: arrays and tensors by dtype, shape and values."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, np.ndarray):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, torch.Tensor):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got, want), where
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for number, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same(a, b, f"{where}[{number}]")
    else:
        assert got == want, where


def every_item(readers: list[LitDataChunkReader]) -> list[Any]:
    return [item for reader in readers for item in reader.read_range(0, len(reader))]


def ids(batch: list[dict[str, Any]]) -> list[int]:
    return [item["id"] for item in batch]


# -- every item read back ------------------------------------------------------------------


@pytest.mark.parametrize("name", PYTREE)
def test_every_item_of_every_encoding_reads_back_equal(corpora: Path, name: str) -> None:
    readers = open_litdata(corpora / name)
    assert len(readers) > 1  # several chunks
    items = every_item(readers)
    assert len(items) == ITEMS
    for i, item in enumerate(items):
        assert_same(item, pytree_item(i), f"{name} item {i}")


def test_the_corpora_cover_the_encodings_they_claim(corpora: Path) -> None:
    config = json.loads((corpora / "pytree" / "index.json").read_text())["config"]
    assert config["data_format"] == [
        "int", "str", "numpy", "no_header_numpy:2", "tensor", "no_header_tensor:1", "float",
        "bool", "bytes", "json", "pickle", "int", "str",
    ]  # fmt: skip
    levels = {n: json.loads((corpora / n / "index.json").read_text())["config"] for n in PYTREE}
    assert [levels[n]["compression_level"] for n in PYTREE] == [None, "batch", None, "sample"]
    assert all(f.endswith(".zstd.bin") for f in os.listdir(corpora / "zstd_chunk") if "chunk" in f)


def test_tuple_items_read_back_equal(corpora: Path) -> None:
    readers = open_litdata(corpora / "scalars")
    assert [len(r) for r in readers] == [7, 7, 7, 7, 2]
    assert every_item(readers) == [scalar_item(i) for i in range(SCALARS)]


def test_json_rows_read_back_equal(corpora: Path) -> None:
    assert every_item(open_litdata(corpora / "rows")) == [row_item(i) for i in range(ROWS)]


def expected_blocks(directory: Path, block_size: int) -> list[torch.Tensor]:
    """Per chunk: its documents' tokens (grouped as index.json says), cut into blocks."""
    chunks = json.loads((directory / "index.json").read_text())["chunks"]
    docs, blocks = iter(token_doc(i) for i in range(CORPORA["tokens"]["n"])), []
    for chunk in chunks:
        stream = torch.cat([next(docs) for _ in range(chunk["chunk_size"])])
        assert len(stream) == chunk["dim"]
        usable = len(stream) // block_size * block_size
        blocks += list(stream[:usable].reshape(-1, block_size))
    assert next(docs, None) is None  # every document is in a chunk
    return blocks


def test_token_blocks_are_the_chunks_token_streams_cut_into_block_size(corpora: Path) -> None:
    readers = open_litdata(corpora / "tokens", block_size=BLOCK_SIZE)
    want = expected_blocks(corpora / "tokens", BLOCK_SIZE)
    got = [block for reader in readers for block in reader.read_range(0, len(reader))]
    assert len(got) == len(want) == sum(map(len, readers))
    for a, b in zip(got, want, strict=True):
        assert_same(a, b)
    assert_same(readers[1].read(2), want[len(readers[0]) + 2])
    many = readers[0].read_many(np.array([3, 0]))
    assert_same(many[0], want[3])
    assert_same(many[1], want[0])


@settings(max_examples=25, deadline=None)
@given(block_size=st.integers(1, 30))
def test_any_block_size_reads_the_same_token_stream(corpora: Path, block_size: int) -> None:
    readers = open_litdata(corpora / "tokens", block_size=block_size)
    want = expected_blocks(corpora / "tokens", block_size)
    got = [block for reader in readers for block in reader.read_range(0, len(reader))]
    assert [b.tolist() for b in got] == [b.tolist() for b in want]


# -- random access, length, pickling -------------------------------------------------------


@pytest.mark.parametrize("name", ["pytree", "zstd", "zstd_sample"])
def test_random_access_in_shuffled_order(corpora: Path, name: str) -> None:
    readers = open_litdata(corpora / name)
    where = [(c, i) for c, reader in enumerate(readers) for i in range(len(reader))]
    starts = np.cumsum([0] + [len(r) for r in readers])
    for position in np.random.default_rng(3).permutation(len(where)).tolist():
        chunk, item = where[position]
        assert_same(readers[chunk].read(item), pytree_item(int(starts[chunk]) + item))
    assert_same(readers[0].read(-1), pytree_item(len(readers[0]) - 1))
    with pytest.raises(IndexError, match=r"index 10 is out of range for shard 'chunk-0-0\.bin'"):
        readers[0].read(10)


def test_len_without_touching_any_chunk(corpora: Path, tmp_path: Path) -> None:
    shutil.copy(corpora / "pytree" / "index.json", tmp_path / "index.json")  # no chunk files
    readers = open_litdata(tmp_path)
    assert [len(r) for r in readers] == [len(r) for r in open_litdata(corpora / "pytree")]
    assert sum(map(len, readers)) == ITEMS
    assert not any(r.opened or r.loaded for r in readers)
    tokens = open_litdata(corpora / "tokens", block_size=BLOCK_SIZE)
    assert sum(map(len, tokens)) == len(expected_blocks(corpora / "tokens", BLOCK_SIZE))
    assert not any(r.opened for r in tokens)


def test_a_reader_pickles_without_its_chunk(corpora: Path) -> None:
    reader = open_litdata(corpora / "zstd")[1]
    first = reader.read(4)
    blob = pickle.dumps(reader)
    assert len(blob) < 2000  # the index and a name, not the chunk
    copy = pickle.loads(blob)
    assert not copy.loaded
    assert_same(copy.read(4), first)
    reader.close()
    assert not reader.loaded
    assert reader.loads == 1
    assert_same(reader.read(4), first)
    assert reader.loads == 2


# -- through the sharded dataset: exact and elastic resume ---------------------------------


def make_loader(
    directory: Path, world: int = 1, rank: int = 0, workers: int = 0
) -> StatefulDataLoader:
    dataset = DistributedShardedDataset(open_litdata(directory), seed=5)
    return StatefulDataLoader(
        dataset, batch_size=3, sampler=dataset.sampler(world, rank), collate_fn=ids,
        num_workers=workers, persistent_workers=workers > 0,
    )  # fmt: skip


def run(loader: StatefulDataLoader, k: int | None = None) -> list[list[int]]:
    out: list[list[int]] = []
    for batch in loader:
        out.append(batch)
        if len(out) == k:
            break
    return out


@pytest.mark.parametrize(("name", "workers"), [("pytree", 0), ("zstd", 2)])
def test_exact_resume_mid_epoch(corpora: Path, name: str, workers: int) -> None:
    uninterrupted = run(make_loader(corpora / name, workers=workers))
    assert sorted(i for batch in uninterrupted for i in batch) == list(range(ITEMS))
    first = make_loader(corpora / name, workers=workers)
    seen = run(first, 5)
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make_loader(corpora / name, workers=workers)
    resumed.load_state_dict(state)
    assert seen + run(resumed) == uninterrupted


def test_two_ranks_resumed_on_one_read_every_item_once(corpora: Path) -> None:
    seen: list[int] = []
    state: dict[str, Any] = {}
    for rank in range(2):
        loader = make_loader(corpora / "pytree", world=2, rank=rank)
        seen += [i for batch in run(loader, 3) for i in batch]
        state = state or json.loads(json.dumps(loader.state_dict()))
    seen += [i for batch in run_resumed(corpora / "pytree", state) for i in batch]
    assert Counter(seen) == Counter(range(ITEMS))


def run_resumed(directory: Path, state: dict[str, Any]) -> list[list[int]]:
    loader = make_loader(directory, world=1, rank=0)
    loader.load_state_dict(state)
    return run(loader)


def test_token_blocks_batch_through_the_sharded_dataset(corpora: Path) -> None:
    dataset = DistributedShardedDataset(open_litdata(corpora / "tokens", block_size=BLOCK_SIZE))
    loader = StatefulDataLoader(dataset, batch_size=4, sampler=dataset.sampler(1, 0))
    rows = [row for batch in loader for row in batch.tolist()]
    want = [b.tolist() for b in expected_blocks(corpora / "tokens", BLOCK_SIZE)]
    assert sorted(rows) == sorted(want)


# -- bad input -----------------------------------------------------------------------------


def test_a_missing_chunk_names_the_file_and_the_item(copy_of: Any) -> None:
    directory = copy_of("pytree")
    readers = open_litdata(directory)
    (directory / "chunk-0-2.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"chunk-0-2.bin' does not exist \(reading item 3 "):
        readers[2].read(3)
    assert_same(readers[1].read(3), pytree_item(13))  # the others still read
    with pytest.raises(FileNotFoundError, match=r"chunk-0-2.bin' does not exist"):
        open_litdata(directory, verify=True)


@pytest.mark.parametrize("name", ["pytree", "zstd_chunk"])
def test_a_chunk_of_the_wrong_size_names_the_file_and_the_item(copy_of: Any, name: str) -> None:
    directory = copy_of(name)
    path = sorted(directory.glob("chunk-0-1*"))[0]
    if name == "zstd_chunk":  # a whole-file zstd chunk: its inflated size is checked
        data = _litdata_chunks.zstd_decompress(path.read_bytes())
        zstandard = pytest.importorskip("zstandard")  # the formats extra's codec

        path.write_bytes(zstandard.ZstdCompressor().compress(data[:-5]))
    else:
        path.write_bytes(path.read_bytes()[:-5])
    what = "inflates to" if name == "zstd_chunk" else "holds"
    with pytest.raises(ValueError, match=rf"{path.name}' {what} \d+ bytes but its index.json says "
                       r"chunk_bytes=\d+ \(reading item 2 of its 10\)"):  # fmt: skip
        open_litdata(directory)[1].read(2)
    if name == "pytree":
        with pytest.raises(ValueError, match=r"chunk-0-1\.bin' holds"):
            open_litdata(directory, verify=True)


def test_a_corrupt_item_names_the_file_and_the_item(copy_of: Any) -> None:
    directory = copy_of("pytree")
    path = directory / "chunk-0-0.bin"
    data = bytearray(path.read_bytes())
    (start,) = struct.unpack_from("<I", data, 4 + 4 * 4)  # item 4: 13 leaf sizes, then leaves
    intact = bytes(data)
    struct.pack_into("<I", data, start + 4, 999)  # its str leaf's size
    path.write_bytes(bytes(data))
    reader = open_litdata(directory)[0]
    with pytest.raises(ValueError, match=r"item 4 of LitData chunk '.*chunk-0-0.bin' cannot be "
                       r"decoded: its leaf sizes"):  # fmt: skip
        reader.read(4)
    assert_same(reader.read(3), pytree_item(3))
    data = bytearray(intact)
    data[start + 4 * 13 + 8 : start + 4 * 13 + 10] = b"\xff\xfe"  # the str leaf: not UTF-8
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"item 4 of LitData chunk .* leaf 1 \('str'"):
        open_litdata(directory)[0].read(4)


def test_a_corrupt_offset_table_names_the_file(copy_of: Any) -> None:
    directory = copy_of("scalars")
    path = directory / "chunk-0-0.bin"
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 4 + 4 * 3, 5)  # item 2 starts before item 1
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"chunk-0-0.bin' is corrupt \(reading item 6 .*offset"):
        open_litdata(directory)[0].read(6)


def test_what_cannot_be_read_is_refused_at_open(
    corpora: Path, copy_of: Any, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"encrypted \(\{'algorithm': 'fernet', 'level': 'chunk'"):
        open_litdata(corpora / "encrypted")
    with pytest.raises(ValueError, match=r"TokensLoader: pass the block size .* block_size=None"):
        open_litdata(corpora / "tokens")
    with pytest.raises(ValueError, match="block_size=8 is for TokensLoader datasets"):
        open_litdata(corpora / "pytree", block_size=8)
    with pytest.raises(FileNotFoundError, match=r"no index\.json in"):
        open_litdata(tmp_path)
    directory = copy_of("scalars")
    index = json.loads((directory / "index.json").read_text())
    index["config"]["data_format"][2] = "hologram:v2"
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"leaf 2 .* serializer 'hologram:v2', which .* cannot"):
        open_litdata(directory)


def test_zstd_without_a_zstd_module_names_the_pip_package(
    corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("compression", "zstandard", "zstd"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    reader = open_litdata(corpora / "zstd")[0]
    assert len(reader) == 10  # opening needs no codec
    with pytest.raises(ModuleNotFoundError, match="pip install zstandard"):
        reader.read(0)


def test_check_detects_a_chunk_changed_after_opening(copy_of: Any) -> None:
    directory = copy_of("pytree")
    readers = open_litdata(directory)
    readers[1].check()  # not opened: nothing to compare
    readers[1].read(0)
    readers[1].check()
    with (directory / "chunk-0-1.bin").open("ab") as file:
        file.write(b"\0")
    with pytest.raises(ValueError, match=r"chunk-0-1.bin' now holds \d+ bytes, it held"):
        readers[1].check()
    (directory / "chunk-0-1.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"chunk-0-1\.bin' does not exist"):
        readers[1].check()


def test_an_arrow_footer_chunk_reads_its_rows(tmp_path: Path) -> None:
    """litdata.optimize stores dicts of strings, numbers and lists as an Arrow IPC footer when
    pyarrow is installed (not in the peers' venv): the layout of append_arrow_row_footer."""
    pa = pytest.importorskip("pyarrow")
    rows = [row_item(i) for i in range(3)]
    sink = pa.BufferOutputStream()
    table = pa.Table.from_pylist(rows)
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    ipc = sink.getvalue().to_pybytes()
    header = np.array([3, 20, 20, 20, 20], "<u4").tobytes()
    chunk = header + ipc + struct.pack("<I", len(ipc)) + b"LDARW01\0"
    (tmp_path / "chunk-0-0.bin").write_bytes(chunk)
    leaf: dict[str, Any] = {"type": None, "context": None, "children_spec": []}
    spec = {
        "type": "builtins.dict",
        "context": json.dumps(list(rows[0])),
        "children_spec": [leaf] * 3,
    }
    config = {"data_format": ["int", "str", "json"], "item_loader": "PyTreeLoader",
              "data_spec": json.dumps([1, spec])}  # fmt: skip
    entry = {"filename": "chunk-0-0.bin", "chunk_size": 3, "chunk_bytes": len(chunk), "dim": None}
    (tmp_path / "index.json").write_text(json.dumps({"chunks": [entry], "config": config}))
    assert every_item(open_litdata(tmp_path)) == rows


def test_token_blocks_written_as_tensors_reach_a_collate_as_tensors(corpora: Path) -> None:
    """A batch read through the dataset (what DataLoader workers call) keeps their type."""
    readers = open_litdata(corpora / "tokens", block_size=BLOCK_SIZE)
    dataset = DistributedShardedDataset(readers, seed=0)
    rows = dataset.__getitems__([0, 1, 2])
    assert all(isinstance(row, torch.Tensor) for row in rows), [type(r) for r in rows]
    assert torch.equal(torch.stack(rows)[1], dataset[1])
