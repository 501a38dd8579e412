"""MDS shards written by MosaicML Streaming's own MDSWriter, read back by ``open_mds``.

The corpora come from ``write_mds.py``, run under the peers' interpreter
(``LRD_PEERS_PYTHON``, default ``.venv-peers/bin/python``, built by ``make setup``); the
expected samples come from the same rule, :func:`write_mds.sample_fields`, computed here.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.write_mds import COLUMNS, SAMPLES, SCALARS, sample_fields
from lightning_resumable_data import (
    DistributedShardedDataset,
    ShardedDataLoader,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.formats.mds import MDSShardReader, mds_pil_args, open_mds

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("write_mds.py")
# compression -> a module that decodes it in this process (None: the standard library)
CODECS = {
    "plain": None,
    "gz": None,
    "bz2": None,
    "zstd": "zstandard",  # or zstd; the formats extra installs zstandard
    "br": "brotli",
    "snappy": "snappy",
}
EXPECTED = [sample_fields(i) for i in range(SAMPLES)]

try:
    from PIL import Image
except ImportError:  # the pixel checks need PIL; the byte-level checks do not
    Image = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = Path(os.environ.get("LRD_PEERS_PYTHON", ROOT / ".venv-peers/bin/python"))
    if not python.exists():
        pytest.skip(
            f"no peers' interpreter at {python}: run `make setup` (or set LRD_PEERS_PYTHON)"
        )
    out = tmp_path_factory.mktemp("mds")
    done = subprocess.run(
        [str(python), str(WRITER), str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"write_mds.py failed:\n{done.stderr[-4000:]}"
    return out


def corpus(corpora: Path, name: str, tmp_path: Path | None = None) -> Path:
    """The corpus ``name`` (a private copy under ``tmp_path`` for a test that breaks it)."""
    module = CODECS[name]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} shards need the {module} package in this interpreter")
    if tmp_path is None:
        return corpora / name
    return Path(shutil.copytree(corpora / name, tmp_path / name))


def readers(directory: Path, **kwargs: Any) -> list[MDSShardReader]:
    return open_mds(directory, allow_unsafe_types=True, **kwargs)


def png_size(value: bytes) -> tuple[int, int]:
    assert value[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = np.frombuffer(value, ">u4", 2, 16).tolist()
    return width, height


def assert_image(name: str, value: bytes, pixels: np.ndarray) -> None:
    height, width = pixels.shape[:2]
    if name == "raw":  # MDS's pil: exact raw pixels, no codec
        mode = "L" if pixels.ndim == 2 else {3: "RGB", 4: "RGBA"}[pixels.shape[2]]
        assert mds_pil_args(value) == (mode, (width, height), pixels.tobytes())
        return
    if name == "png":
        assert png_size(value) == (width, height)
    else:
        assert value[:2] == b"\xff\xd8"
        assert value[-2:] == b"\xff\xd9"
    if Image is not None:
        image = Image.open(BytesIO(value))
        assert image.size == (width, height)
        if name == "png":  # lossless: the very pixels
            assert np.array_equal(np.asarray(image), pixels)


def assert_sample(got: dict[str, Any], i: int) -> None:
    want = EXPECTED[i]
    assert list(got) == sorted(COLUMNS)  # MDSWriter sorts the columns
    for name in ("id", "big", "str_int", "text", "blob", "str_float", "meta", "obj"):
        assert type(got[name]) is type(want[name]), (i, name)
        assert got[name] == want[name], (i, name)
    assert isinstance(got["str_decimal"], Decimal)
    assert got["str_decimal"] == want["str_decimal"]
    for dtype in SCALARS:  # NumPy scalars, as MDS decodes them, bit for bit
        value = got[f"s_{dtype}"]
        assert type(value) is np.dtype(dtype).type, (i, dtype, type(value))
        assert value.tobytes() == want[f"s_{dtype}"].tobytes(), (i, dtype)
    for name in ("array", "array_f32", "array_fixed"):
        value = got[name]
        assert isinstance(value, np.ndarray), (i, name)
        assert value.flags.writeable, (i, name)
        assert (value.dtype, value.shape) == (want[name].dtype, want[name].shape), (i, name)
        assert value.tobytes() == want[name].tobytes(), (i, name)
    for name in ("jpg", "png", "raw"):
        assert isinstance(got[name], bytes)
        assert_image(name, got[name], want[name])
    for name, single in (("jpgs", "jpg"), ("pngs", "png")):
        assert isinstance(got[name], list), (i, name)
        assert len(got[name]) == len(want[name]), (i, name)
        for value, pixels in zip(got[name], want[name], strict=True):
            assert_image(single, value, pixels)


@pytest.mark.parametrize("name", list(CODECS))
def test_every_sample_reads_back_in_any_order(corpora: Path, name: str) -> None:
    shards = readers(corpus(corpora, name))
    assert len(shards) > 5
    assert len({len(r) for r in shards}) > 1
    starts = np.cumsum([0] + [len(r) for r in shards])
    assert starts[-1] == SAMPLES
    order = np.random.default_rng(0).permutation(SAMPLES)  # random access, across shards
    for i in order.tolist():
        number = int(np.searchsorted(starts, i, side="right")) - 1
        assert_sample(shards[number].read(i - int(starts[number])), i)
    for shard, start in zip(shards, starts.tolist(), strict=False):  # batched reads agree
        for j, sample in enumerate(shard.read_range(0, len(shard))):
            assert_sample(sample, start + j)
        local = order[(order >= start) & (order < start + len(shard))] - start
        for j, sample in zip(local.tolist(), shard.read_many(local), strict=True):
            assert_sample(sample, start + j)
    assert all(r.loads == 1 for r in shards)  # each shard read (and decompressed) once


def test_len_and_columns_come_from_the_index_without_touching_a_shard(
    corpora: Path, tmp_path: Path
) -> None:
    directory = corpus(corpora, "gz", tmp_path)
    index = json.loads((directory / "index.json").read_text())
    for path in directory.glob("shard.*"):
        path.unlink()  # nothing to read: only the index is
    shards = readers(directory / "index.json")
    assert [len(r) for r in shards] == [s["samples"] for s in index["shards"]]
    assert [r.name for r in shards] == [s["raw_data"]["basename"] for s in index["shards"]]
    assert not any(r.loaded or r.opened for r in shards)
    assert [c.name for c in shards[0].columns] == sorted(COLUMNS)
    with pytest.raises(FileNotFoundError, match=r"sample 3: MDS shard file .*shard.00000.mds.gz"):
        shards[0].read(3)
    with pytest.raises(FileNotFoundError, match=r"shard.00000.mds.gz' does not exist"):
        readers(directory, verify=True)


def test_mapped_and_cached_shards_read_the_same(corpora: Path, tmp_path: Path) -> None:
    mapped = readers(corpus(corpora, "plain"), preload=False)
    assert_sample(mapped[1].read(2), len(mapped[0]) + 2)
    cache = corpus(corpora, "gz", tmp_path)  # Streaming's cache keeps the raw file only
    for path in cache.glob("*.gz"):
        path.with_suffix("").write_bytes(gzip.decompress(path.read_bytes()))
        path.unlink()
    shards = readers(cache)
    assert shards[0].path.name == "shard.00000.mds"
    assert_sample(shards[0].read(0), 0)


def test_a_reader_pickles_without_its_data(corpora: Path) -> None:
    shard = readers(corpus(corpora, "zstd"))[2]
    shard.load()
    blob = pickle.dumps(shard)
    assert len(blob) < 4_000  # the index entry, not the shard
    copy = pickle.loads(blob)
    assert shard.loaded
    assert not copy.loaded
    start = sum(len(r) for r in readers(corpus(corpora, "zstd"))[:2])
    assert_sample(copy.read(1), start + 1)


def ids(samples: list[dict[str, Any]]) -> list[int]:
    """The loaders' collation: the sample ids (a module function: workers unpickle it)."""
    return [sample["id"] for sample in samples]


