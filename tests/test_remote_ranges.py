"""Big files read by byte ranges: a Megatron ``.bin`` and a Parquet file in S3 (moto) and
behind HTTP, through a cache smaller than the file, token for token equal to a local read."""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")

from remote_servers import FileServer, moto_s3

from lightning_resumable_data.documents import PackedDataset, open_megatron, write_megatron
from lightning_resumable_data.remote import RetryPolicy, ShardCache
from lightning_resumable_data.remote.chunks import (
    DEFAULT_READ_AHEAD,
    ChunkedRemoteFile,
    RemoteTokens,
)

CHUNK = 16 << 10
LIMIT = 7 * CHUNK  # the cache: 7 chunks, a fraction of each file
FAST = RetryPolicy(attempts=12, base_s=0.05, cap_s=0.5)


def make_documents(count: int = 300, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-(2**31), 2**31 - 1, rng.integers(1, 400), dtype=np.int32)
            for _ in range(count)]  # fmt: skip


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture(params=["s3", "http"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    """A folder ``tmp_path / "d"`` served by S3 or HTTP (with ranges), after ``upload()``."""
    folder = tmp_path / "d"
    folder.mkdir()
    if request.param == "http":
        with FileServer(folder, ranges=True) as server:
            yield {"url": server.url, "options": {}, "upload": lambda: None, "server": server}
        return
    import s3fs

    endpoint = request.getfixturevalue("s3_endpoint")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    options = {"client_kwargs": {"endpoint_url": endpoint}, "skip_instance_cache": True}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"ranges{len(fs.ls(''))}"
    fs.mkdir(bucket)

    def upload() -> None:
        fs.put(str(folder) + "/", f"{bucket}/d", recursive=True)

    yield {"url": f"s3://{bucket}/d", "options": options, "upload": upload, "server": None}


def new_cache(store: dict[str, Any], path: Path, **kwargs: Any) -> ShardCache:
    return ShardCache(path, max_bytes=LIMIT, storage_options=store["options"], **kwargs)


@contextmanager
def peak_of(cache: ShardCache) -> Iterator[list[int]]:
    """Sample ``cache.cached_bytes()`` in a thread while the block runs; yields ``[peak]``."""
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], cache.cached_bytes())
            time.sleep(0.001)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        done.set()
        watcher.join()
        peak[0] = max(peak[0], cache.cached_bytes())


def count_downloads(cache: ShardCache, suffix: str) -> list[int]:
    """Count the bytes ``cache`` fetches from objects whose URL ends with ``suffix``."""
    fetched = [0]
    read_bytes: Callable[..., bytes] = cache.read_bytes

    def counting(url: str, start: int | None = None, stop: int | None = None) -> bytes:
        data = read_bytes(url, start, stop)
        if url.endswith(suffix):
            fetched[0] += len(data)
        return data

    cache.read_bytes = counting  # type: ignore[method-assign]
    return fetched


def test_megatron_read_by_ranges_equals_local(store: dict[str, Any], tmp_path: Path) -> None:
    documents = make_documents()
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    store["upload"]()
    size = (tmp_path / "d" / "corpus.bin").stat().st_size
    assert size > 2 * LIMIT  # the cache holds less than half of the .bin
    local = open_megatron(tmp_path / "d" / "corpus")
    cache = new_cache(store, tmp_path / "cache")
    fetched = count_downloads(cache, "corpus.bin")
    with peak_of(cache) as peak:
        corpus = open_megatron(f"{store['url']}/corpus", cache=cache, chunk_bytes=CHUNK)
        assert isinstance(corpus.parts[0].tokens, RemoteTokens)
        order = np.random.default_rng(1).permutation(len(documents)).tolist()
        for number in list(range(len(documents))) + order:  # in order, then shuffled
            got = corpus.document(number)
            assert got.dtype == np.int32
            assert np.array_equal(got, local.document(number)), number
        packed, reference = (PackedDataset(c, seq_len=97, eos_id=7) for c in (corpus, local))
        picks = np.random.default_rng(2).permutation(len(packed))[:64].tolist()
        for a, b in zip(packed.__getitems__(picks), reference.__getitems__(picks), strict=True):
            assert np.array_equal(a["input_ids"], b["input_ids"])
            assert np.array_equal(a["position_ids"], b["position_ids"])
    cache.close()
    assert peak[0] <= LIMIT, (peak[0], LIMIT)
    names = os.listdir(tmp_path / "cache")
    assert not any(name.endswith("corpus.bin") for name in names)  # never downloaded whole
    assert any("corpus.bin@" in name for name in names)
    assert fetched[0] >= size  # every byte was read (some chunks twice: evicted)
    vars(cache).pop("read_bytes")  # the counter is not picklable
    again = pickle.loads(pickle.dumps(corpus))  # a spawned worker reopens the URL
    assert np.array_equal(again.document(5), documents[5])


