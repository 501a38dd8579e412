"""WebDataset shards written by WebDataset's own writers, read back by ``WebDatasetShardReader``.

The corpus comes from ``write_wds.py`` run under the peers' interpreter (``LRD_PEERS_PYTHON``,
default ``.venv-peers/bin/python``, built by ``make setup``): ``webdataset.ShardWriter`` and
``TarWriter`` shards, a GNU tar by ``tarfile``, and what ``webdataset.WebDataset`` yields
from each. This process never imports WebDataset: it checks the reader against that record
and against the writer's rule (``write_wds.sample``).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import pickle
import shutil
import subprocess
import tarfile
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import ShardedDataLoader, StateMismatchError
from lightning_resumable_data.formats import _wds_index, _wds_tar
from lightning_resumable_data.formats.wds import (
    WebDatasetShardReader,
    brace_expand,
    open_webdataset,
)
from lightning_resumable_data.shards import DistributedShardedDataset

from .write_wds import MAXCOUNT, N, edge_samples, sample

ROOT = Path(__file__).resolve().parents[2]
Expected = dict[str, Any]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected]:
    python = Path(os.environ.get("LRD_PEERS_PYTHON", ROOT / ".venv-peers/bin/python"))
    if not python.exists():
        pytest.skip(
            f"no peers' interpreter at {python}: run `make setup` (or set LRD_PEERS_PYTHON)"
        )
    out = tmp_path_factory.mktemp("wds")
    script = Path(__file__).with_name("write_wds.py")
    subprocess.run([str(python), str(script), str(out)], check=True, timeout=300)
    return out, json.loads((out / "expected.json").read_text())


def shards(corpus: tuple[Path, Expected], prefix: str = "shard-") -> list[str]:
    return [s for s in corpus[1]["shards"] if Path(s).name.startswith(prefix)]


def jsonable(value: Any) -> Any:
    """A read value as ``write_wds.py`` records WebDataset's."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "data": value.tolist()}
    return value


def webdataset_yield(expected: Expected, shard: str, kind: str = "raw") -> list[dict[str, Any]]:
    """What WebDataset yielded from ``shard``, less ``__local_path__`` (we give ``__url__``)."""
    return [{k: v for k, v in s.items() if k != "__local_path__"} for s in expected[kind][shard]]