def sharded(
    shards: Path | list[MDSShardReader], world: int = 1, rank: int = 0, **kwargs: Any
) -> ShardedDataLoader:
    kwargs.setdefault("multiprocessing", False)
    shards = readers(shards) if isinstance(shards, Path) else shards
    return ShardedDataLoader(
        shards, 4, seed=3, num_replicas=world, dp_rank=rank, collate_fn=ids, **kwargs
    )


def take(loader: Any, k: int) -> tuple[list[list[int]], dict[str, Any]]:
    out: list[list[int]] = []
    for batch in loader if k else ():
        out.append(batch)
        if len(out) == k:
            break
    return out, json.loads(json.dumps(loader.state_dict()))


@pytest.mark.parametrize(("k", "multiprocessing"), [(0, False), (5, False), (11, True)])
def test_sharded_loader_resumes_mid_epoch_exactly(
    corpora: Path, k: int, multiprocessing: bool
) -> None:
    directory = corpus(corpora, "gz")
    reference = sharded(directory)
    whole = [b for _ in range(2) for b in reference]  # two epochs
    reference.close()
    assert sorted(i for b in whole[:16] for i in b) == list(range(SAMPLES))
    first = sharded(directory, multiprocessing=multiprocessing)
    seen, state = take(first, k)
    first.close()
    resumed = sharded(directory, multiprocessing=multiprocessing)
    resumed.load_state_dict(state)
    rest = [b for _ in range(2) for b in resumed]
    resumed.close()
    assert seen + rest == whole