def test_few_documents_fetch_few_chunks(store: dict[str, Any], tmp_path: Path) -> None:
    documents = make_documents()
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    store["upload"]()
    size = (tmp_path / "d" / "corpus.bin").stat().st_size
    cache = new_cache(store, tmp_path / "cache")
    fetched = count_downloads(cache, "corpus.bin")
    chunk = 4096
    corpus = open_megatron(f"{store['url']}/corpus", cache=cache, chunk_bytes=chunk)
    picks = [250, 3, 120, 299, 60]
    for number in picks:
        assert np.array_equal(corpus.document(number), documents[number])
    cache.close()
    touched = 2 * len(picks) + DEFAULT_READ_AHEAD  # 2 chunks a document, one read-ahead
    assert 0 < fetched[0] <= touched * chunk < size / 4, (fetched[0], size)


def test_parquet_read_by_ranges_equals_local(store: dict[str, Any], tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from lightning_resumable_data.documents import open_parquet

    documents = make_documents(count=400, seed=3)
    rng = np.random.default_rng(4)
    table = pa.table({
        "input_ids": pa.array([d.tolist() for d in documents], pa.list_(pa.int32())),
        "text": [rng.bytes(4096) for _ in documents],  # the bytes a token reader never needs
    })  # fmt: skip
    path = tmp_path / "d" / "t.parquet"
    pq.write_table(table, path, row_group_size=50, compression="none")
    assert pq.ParquetFile(path).num_row_groups == 8
    store["upload"]()
    size = path.stat().st_size
    assert size > 4 * LIMIT
    cache = new_cache(store, tmp_path / "cache")
    fetched = count_downloads(cache, "t.parquet")
    with peak_of(cache) as peak:
        corpus = open_parquet(f"{store['url']}/t.parquet", cache=cache, chunk_bytes=CHUNK)
    cache.close()
    local = open_parquet(path)
    assert len(corpus) == len(local) == len(documents)
    for number in np.random.default_rng(5).permutation(len(documents)).tolist():
        assert np.array_equal(corpus.document(number), local.document(number)), number
        assert np.array_equal(corpus.document(number), documents[number]), number
    assert peak[0] <= LIMIT, (peak[0], LIMIT)
    assert 0 < fetched[0] < size / 3, (fetched[0], size)  # footer and one column only
    assert not any(name.endswith("t.parquet") for name in os.listdir(tmp_path / "cache"))


def test_server_restarted_mid_read(tmp_path: Path) -> None:
    documents = make_documents()
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    server = FileServer(tmp_path / "d", ranges=True)
    server.start()
    restart = threading.Timer(0.5, server.start)
    try:
        cache = ShardCache(tmp_path / "cache", max_bytes=LIMIT, retry=FAST)
        corpus = open_megatron(f"{server.url}/corpus", cache=cache, chunk_bytes=CHUNK)
        tokens = corpus.parts[0].tokens
        assert isinstance(tokens, RemoteTokens)
        pointers = corpus.parts[0].starts
        order = np.random.default_rng(6).permutation(len(documents)).tolist()
        for step, number in enumerate(order):
            if step >= 100 and not restart.is_alive() and not restart.finished.is_set():
                first = int(pointers[number]) // CHUNK
                key = tokens.file.part(first).key
                if not (tmp_path / "cache" / key).exists():  # this read must download
                    server.stop()
                    restart.start()
                    begin = time.monotonic()
                    got = corpus.document(number)
                    assert time.monotonic() - begin >= 0.3  # it waited for the server
                    assert np.array_equal(got, documents[number])
                    continue
            assert np.array_equal(corpus.document(number), documents[number]), number
        assert restart.finished.is_set()
        restart.join()
        cache.close()
    finally:
        restart.cancel()
        server.stop()


def test_a_truncated_object_is_an_error(tmp_path: Path) -> None:
    documents = make_documents()
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    with FileServer(tmp_path / "d", ranges=True) as server:
        cache = ShardCache(tmp_path / "cache", max_bytes=LIMIT, retry=FAST)
        corpus = open_megatron(f"{server.url}/corpus", cache=cache, chunk_bytes=CHUNK)
        binary = tmp_path / "d" / "corpus.bin"
        binary.write_bytes(binary.read_bytes()[: 3 * CHUNK + 100])  # replaced after the open
        assert np.array_equal(corpus.document(0), documents[0])
        with pytest.raises(ValueError, match=r"corpus\.bin.*truncated"):
            corpus.document(len(documents) - 1)
        cache.close()


def test_whole_file_download_on_request(tmp_path: Path) -> None:
    documents = make_documents(count=20)
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "cache")
        corpus = open_megatron(f"{server.url}/corpus", cache=cache, chunk_bytes=None)
        assert isinstance(corpus.parts[0].tokens, np.ndarray)
        assert [corpus.document(i).tolist() for i in range(20)] == [d.tolist() for d in documents]
    assert any(name.endswith("-corpus.bin") for name in os.listdir(tmp_path / "cache"))


