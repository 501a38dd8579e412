"""Promise sentences of the data pages (sharded, documents, remote, cli, statistics) in their
documented form: each test names the sentence it checks and uses an oracle outside the code
under test (a failing rename, a call count, the requests a local server saw, a process's
peak memory, megatron-core's own writer)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import remote_servers
import torch
from remote_servers import FileServer

from lightning_resumable_data import DistributedSampler, StatefulDataLoader
from lightning_resumable_data.cli import main
from lightning_resumable_data.documents import PackedDataset, open_megatron, write_megatron
from lightning_resumable_data.index import feistel_keys, feistel_permute
from lightning_resumable_data.shards import write_token_shards

MiB = 1 << 20


# -- docs/sharded.md ------------------------------------------------------------------------


def test_index_json_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sh33: write_token_shards writes index.json atomically: when the write fails (the final
    rename, or the disk filling up halfway) there is no index.json, never a partial one."""
    tokens = np.arange(8 * 40) % 1000

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError("the final rename failed")

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", refuse)
        patch.setattr(os, "rename", refuse)
        with pytest.raises(OSError, match="the final rename failed"):
            write_token_shards(tmp_path / "a", [tokens], seq_len=8, tokens_per_shard=8 * 16)
    assert not (tmp_path / "a" / "index.json").exists()

    real_open = io.open

    def short_writes(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        if "w" in mode and "index.json" in str(file):
            return _HalfWriter(handle)
        return handle

    with monkeypatch.context() as patch:  # the index's own write dies halfway
        patch.setattr(io, "open", short_writes)
        patch.setattr("builtins.open", short_writes)
        with pytest.raises(OSError, match="disk full"):
            write_token_shards(tmp_path / "b", [tokens], seq_len=8, tokens_per_shard=8 * 16)
    assert not (tmp_path / "b" / "index.json").exists()

    written = write_token_shards(tmp_path / "b", [tokens], seq_len=8, tokens_per_shard=8 * 16)
    index = json.loads((tmp_path / "b" / "index.json").read_text())  # then whole
    assert index["seq_len"] == 8
    assert len(index["shards"]) == len(written.files) == 3


class _HalfWriter:
    """A text file whose write stores half the text, then fails (a disk filling up)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, text: str) -> int:
        self._handle.write(text[: len(text) // 2])
        self._handle.flush()
        raise OSError("disk full")

    def __enter__(self) -> _HalfWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


# -- docs/documents.md ----------------------------------------------------------------------

BLOCK_MEGATRON = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "megatron" or name.startswith("megatron."):
            raise ImportError(f"import of {name} blocked")
        return None

if sys.argv[-1] == "block":
    sys.meta_path.insert(0, Block())
"""

OPEN_WITHOUT_MEGATRON = (
    BLOCK_MEGATRON
    + """
import json, mmap
import numpy as np
from lightning_resumable_data.documents import open_megatron

def mapped(array):
    while array is not None:
        if isinstance(array, mmap.mmap):
            return True
        array = getattr(array, "base", None) if not isinstance(array, memoryview) else array.obj
    return False

corpus = open_megatron(sys.argv[1])
part = corpus.parts[0]
print(json.dumps({
    "documents": [corpus.document(i).tolist() for i in range(len(corpus))],
    "lengths_mapped": mapped(corpus.lengths),
    "pointers_mapped": mapped(part.starts),
    "megatron": sorted(m for m in sys.modules if m.split(".")[0] == "megatron"),
}))
"""
)


def test_open_megatron_maps_lengths_and_pointers_without_importing_megatron(
    tmp_path: Path,
) -> None:
    """D2: open_megatron reads a corpus written by megatron-core's own builder with every
    ``megatron`` import blocked; the lengths and pointers stay memory maps of the .idx."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    rng = np.random.default_rng(1)
    documents = [rng.integers(0, 50_000, int(rng.integers(1, 30))) for _ in range(25)]
    prefix = str(tmp_path / "corpus_text_document")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for document in documents:
        builder.add_item(torch.from_numpy(document.astype(np.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    reference = IndexedDataset(prefix)  # the peer's own reader: the oracle
    expected = [reference[i].tolist() for i in range(len(reference))]

    script = tmp_path / "open.py"
    script.write_text(OPEN_WITHOUT_MEGATRON)
    for blocked in ("block", "installed"):  # megatron importable or not: never imported
        result = subprocess.run(
            [sys.executable, str(script), prefix, blocked],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        out = json.loads(result.stdout)
        assert out["documents"] == expected
        assert out["megatron"] == []
        assert out["lengths_mapped"]
        assert out["pointers_mapped"]

    check = subprocess.run(  # the blocker blocks: the oracle can fail
        [sys.executable, "-c", BLOCK_MEGATRON + "import megatron.core", "block"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode != 0
    assert "blocked" in check.stderr


@pytest.fixture
def packed_corpus(tmp_path: Path) -> str:
    rng = np.random.default_rng(0)
    documents = [rng.integers(1, 1000, int(rng.integers(1, 40))) for _ in range(300)]
    prefix = str(tmp_path / "docs")
    write_megatron(prefix, documents, dtype=np.int32)
    return prefix


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls of the index build (``build_checkpoints``) made by PackedDataset."""
    import lightning_resumable_data.documents.packed as packed_module

    calls: list[int] = []
    build: Callable[..., Any] = packed_module.build_checkpoints  # type: ignore[attr-defined]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(packed_module, "build_checkpoints", counting)
    return calls


def _loader(dataset: PackedDataset) -> StatefulDataLoader:
    sampler = DistributedSampler(dataset, 1, 0, seed=3, sample_keys=True, algorithm="feistel")
    return StatefulDataLoader(dataset, batch_size=4, sampler=sampler)


def test_an_epoch_index_is_built_once_and_the_last_two_are_kept(
    packed_corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D29: the index of an epoch is built once, on its first sample or by set_epoch; the
    last two epochs' are kept."""
    calls = count_builds(monkeypatch)
    dataset = PackedDataset(open_megatron(packed_corpus), 16, eos_id=0, seed=7)
    assert len(calls) == 0  # nothing before the first sample
    dataset[0]
    assert len(calls) == 1
    for i in range(len(dataset)):  # every sample of epoch 0
        dataset[i]
    assert len(calls) == 1
    dataset.set_epoch(1)
    assert len(calls) == 2  # set_epoch builds it
    for i in range(len(dataset)):
        dataset[i]
    dataset.set_epoch(2)
    assert len(calls) == 3
    dataset.set_epoch(1)  # the last two epochs' (1 and 2) are kept
    dataset[5]
    assert len(calls) == 3
    dataset.set_epoch(0)  # epoch 0's was dropped: built again
    assert len(calls) == 4


def test_the_build_happens_once_per_epoch_never_per_resume_or_sample(
    packed_corpus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D36: through the loader, one build per epoch; a resume builds its epoch once."""
    calls = count_builds(monkeypatch)
    dataset = PackedDataset(open_megatron(packed_corpus), 16, eos_id=0, seed=7)
    loader = _loader(dataset)
    iterator = iter(loader)
    for _ in range(5):
        next(iterator)
    state = loader.state_dict()
    rest = list(iterator)
    assert len(rest) > 20
    assert len(calls) == 1
    list(loader)  # epoch 1 (the sampler's epoch advances)
    assert len(calls) == 2

    resumed_dataset = PackedDataset(open_megatron(packed_corpus), 16, eos_id=0, seed=7)
    resumed = _loader(resumed_dataset)
    resumed.load_state_dict(state)
    again = list(resumed)
    assert [b["input_ids"].tolist() for b in again] == [b["input_ids"].tolist() for b in rest]
    assert len(calls) == 3  # the resume: its epoch's index, once
    resumed.load_state_dict(state)  # a second resume of the same epoch: kept
    list(resumed)
    assert len(calls) == 3


# -- docs/remote.md -------------------------------------------------------------------------

GETS: list[tuple[str, str | None]] = []  # (path, Range header) of every GET the server saw


class _RecordingHandler(remote_servers._Handler):
    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        GETS.append((self.path, self.headers.get("Range")))
        super().do_GET()


@pytest.fixture
def recording_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    """An HTTP server with ranges over ``tmp_path / "srv"`` that logs each GET's Range."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    monkeypatch.setattr(remote_servers, "_Handler", _RecordingHandler)
    GETS.clear()
    (tmp_path / "srv").mkdir()
    with FileServer(tmp_path / "srv", ranges=True) as server:
        yield server


def ranges_of(path: str) -> list[tuple[int, int]]:
    """The ``[start, stop)`` byte ranges of the GETs of ``path`` (a GET without Range: none)."""
    out = []
    for seen, header in GETS:
        if seen == path:
            assert header is not None, f"a GET of {path} without a Range"
            first, last = re.fullmatch(r"bytes=(\d+)-(\d+)", header).groups()  # type: ignore[union-attr]
            out.append((int(first), int(last) + 1))
    return out


def test_a_get_reads_at_most_64_mib_and_a_download_goes_range_by_range(
    recording_server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re35 and Re13: a try is one request, a GET of at most 64 MiB (a bigger file is read
    in 64 MiB ranges); a download goes to a temporary file range by range, never the whole
    file in memory."""
    from lightning_resumable_data.remote import ShardCache, local_path

    size = 64 * MiB + 4096
    data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
    (tmp_path / "srv" / "big.bin").write_bytes(data)
    cache = ShardCache(tmp_path / "cache")
    seen: list[tuple[int, int]] = []  # (bytes returned by a read, bytes on disk before it)
    read_bytes = cache.read_bytes

    def watching(url: str, start: int | None = None, stop: int | None = None) -> bytes:
        on_disk = sum(p.stat().st_size for p in (tmp_path / "cache").glob(".*.tmp"))
        part = read_bytes(url, start, stop)
        seen.append((len(part), on_disk))
        return part

    monkeypatch.setattr(cache, "read_bytes", watching)
    path = local_path(recording_server.url + "/big.bin", cache)
    assert path.read_bytes() == data
    assert ranges_of("/big.bin") == [(0, 64 * MiB), (64 * MiB, size)]  # one GET per try
    assert seen == [(64 * MiB, 0), (4096, 64 * MiB)]  # the first range on disk before the next


def test_chunks_are_16_mib_by_default(recording_server: FileServer, tmp_path: Path) -> None:
    """Re41: a file read by ranges is cut into chunks of chunk_bytes, 16 MiB by default
    (the last one short): open_megatron(url, cache=cache) without chunk_bytes."""
    from lightning_resumable_data.remote import ShardCache

    tokens = np.arange(4 * MiB + 1000, dtype=np.int32)  # 16 MiB + 4000 bytes of .bin
    documents = np.split(tokens, [1000, 4 * MiB])
    write_megatron(tmp_path / "srv" / "corpus", documents, dtype=np.int32)
    size = (tmp_path / "srv" / "corpus.bin").stat().st_size
    corpus = open_megatron(recording_server.url + "/corpus", cache=ShardCache(tmp_path / "c"))
    assert corpus.document(2).tolist() == tokens[4 * MiB :].tolist()
    assert corpus.document(0).tolist() == tokens[:1000].tolist()
    assert set(ranges_of("/corpus.bin")) == {(16 * MiB, size), (0, 16 * MiB)}


def test_a_cache_of_prefetch_workers_plus_one_chunks_reads_a_corpus(
    recording_server: FileServer, tmp_path: Path
) -> None:
    """Re43: the cache must hold prefetch_workers + 1 chunks per process: with exactly that
    bound, forward and shuffled reads of a corpus many chunks long equal the local read."""
    from lightning_resumable_data.remote import ShardCache

    rng = np.random.default_rng(2)
    documents = [rng.integers(0, 2**31 - 1, int(rng.integers(1, 300)), dtype=np.int32)
                 for _ in range(400)]  # fmt: skip
    write_megatron(tmp_path / "srv" / "corpus", documents, dtype=np.int32)
    chunk = 4096
    assert (tmp_path / "srv" / "corpus.bin").stat().st_size > 20 * chunk
    workers = 2
    cache = ShardCache(tmp_path / "c", max_bytes=(workers + 1) * chunk, prefetch_workers=workers)
    url = recording_server.url + "/corpus"
    for shuffle in (False, True):
        remote = PackedDataset(
            open_megatron(url, cache=cache, chunk_bytes=chunk), 64, eos_id=0,
            shuffle_documents=shuffle,
        )  # fmt: skip
        local = PackedDataset(
            open_megatron(tmp_path / "srv" / "corpus"), 64, eos_id=0, shuffle_documents=shuffle
        )
        for i in range(len(local)):
            assert remote[i]["input_ids"].tolist() == local[i]["input_ids"].tolist()
    assert cache.cached_bytes() <= (workers + 1) * chunk


def test_the_bound_must_hold_the_shards_read_at_once(
    recording_server: FileServer, tmp_path: Path
) -> None:
    """Re17: max_bytes must hold the shards read at once (max_resident per process, 2 by
    default): such a bound reads the epochs as a local run does; a bound below one shard is
    an error saying to raise max_bytes, never a hang."""
    from lightning_resumable_data import ShardedDataLoader
    from lightning_resumable_data.remote import ShardCache
    from lightning_resumable_data.shards import open_token_shards

    tokens = np.arange(8 * 16 * 6) % 60_000
    write_token_shards(tmp_path / "srv", [tokens], seq_len=8, tokens_per_shard=8 * 16)
    shard = (tmp_path / "srv" / "shard_00000.bin").stat().st_size

    def run(readers: Any) -> list[list[int]]:
        loader = ShardedDataLoader(
            readers, batch_size=4, seed=3, multiprocessing=False, dp_rank=0, num_replicas=1
        )
        try:
            return [batch.tolist() for _ in range(2) for batch in loader]
        finally:
            loader.close()

    expected = run(open_token_shards(tmp_path / "srv"))
    cache = ShardCache(tmp_path / "c", max_bytes=2 * shard)
    assert run(open_token_shards(recording_server.url, cache=cache)) == expected
    assert cache.cached_bytes() <= 2 * shard
    small = ShardCache(tmp_path / "small", max_bytes=shard - 8)
    with pytest.raises(ValueError, match=rf"max_bytes={shard - 8}\) cannot hold .*Raise max_bytes"):
        run(open_token_shards(recording_server.url, cache=small))


def test_a_resume_pins_the_version_of_a_versioned_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re5: the state pins the version where the store keeps versions: on a versioned S3
    bucket (version_aware), the same bytes uploaded again (same ETag, a new VersionId)
    refuse a resume."""
    s3fs = pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from lightning_resumable_data import ShardedDataLoader
    from lightning_resumable_data.remote import ShardCache
    from lightning_resumable_data.shards import open_token_shards
    from lightning_resumable_data.state import StateMismatchError

    tokens = np.arange(8 * 16 * 4) % 60_000
    write_token_shards(tmp_path / "local", [tokens], seq_len=8, tokens_per_shard=8 * 16)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with remote_servers.moto_s3() as endpoint:
        options = {"client_kwargs": {"endpoint_url": endpoint}, "version_aware": True}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("versioned")
        fs.make_bucket_versioned("versioned")
        fs.put(str(tmp_path / "local") + "/", "versioned/shards", recursive=True)
        url = "s3://versioned/shards"

        def loader(cache_dir: str) -> ShardedDataLoader:
            cache = ShardCache(tmp_path / cache_dir, storage_options=options)
            return ShardedDataLoader(
                open_token_shards(url, cache=cache), batch_size=4, seed=3,
                multiprocessing=False, dp_rank=0, num_replicas=1,
            )  # fmt: skip

        run = loader("c1")
        batches = iter(run)
        for _ in range(3):
            next(batches)
        state = run.state_dict()
        run.close()
        was = state["pins"]["shard_00001.bin"]
        assert "version=" in was

        unchanged = loader("c2")
        unchanged.load_state_dict(state)  # nothing changed: it resumes
        unchanged.close()

        same_bytes = (tmp_path / "local" / "shard_00001.bin").read_bytes()
        fs.pipe("versioned/shards/shard_00001.bin", same_bytes)  # same ETag, new version
        resumed = loader("c3")
        with pytest.raises(StateMismatchError, match=r"'shard_00001\.bin' was .*version=") as info:
            resumed.load_state_dict(state)
        resumed.close()
        assert was in str(info.value)


# -- docs/cli.md ----------------------------------------------------------------------------


def loader_state(batches: int) -> dict[str, Any]:
    """A StatefulDataLoader's state after ``batches`` batches of 4 over 96 samples."""
    dataset = list(range(96))
    sampler = DistributedSampler(dataset, 1, 0, seed=5)
    loader = StatefulDataLoader(dataset, batch_size=4, sampler=sampler)
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    state: dict[str, Any] = loader.state_dict()
    return state


def inspect_json(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code = main(["inspect", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def test_inspect_reads_a_deepspeed_checkpoint_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Cl6: a sharded checkpoint folder is read through checkpoint/mp_rank_00_model_states.pt
    (DeepSpeed)."""
    folder = tmp_path / "epoch=0-step=7.ckpt"
    (folder / "checkpoint").mkdir(parents=True)
    torch.save({"module": {"w": torch.zeros(2)}, "data": loader_state(7)},
               folder / "checkpoint" / "mp_rank_00_model_states.pt")  # fmt: skip
    torch.save({"w": torch.zeros(2)}, folder / "checkpoint" / "zero_pp_rank_0_optim_states.pt")
    report = inspect_json(capsys, folder)
    assert report["found_at"] == "data"
    assert report["consumed"] == 7 * 4
    assert report["resume"]["ok"]


RSS_OF_INSPECT = """
import resource, sys
from lightning_resumable_data.cli import main
code = main(["inspect", sys.argv[1], "--json"])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)  # KiB
sys.exit(code)
"""


def test_inspect_memory_maps_tensors(tmp_path: Path) -> None:
    """Cl7: a large checkpoint is not read into memory (tensors are placeholders, or
    memory-mapped where torch reads the file): lrd inspect of a checkpoint with 512 MiB of
    weights peaks at about the memory of a tiny one."""
    state = loader_state(3)
    small, large = tmp_path / "small.ckpt", tmp_path / "large.ckpt"
    torch.save({"state_dict": {"w": torch.ones(4)}, "data": state}, small)
    torch.save({"state_dict": {"w": torch.ones(128 * MiB)}, "data": state}, large)  # 512 MiB
    script = tmp_path / "rss.py"
    script.write_text(RSS_OF_INSPECT)

    def peak_kib(path: Path) -> int:
        result = subprocess.run(
            [sys.executable, str(script), str(path)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["consumed"] == 12
        return int(result.stderr.strip().splitlines()[-1])

    extra_mib = (peak_kib(large) - peak_kib(small)) / 1024
    assert extra_mib < 64, f"inspect read {extra_mib:.0f} MiB more for 512 MiB of weights"


# -- docs/statistics.md ---------------------------------------------------------------------


def test_an_exact_shuffle_is_materialised_once_and_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """St2: up to 2**16 the shuffle is exact, materialised once and cached, in at most
    256 KiB (the 0.6 ms is a timing claim, not tested)."""
    import lightning_resumable_data.index.permutation as permutation

    made: list[int] = []
    key_rng: Callable[..., Any] = permutation.key_rng  # type: ignore[attr-defined]

    def counting(*args: Any) -> Any:
        made.append(1)
        return key_rng(*args)

    monkeypatch.setattr(permutation, "key_rng", counting)
    n, keys = 2**16, feistel_keys(123_456_789, 3)  # a key no other test uses
    tracemalloc.start()
    try:
        first = feistel_permute(np.arange(n), n, keys)
        held, _ = tracemalloc.get_traced_memory()
        del first
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert made == [1]
    assert after <= 256 * 1024 + 16 * 1024  # the cached table: 256 KiB, plus small objects
    assert held >= after
    whole = feistel_permute(np.arange(n), n, keys)
    for start in range(0, n, 4096):  # slices, single positions, the whole range again
        assert feistel_permute(np.arange(start, start + 4096), n, keys).tolist() == (
            whole[start : start + 4096].tolist()
        )
    assert int(feistel_permute(np.array(77), n, keys)) == int(whole[77])
    assert sorted(whole.tolist()) == list(range(n))  # a permutation
    assert made == [1]  # materialised once
    above = feistel_permute(np.arange(10), n + 1, keys)  # above 2**16: the network, no table
    assert above.shape == (10,)
    assert made == [1]