def test_stateful_loader_resumes_mid_epoch_exactly(corpora: Path) -> None:
    def loader() -> StatefulDataLoader:
        dataset = DistributedShardedDataset(readers(corpus(corpora, "plain")), seed=5)
        return StatefulDataLoader(
            dataset, batch_size=3, sampler=dataset.sampler(1, 0), collate_fn=ids
        )

    whole = list(loader())
    seen, state = take(first := loader(), 7)
    assert state["sampler"]["kind"] == "ShardedSampler"
    del first
    resumed = loader()
    resumed.load_state_dict(state)
    assert seen + list(resumed) == whole


def test_two_ranks_resume_on_one_reading_every_sample_once(corpora: Path) -> None:
    directory = corpus(corpora, "zstd")
    consumed, states = [], []
    for rank in range(2):
        batches, state = take(sharded(directory, 2, rank), 3)
        consumed += [i for b in batches for i in b]
        states.append(state)
    assert states[0] == states[1]
    assert states[0]["consumed"] == 24
    resumed = sharded(directory, 1, 0)
    resumed.load_state_dict(states[0])
    rest = [i for b in resumed for i in b]
    assert Counter(consumed + rest) == Counter(range(SAMPLES))  # every sample exactly once


def test_check_detects_a_shard_changed_after_opening(corpora: Path, tmp_path: Path) -> None:
    directory = corpus(corpora, "plain", tmp_path)
    shards = readers(directory)
    _, state = take(sharded(shards), 2)
    shard = shards[[r.loaded for r in shards].index(True)]
    shard.check()  # unchanged
    resumed = sharded(readers(directory, verify=True))  # a resume checks these shards
    with shard.path.open("ab") as file:
        file.write(b"\0")
    with pytest.raises(ValueError, match=rf"{shard.name}' has \d+ bytes, but its index says"):
        shard.check()
    with pytest.raises(StateMismatchError, match=rf"Cannot resume over shard \d+ \('{shard.name}'"):
        resumed.load_state_dict(state)
    shard.path.unlink()
    with pytest.raises(FileNotFoundError, match=f"{shard.name}' does not exist"):
        shard.check()