def copy_shard(corpus: tuple[Path, Expected], tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copyfile(corpus[0] / name, target)
    return target


def keys_of(batch: list[dict[str, Any]]) -> list[str]:
    return [s["__key__"] for s in batch]


# -- read back -----------------------------------------------------------------------------


def test_every_sample_equals_what_webdataset_yields(corpus: tuple[Path, Expected]) -> None:
    expected = corpus[1]
    assert expected["webdataset"] == "1.0.2"
    readers = open_webdataset(expected["shards"])
    assert [len(r) for r in readers] == [len(expected["raw"][s]) for s in expected["shards"]]
    assert sum(len(r) for r in readers if r.name.startswith("shard-")) == N
    for reader, shard in zip(readers, expected["shards"], strict=True):
        got = [{k: jsonable(v) for k, v in s.items()} for s in reader.read_range(0, len(reader))]
        assert got == webdataset_yield(expected, shard), shard
        assert [reader.read(i) for i in range(len(reader))] == reader.read_range(0, len(reader))


def test_decoded_samples_equal_webdataset_decode_and_the_writer_rule(
    corpus: tuple[Path, Expected],
) -> None:
    expected = corpus[1]
    for reader in open_webdataset(expected["shards"], decode=True):
        for got, theirs in zip(
            reader.read_range(0, len(reader)),
            webdataset_yield(expected, reader.path, "decoded"),
            strict=True,
        ):
            if "idx" in theirs:  # WebDataset leaves idx as bytes; we decode it
                assert got.pop("idx") == int(base64.b64decode(theirs.pop("idx")["b64"]))
            assert {k: jsonable(v) for k, v in got.items()} == theirs
    samples = [
        s for r in open_webdataset(shards(corpus), decode=True) for s in r.read_range(0, len(r))
    ]
    assert len(samples) == N
    for i, got in enumerate(samples):
        rule = sample(i)
        assert got["__key__"] == rule["__key__"]
        assert got["jpg"] == rule["jpg"]  # images stay bytes
        assert (got["cls"], got["json"], got["txt"]) == (rule["cls"], rule["json"], rule["txt"])
        assert (got["txt.gz"], got["idx"]) == (rule["txt.gz"], int(rule["IDX"]))
        assert got["npy"].dtype == rule["npy"].dtype
        np.testing.assert_array_equal(got["npy"], rule["npy"])
    edge = {
        s["__key__"]: s
        for s in open_webdataset(shards(corpus, "edge-"), decode=True)[0].read_range(0, 4)
    }
    for rule in edge_samples():
        got = edge[rule["__key__"]]
        for field, value in rule.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(got[field], value)
            else:
                assert got[field] == value, field


def test_shards_split_by_maxcount_and_group_like_webdataset(corpus: tuple[Path, Expected]) -> None:
    readers = open_webdataset(shards(corpus))
    assert [len(r) for r in readers] == [MAXCOUNT, MAXCOUNT, MAXCOUNT, N - 3 * MAXCOUNT]
    assert [r.key(0) for r in readers] == ["000000", "000010", "000020", "000030"]
    gnu = open_webdataset(shards(corpus, "gnu-"))[0]
    # README, __meta__ (file or folder) and the folder are skipped; "a" coming back is new
    assert [gnu.key(i) for i in range(len(gnu))] == ["a", "b", "a", "dir/" + "n" * 110]
    assert sorted(gnu.read(0)) == ["__key__", "__url__", "cls", "txt"]
    assert gnu.read(2)["json"] == b'{"again": true}'


def test_random_access_in_shuffled_order(corpus: tuple[Path, Expected]) -> None:
    readers = open_webdataset(shards(corpus), preload=False)
    flat = [(r, i) for r in readers for i in range(len(r))]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(flat))
    got = {int(j): flat[j][0].read(flat[j][1]) for j in order}
    assert [got[j]["__key__"] for j in range(N)] == [f"{i:06d}" for i in range(N)]
    reader = readers[1]
    picks = rng.permutation(len(reader))
    picks[:3] = [4, 5, 6]  # a run of neighbours: one read
    assert reader.read_many(picks) == [reader.read(int(i)) for i in picks]
    assert reader.read(-1) == reader.read(len(reader) - 1)
    with pytest.raises(IndexError, match=r"index 10 is out of range for shard 'shard-000001.tar'"):
        reader.read(10)
    with pytest.raises(IndexError, match="out of range"):
        reader.read_many(np.array([0, 11]))
    assert reader.read_range(3, 3) == []