def test_chunked_file_is_a_file(tmp_path: Path) -> None:
    data = np.random.default_rng(7).bytes(10_000)
    (tmp_path / "blob").write_bytes(data)
    cache = ShardCache(tmp_path / "cache", max_bytes=3 * 4096)
    with ChunkedRemoteFile(f"file://{tmp_path}/blob", cache, chunk_bytes=4096) as file:
        assert (file.size, file.chunks, file.part(2).size) == (10_000, 3, 10_000 - 8192)
        assert file.pread(4000, 8300) == data[4000:8300]  # three chunks, the last short
        assert file.pread(9990, 20_000) == data[9990:]
        assert file.pread(20_000, 20_001) == b""
        assert file.seek(-10, os.SEEK_END) == 9990
        assert (file.read(), file.read(5), file.tell()) == (data[-10:], b"", 10_000)
        file.seek(100)
        assert (file.read(50), file.tell()) == (data[100:150], 150)
        assert file.seekable()
        assert file.readable()
        assert file.part(1).key == f"{file.remote.key}@4096-8192"
    assert file.closed
    tokens = RemoteTokens(ChunkedRemoteFile(f"file://{tmp_path}/blob", cache, chunk_bytes=4096),
                          np.uint16)  # fmt: skip
    where = np.array([[4999, 0], [2047, 2048]])
    assert np.array_equal(tokens[where], np.frombuffer(data, np.uint16)[where])
    with pytest.raises(IndexError, match="5000 is out of range"):
        tokens[np.array([1, 5000])]
    with pytest.raises(TypeError, match="read by ranges"):
        np.asarray(tokens)
    with pytest.raises(ValueError, match="multiple of 8"):
        ChunkedRemoteFile(f"file://{tmp_path}/blob", cache, chunk_bytes=1001)
    cache.close()