def patch(path: Path, at: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(at)
        file.write(data)


def u32(path: Path, at: int) -> int:
    return int(np.fromfile(path, "<u4", 1, offset=at)[0])


def test_broken_layouts_name_the_shard_and_the_sample(corpora: Path, tmp_path: Path) -> None:
    directory = corpus(corpora, "plain", tmp_path)
    path = directory / "shard.00001.mds"
    offset = [4 + 4 * i for i in range(5)]  # where offsets[i] lies: after the count
    start = u32(path, offset[2])
    patch(path, offset[2], np.uint32(u32(path, offset[3]) + 1).tobytes())  # 2 starts after 3
    with pytest.raises(
        ValueError, match=r"sample 0: .*shard.00001.mds' is corrupt: sample 2 ends at"
    ):
        readers(directory)[1].read(0)
    patch(path, offset[2], np.uint32(start).tobytes())
    readers(directory)[1].read(0)  # restored
    patch(path, u32(path, offset[3]), np.uint32(7).tobytes())  # a size in sample 3's header
    with pytest.raises(ValueError, match=r"shard.00001.mds' is corrupt: sample 3 holds \d+ bytes"):
        readers(directory)[1].read(0)
    patch(path, 0, np.uint32(99).tobytes())
    with pytest.raises(ValueError, match=r"00001.mds' is corrupt: its header counts 99 samples"):
        readers(directory)[1].read(0)


def test_a_corrupt_value_names_the_shard_sample_and_column(corpora: Path, tmp_path: Path) -> None:
    directory = corpus(corpora, "plain", tmp_path)
    shard = readers(directory)[0]
    shard.load()
    meta = [c.name for c in shard.columns].index("meta")
    patch(directory / shard.name, int(shard._data().bounds[4, meta]), b"\xff")
    with pytest.raises(ValueError, match=r"00000.mds': sample 4, column 'meta' \(json\)"):
        readers(directory)[0].read(4)


def test_bad_compressed_files_name_the_shard_and_the_sample(corpora: Path, tmp_path: Path) -> None:
    directory = corpus(corpora, "gz", tmp_path)
    path = directory / "shard.00002.mds.gz"
    patch(path, path.stat().st_size // 2, b"garbage!")
    with pytest.raises(ValueError, match=r"sample 1: MDS shard file .*00002.mds.gz' cannot be"):
        readers(directory)[2].read(1)
    with path.open("ab") as file:
        file.write(b"!")
    with pytest.raises(ValueError, match=r"sample 0: .*00002.mds.gz' has \d+ bytes, but its index"):
        readers(directory)[2].read_range(0, 2)
    index = json.loads((directory / "index.json").read_text())
    index["shards"][3]["raw_data"]["bytes"] += 1
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"00003.mds.gz' decompresses to \d+ bytes, but its index"):
        readers(directory)[3].read(0)


def test_a_missing_codec_names_its_pip_package(
    corpora: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shards = readers(corpus(corpora, "zstd"))
    for module in ("zstd", "zstandard", "compression.zstd"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails
    with pytest.raises(ModuleNotFoundError, match=r"00000.mds.zstd' .*pip install zstd"):
        shards[0].load()


def test_indexes_and_encodings_it_does_not_read_are_refused(corpora: Path, tmp_path: Path) -> None:
    directory = corpus(corpora, "plain", tmp_path)
    with pytest.raises(ValueError, match=r"column 'obj' has encoding 'pkl'.*allow_unsafe_types"):
        open_mds(directory)
    index = json.loads((directory / "index.json").read_text())
    index["shards"][4]["column_encodings"][0] = "ndarray:complex64"
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"00004.mds': column 'array' .*'ndarray:complex64'"):
        readers(directory)
    index["shards"][4]["column_encodings"][0] = "audio"
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"00004.mds': column 'array' has encoding 'audio', wh"):
        readers(directory)
    index["shards"][4]["format"] = "json"
    (directory / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"shard #4 of .*format='json'; only 'mds'"):
        readers(directory)
    (directory / "index.json").write_text(json.dumps({"version": 1, "shards": []}))
    with pytest.raises(ValueError, match="not an MDS index of version 2"):
        readers(directory)
    with pytest.raises(FileNotFoundError, match="no MDS index at"):
        open_mds(tmp_path)


@pytest.fixture(scope="module")
def clean_shard(corpora: Path) -> tuple[bytes, list[int]]:
    """Shard 0 of the plain corpus and the byte positions of its layout (header, sizes)."""
    path = corpora / "plain" / "shard.00000.mds"
    data = path.read_bytes()
    samples = u32(path, 0)
    offsets = np.frombuffer(data, "<u4", samples + 1, 4).tolist()
    variable = sum(size is None for size in readers(corpora / "plain")[0].info.column_sizes)
    sizes = [o + b for o in offsets[:-1] for b in range(4 * variable)]
    return data, list(range(4 * (samples + 2))) + sizes


@settings(max_examples=60)
@given(data=st.data())
def test_any_corrupt_layout_byte_is_caught(
    corpora: Path, clean_shard: tuple[bytes, list[int]], tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:  # fmt: skip
    """Changing any byte of the header or of a sample's size header never reads silently."""
    shard, positions = clean_shard
    at = data.draw(st.sampled_from(positions))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != shard[at]))
    directory = tmp_path_factory.mktemp("corrupt")
    index = json.loads((corpora / "plain" / "index.json").read_text())
    (directory / "index.json").write_text(json.dumps({**index, "shards": index["shards"][:1]}))
    (directory / "shard.00000.mds").write_bytes(shard[:at] + bytes([byte]) + shard[at + 1 :])
    with pytest.raises(ValueError, match=r"shard.00000.mds' is corrupt: (its|sample \d+)"):
        readers(directory)[0].load()