def test_len_comes_from_the_index_without_loading(
    corpus: tuple[Path, Expected], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = open_webdataset(shards(corpus))
    assert all(Path(r.index_file or "").is_file() for r in first)
    assert first[0].index_file == first[0].path + ".index.npz"  # wids' <shard>.index, .npz

    def refuse(*args: Any) -> Any:
        raise AssertionError("the sidecar index should have been used")

    monkeypatch.setattr(_wds_index, "scan_members", refuse)
    readers = open_webdataset(shards(corpus))
    assert [len(r) for r in readers] == [len(r) for r in first]
    assert not any(r.loaded for r in readers)
    assert readers[0].loads == 0
    assert readers[0].read(1) == first[0].read(1)
    assert readers[0].loaded
    assert readers[0].loads == 1


def test_the_index_reads_headers_only(
    corpus: tuple[Path, Expected], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[tuple[int, int]] = []
    original = _wds_tar._Scan.read

    def spy(self: Any, offset: int, size: int) -> bytes:
        reads.append((offset, size))
        return original(self, offset, size)

    monkeypatch.setattr(_wds_tar._Scan, "read", spy)
    for shard in [*shards(corpus), *shards(corpus, "edge-")]:
        reads.clear()
        members, _ = _wds_tar.scan_members(shard)
        for start, size in reads:  # no read touches a member's data
            assert not any(start < m.offset + m.size and m.offset < start + size for m in members)
        data = sum(m.size for m in members)
        assert sum(size for _, size in reads) < os.path.getsize(shard) - data + 512


# -- the sidecar index -----------------------------------------------------------------------


def test_a_rewritten_shard_invalidates_its_sidecar(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000003.tar")
    assert len(WebDatasetShardReader(path)) == 7
    sidecar = Path(str(path) + ".index.npz")
    stamp = sidecar.stat().st_mtime_ns
    shutil.copyfile(corpus[0] / "shard-000000.tar", path)  # another size
    assert len(WebDatasetShardReader(path)) == 10
    assert sidecar.stat().st_mtime_ns != stamp
    shutil.copyfile(corpus[0] / "shard-000001.tar", path)  # same size, other mtime
    os.utime(path, ns=(1, 1))
    assert WebDatasetShardReader(path).key(0) == "000010"
    sidecar.write_bytes(b"not an index")  # damaged: rebuilt
    assert WebDatasetShardReader(path).key(0) == "000010"
    assert _wds_index.read_stamp(str(sidecar), path.stat()) is not None


def test_the_index_is_resident_only_while_loaded(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000001.tar")
    built = WebDatasetShardReader(path)
    reader = WebDatasetShardReader(path)  # from the sidecar: only its stamp is read
    assert reader.__dict__["_index"] is None
    assert built.__dict__["_index"] is None  # saved, so not kept
    assert reader.read(3) == built.read(3)
    assert reader.__dict__["_index"] is not None
    reader.close()
    assert reader.__dict__["_index"] is None
    Path(str(path) + ".index.npz").unlink()  # the sidecar vanished: scanned again
    assert reader.key(9) == "000019"
    assert Path(str(path) + ".index.npz").is_file()
    reader.close()
    Path(str(path) + ".index.npz").unlink()
    with path.open("ab") as file:
        file.write(bytes(512))
    with pytest.raises(ValueError, match=r"shard-000001\.tar' changed since it was indexed"):
        reader.read(0)


def test_an_unwritable_folder_keeps_the_index_in_memory(
    corpus: tuple[Path, Expected], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000002.tar")

    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    reader = WebDatasetShardReader(path)
    assert reader.index_file is None
    assert len(reader) == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-000002.tar"]
    assert reader.read(9)["__key__"] == "000029"
    reader.close()
    assert reader.key(9) == "000029"  # still in memory
    assert pickle.loads(pickle.dumps(reader)).read(9) == reader.read(9)
    assert WebDatasetShardReader(path, save_index=False).index_file is None


def test_a_reader_pickles_without_its_data(corpus: tuple[Path, Expected]) -> None:
    reader = open_webdataset(shards(corpus))[0]
    reader.load()
    blob = pickle.dumps(reader)
    assert len(blob) < 2000  # neither the bytes nor the index: the sidecar holds it
    copy = pickle.loads(blob)
    assert not copy.loaded
    assert len(copy) == len(reader)
    assert copy.read_range(0, len(copy)) == reader.read_range(0, len(reader))


# -- sharded dataset and loader ----------------------------------------------------------------


def make_loader(
    readers: list[WebDatasetShardReader], world: int = 1, rank: int = 0, **kwargs: Any
) -> ShardedDataLoader:
    kwargs.setdefault("multiprocessing", False)
    return ShardedDataLoader(
        readers, 4, seed=3, dp_rank=rank, num_replicas=world, collate_fn=keys_of, **kwargs
    )


def run(loader: ShardedDataLoader, k: int | None = None) -> list[list[str]]:
    out: list[list[str]] = []
    if k == 0:
        return out
    for batch in loader:
        out.append(batch)
        if len(out) == k:
            break
    return out


@pytest.mark.parametrize("k", [0, 3, 5])
def test_mid_epoch_resume_equals_the_uninterrupted_run(
    corpus: tuple[Path, Expected], k: int
) -> None:
    whole = run(make_loader(open_webdataset(shards(corpus))))
    assert sorted(key for batch in whole for key in batch) == [f"{i:06d}" for i in range(N)]
    first = make_loader(open_webdataset(shards(corpus)))
    seen = run(first, k)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    resumed = make_loader(open_webdataset(shards(corpus)))
    resumed.load_state_dict(state)
    assert seen + run(resumed) == whole
    resumed.close()


def test_resume_in_a_worker_process(corpus: tuple[Path, Expected]) -> None:
    whole = run(make_loader(open_webdataset(shards(corpus), decode=True), multiprocessing=True))
    first = make_loader(open_webdataset(shards(corpus), decode=True), multiprocessing=True)
    seen, state = run(first, 4), first.state_dict()
    first.close()
    resumed = make_loader(open_webdataset(shards(corpus), decode=True), multiprocessing=True)
    resumed.load_state_dict(state)
    assert seen + run(resumed) == whole
    resumed.close()


def test_two_ranks_resume_on_one_with_every_sample_once(corpus: tuple[Path, Expected]) -> None:
    consumed: list[str] = []
    states = []
    for rank in range(2):
        loader = make_loader(open_webdataset(shards(corpus)), world=2, rank=rank)
        consumed += [key for batch in run(loader, 3) for key in batch]
        states.append(loader.state_dict())
        loader.close()
    assert states[0] == states[1]
    assert states[0]["consumed"] == 24
    resumed = make_loader(open_webdataset(shards(corpus)))
    resumed.load_state_dict(states[0])
    rest = [key for batch in run(resumed) for key in batch]
    assert Counter(consumed + rest) == Counter(f"{i:06d}" for i in range(N))


def test_a_shard_changed_between_save_and_resume_is_refused(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    paths = [copy_shard(corpus, tmp_path, Path(s).name) for s in shards(corpus)]
    dataset = DistributedShardedDataset(open_webdataset([str(p) for p in paths]))
    dataset.check_shards()
    with paths[2].open("ab") as file:
        file.write(bytes(10240))
    with pytest.raises(StateMismatchError, match=r"shard 2 \('shard-000002.tar'\).*changed"):
        dataset.check_shards()


# -- bad input -----------------------------------------------------------------------------


def member_header(path: Path, name: str) -> int:
    """Byte offset of the header of member ``name``."""
    with tarfile.open(path) as tar:
        return tar.getmember(name).offset


def test_a_bad_header_checksum_names_the_shard_and_the_sample(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000000.tar")
    offset = member_header(path, "000004.IDX")  # sample 4's first member (its PAX header)
    data = bytearray(path.read_bytes())
    data[offset + 10] ^= 0x55
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"shard-000000\.tar' is corrupt: bad header checksum"):
        WebDatasetShardReader(path)
    with pytest.raises(ValueError, match=r"after sample 3 \(key '000003'"):
        WebDatasetShardReader(path)


def test_a_truncated_member_names_the_shard_and_the_sample(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000001.tar")
    with tarfile.open(path) as tar:
        jpg = tar.getmember("000015.jpg")
    between = member_header(path, "000016.IDX")
    os.truncate(path, jpg.offset_data + jpg.size // 2)
    with pytest.raises(
        ValueError,
        match=r"shard-000001\.tar' is corrupt: the member needs bytes .* \(truncated\) .* "
        r"in sample 5 \(key '000015', member '000015\.jpg'\)",
    ):
        WebDatasetShardReader(path)
    shutil.copyfile(corpus[0] / "shard-000001.tar", path)
    os.truncate(path, between)  # cut between samples
    with pytest.raises(ValueError, match=r"end-of-archive block is missing.*after sample 5"):
        WebDatasetShardReader(path)


def test_other_bad_shards_are_refused_with_the_reason(
    corpus: tuple[Path, Expected], tmp_path: Path
) -> None:
    zipped = tmp_path / "z.tar.gz"
    zipped.write_bytes(gzip.compress((corpus[0] / "gnu-000000.tar").read_bytes()))
    with pytest.raises(ValueError, match=r"z\.tar\.gz' is gzip-compressed.*gunzip"):
        WebDatasetShardReader(zipped)
    twice = tmp_path / "twice.tar"
    with tarfile.open(twice, "w") as tar:
        for name in ["a.txt", "b.txt", "b.txt"]:
            tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    with pytest.raises(
        ValueError, match=r"twice\.tar': sample 1 \(key 'b'\) has field 'txt' twice"
    ):
        WebDatasetShardReader(twice)
    with pytest.raises(FileNotFoundError, match=r"shard '.*missing\.tar' does not exist"):
        WebDatasetShardReader(tmp_path / "missing.tar")
    bad_json = tmp_path / "bad.tar"
    with tarfile.open(bad_json, "w") as tar:
        info = tarfile.TarInfo("k1.json")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"{x]"))
    reader = WebDatasetShardReader(bad_json, decode=True)
    with pytest.raises(ValueError, match=r"bad\.tar', sample 0: cannot decode field 'json' .*'k1'"):
        reader.read(0)
    assert WebDatasetShardReader(bad_json).read(0)["json"] == b"{x]"


@pytest.mark.parametrize("preload", [True, False])
def test_a_shard_changed_after_opening_is_an_error_naming_it_and_the_sample(
    corpus: tuple[Path, Expected], tmp_path: Path, preload: bool
) -> None:
    path = copy_shard(corpus, tmp_path, "shard-000002.tar")
    reader = WebDatasetShardReader(path, preload=preload)
    reader.check()
    stamp = path.stat()
    shutil.copyfile(corpus[0] / "shard-000001.tar", path)  # rewritten, same size
    assert path.stat().st_size == stamp.st_size
    with pytest.raises(ValueError, match=r"shard-000002\.tar' changed since it was indexed"):
        reader.check()
    shutil.copyfile(corpus[0] / "shard-000002.tar", path)
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # restored
    reader.check()
    reader.read(0)  # loaded: preload holds the bytes, else the open file
    with tarfile.open(path) as tar:
        cut = tar.getmember("000027.cls").offset
    os.truncate(path, cut)
    with pytest.raises(ValueError, match=r"shard-000002\.tar' changed since it was indexed"):
        reader.check()
    if not preload:  # the open file is cut short under the reader
        with pytest.raises(ValueError, match=r"cut short: sample 8 \(key '000028'\) needs bytes"):
            reader.read(8)
    reader.close()
    with pytest.raises(
        ValueError, match=r"changed since it was indexed, found reading sample 1 \(key '000021'\)"
    ):
        reader.read(1)
    path.unlink()
    with pytest.raises(FileNotFoundError, match=r"shard-000002\.tar' vanished"):
        reader.check()


# -- shard lists ------------------------------------------------------------------------------


def test_shard_lists_as_webdataset_names_them(corpus: tuple[Path, Expected]) -> None:
    folder, expected = corpus
    for pattern, expansion in expected["braceexpand"].items():
        assert brace_expand(pattern) == expansion, pattern
    main = shards(corpus)
    named = {
        "brace": str(folder / "shard-{000000..000003}.tar"),
        "glob": str(folder / "shard-*.tar"),
        "list": main,
        "two": str(folder / "shard-00000{0,1}.tar") + "::" + str(folder / "shard-00000{2,3}.tar"),
    }
    for how, source in named.items():
        assert [r.path for r in open_webdataset(source)] == main, how
    assert [r.name for r in open_webdataset(folder)][:2] == ["edge-000000.tar", "gnu-000000.tar"]
    with pytest.raises(FileNotFoundError, match=r"glob '.*nothing-\*\.tar' matches no \.tar"):
        open_webdataset(str(folder / "nothing-*.tar"))
    with pytest.raises(FileNotFoundError, match=r"shard-000008\.tar' does not exist"):
        open_webdataset(str(folder / "shard-{000008..000009}.tar"))
    with pytest.raises(ValueError, match="unbalanced braces"):
        open_webdataset(str(folder / "shard-{0..1.tar"))
    with pytest.raises(ValueError, match="names no shard"):
        open_webdataset([])
    with pytest.raises(TypeError, match=r"decode=.*must be True, False or a mapping"):
        open_webdataset(main, decode="yes")  # type: ignore[arg-type]


# -- property: any tar of samples reads back ------------------------------------------------

FIELD = st.sampled_from(["jpg", "cls", "json", "txt", "seg.npy", "flac"])
SAMPLES = st.lists(
    st.tuples(
        st.text("abc0123_-", min_size=1, max_size=8),
        st.dictionaries(FIELD, st.binary(max_size=1100), min_size=1, max_size=4),
    ),
    max_size=8,
)


@settings(max_examples=40)
@given(
    samples=SAMPLES,
    tar_format=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    folder=st.sampled_from(["", "d/", "x" * 101 + "/"]),  # ustar: a prefix field; else PAX/GNU
)
def test_any_tar_of_samples_reads_back(
    tmp_path_factory: pytest.TempPathFactory,
    samples: list[tuple[str, dict[str, bytes]]],
    tar_format: int,
    folder: str,
) -> None:
    samples = [s for n, s in enumerate(samples) if n == 0 or s[0] != samples[n - 1][0]]
    path = tmp_path_factory.mktemp("prop") / "s.tar"
    with tarfile.open(path, "w", format=tar_format) as tar:
        for key, fields in samples:
            for field, data in fields.items():
                info = tarfile.TarInfo(f"{folder}{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    reader = WebDatasetShardReader(path, preload=len(samples) % 2 == 0)
    url = str(path)
    assert reader.read_range(0, len(reader)) == [
        {"__key__": folder + key, "__url__": url, **fields} for key, fields in samples
    ]
    assert _wds_index.read_stamp(str(path) + ".index.npz", path.stat()) is not None
    assert len(WebDatasetShardReader(path)) == len(samples)  # from the sidecar