def test_reads_plan_the_chunks_they_touch_and_forward_reads_read_ahead(tmp_path: Path) -> None:
    data = np.random.default_rng(8).bytes(10 * 4096)
    (tmp_path / "blob").write_bytes(data)
    cache = ShardCache(tmp_path / "cache")
    file = ChunkedRemoteFile(f"file://{tmp_path}/blob", cache, chunk_bytes=4096, read_ahead=3)
    tokens = RemoteTokens(file, np.uint8)

    def cached() -> set[int]:
        names = os.listdir(tmp_path / "cache")
        return {n for n in range(file.chunks) if file.part(n).key in names}

    assert tokens[np.array([3 * 4096])].tolist() == [data[3 * 4096]]  # a jump: no read-ahead
    where = np.array([5 * 4096 + 7, 9, 5 * 4096 + 1])
    assert tokens[where].tolist() == [data[i] for i in where.tolist()]
    deadline = time.monotonic() + 5
    while cached() != {0, 3, 5} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cached() == {0, 3, 5}  # not the chunks in between
    assert file.pread(5 * 4096 + 100, 5 * 4096 + 110) == data[5 * 4096 + 100 : 5 * 4096 + 110]
    while cached() != {0, 3, 5, 6, 7, 8} and time.monotonic() < deadline + 5:
        time.sleep(0.01)  # a forward read: the next 3 chunks download in the background
    assert cached() == {0, 3, 5, 6, 7, 8}
    cache.close()


def test_a_resume_over_a_rewritten_bin_is_refused(store: dict[str, Any], tmp_path: Path) -> None:
    """docs/remote.md: the state pins the files read by ranges too. A packed Megatron corpus
    from S3 (alone, and as a mixture source): its .bin rewritten at the same size between
    the checkpoint and the resume, the resume is refused, naming the file."""
    from lightning_resumable_data import (
        DistributedSampler,
        MixtureDataset,
        MixtureSampler,
        StatefulDataLoader,
        StateMismatchError,
    )

    if store["server"] is not None:
        pytest.skip("python's http.server sends no ETag: nothing identifies the bytes")
    documents = make_documents(60)
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    store["upload"]()

    def packed(cache_dir: str) -> PackedDataset:
        cache = new_cache(store, tmp_path / cache_dir)
        corpus = open_megatron(f"{store['url']}/corpus", cache=cache, chunk_bytes=CHUNK)
        return PackedDataset(corpus, 32, eos_id=-1, seed=1)

    def loaders(cache_dir: str) -> list[StatefulDataLoader[Any]]:
        alone, mixed = packed(cache_dir + "a"), MixtureDataset({"web": packed(cache_dir + "b")})
        return [
            StatefulDataLoader(alone, batch_size=4, sampler=DistributedSampler(alone, 1, 0)),
            StatefulDataLoader(
                mixed, batch_size=4, sampler=MixtureSampler(mixed, {"web": 1.0}, 1, 0)
            ),
        ]

    states = []
    for loader in loaders("first"):
        batches = iter(loader)
        next(batches)
        states.append(loader.state_dict())
    assert set(states[0]["sampler"]["pins"]) == {"corpus.bin"}
    assert set(states[1]["sampler"]["pins"]) == {"web/corpus.bin"}

    for loader, state in zip(loaders("same"), states, strict=True):
        loader.load_state_dict(state)  # unchanged bytes: resumes
    data = bytearray((tmp_path / "d" / "corpus.bin").read_bytes())
    data[:4] = b"\x01\x02\x03\x04"  # same size, other tokens
    (tmp_path / "d" / "corpus.bin").write_bytes(bytes(data))
    store["upload"]()
    for loader, state, name in zip(
        loaders("after"), states, ["corpus.bin", "web/corpus.bin"], strict=True
    ):
        with pytest.raises(StateMismatchError, match=rf"'{name}' was etag="):
            loader.load_state_dict(state)
