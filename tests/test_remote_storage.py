"""Token shards read from a real local S3 server (moto) and a real HTTP server."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from remote_servers import FileServer, moto_s3

from lightning_resumable_data import ShardedDataLoader
from lightning_resumable_data.remote import (
    RemoteTokenShardReader,
    ShardCache,
    local_path,
    upcoming_shards,
)
from lightning_resumable_data.shards import (
    DistributedShardedDataset,
    TokenShardReader,
    open_token_shards,
    write_token_shards,
)

SEQ_LEN, SHARD_TOKENS, SHARDS = 8, 8 * 16, 6


def make_shards(directory: Path) -> list[TokenShardReader]:
    tokens = np.arange(SEQ_LEN * 16 * SHARDS) % 60_000
    write_token_shards(directory, [tokens], seq_len=SEQ_LEN, tokens_per_shard=SHARD_TOKENS)
    return open_token_shards(directory)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as endpoint:  # one server for the module, stopped at its end
        yield endpoint


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")  # dummy credentials, found by the backend
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    options = {"client_kwargs": {"endpoint_url": s3_endpoint}, "skip_instance_cache": True}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"data{len(fs.ls(''))}"
    fs.mkdir(bucket)
    make_shards(tmp_path / "local")
    fs.put(str(tmp_path / "local") + "/", f"{bucket}/shards", recursive=True)
    return {
        "fs": fs, "options": options, "local": tmp_path / "local",
        "url": f"s3://{bucket}/shards", "bucket": bucket,
    }  # fmt: skip


def batches(dataset: DistributedShardedDataset[Any], epoch: int = 0) -> Iterator[list[bytes]]:
    sampler = dataset.sampler(num_replicas=1, rank=0)
    sampler.set_epoch(epoch)
    order = list(sampler)
    for start in range(0, len(order), 4):
        yield [np.asarray(x).tobytes() for x in dataset.__getitems__(order[start : start + 4])]


def test_s3_shards_read_like_local_ones(s3: dict[str, Any], tmp_path: Path) -> None:
    cache = ShardCache(tmp_path / "cache", storage_options=s3["options"])
    remote = open_token_shards(s3["url"], cache=cache)
    local = open_token_shards(s3["local"])
    assert all(isinstance(r, RemoteTokenShardReader) for r in remote)
    assert [r.name for r in remote] == [r.name for r in local]
    assert all(isinstance(r, RemoteTokenShardReader) and r.remote.etag for r in remote)
    assert cache.downloads == 0  # opening downloads no shard
    for a, b in zip(remote, local, strict=True):
        assert np.array_equal(a.read_range(0, len(a)), b.read_range(0, len(b)))
    assert "testing" not in repr(remote[0]) + repr(cache)


def test_s3_loader_state_has_no_cache_and_resumes_across_storage(
    s3: dict[str, Any], tmp_path: Path
) -> None:
    cache = ShardCache(tmp_path / "cache", max_bytes=3 * 512, storage_options=s3["options"])

    def loader(shards: list[Any]) -> ShardedDataLoader:
        return ShardedDataLoader(
            shards, batch_size=4, seed=3, dp_rank=0, num_replicas=1, multiprocessing=False
        )

    reference = [b.numpy().tobytes() for b in loader(open_token_shards(s3["local"]))]
    remote = loader(open_token_shards(s3["url"], cache=cache))
    it = iter(remote)
    first = [next(it).numpy().tobytes() for _ in range(7)]
    state = remote.state_dict()
    remote.close()
    text = json.dumps(state)
    assert "cache" not in text
    assert "://" not in text
    resumed = loader(open_token_shards(s3["local"]))  # a remote run resumed over local files
    resumed.load_state_dict(state)
    assert first + [b.numpy().tobytes() for b in resumed] == reference
    assert cache.cached_bytes() <= 3 * 512


def test_s3_npy_and_single_reader_by_url(s3: dict[str, Any], tmp_path: Path) -> None:
    array = np.arange(5 * SEQ_LEN, dtype=np.uint16).reshape(5, SEQ_LEN)
    np.save(tmp_path / "one.npy", array)
    url = f"s3://{s3['bucket']}/one.npy"
    s3["fs"].put(str(tmp_path / "one.npy"), url)
    cache = ShardCache(tmp_path / "cache", storage_options=s3["options"])
    reader = TokenShardReader(url, SEQ_LEN, cache=cache)  # type: ignore[call-arg]
    assert isinstance(reader, RemoteTokenShardReader)
    assert len(reader) == 5
    assert cache.downloads == 0  # the header was range-read
    assert reader.read(3).tolist() == array[3].tolist()
    assert local_path(url, cache).read_bytes() == (tmp_path / "one.npy").read_bytes()


def test_cache_bound_eviction_by_order_and_prefetch(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    sizes = {path.stat().st_size for path in (tmp_path / "d").glob("*.bin")}
    assert len(sizes) == 1, sizes
    with FileServer(tmp_path / "d") as server:
        limit = 3 * sizes.pop()  # three of the six shards: the bound binds
        cache = ShardCache(tmp_path / "cache", max_bytes=limit, prefetch_workers=2)
        dataset = DistributedShardedDataset(
            open_token_shards(server.url, cache=cache), max_resident=2, prefetch=1, seed=5
        )
        server.set_delay(0.02)  # downloads stay in flight while the reader goes on
        peaks = {"accounted": 0, "on disk": 0, "samples": 0}
        done = threading.Event()

        def size(path: Path) -> int:
            try:
                status = path.stat()
            except FileNotFoundError:  # evicted between the listing and the stat
                return 0
            return status.st_size if stat.S_ISREG(status.st_mode) else 0

        def on_disk() -> int:  # under the cache's lock: no eviction or reservation mid-scan
            (tmp_path / "cache").mkdir(exist_ok=True)
            lock = os.open(tmp_path / "cache" / ".lock", os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(lock, fcntl.LOCK_SH)
                return sum(size(path) for path in (tmp_path / "cache").rglob("*"))
            finally:
                os.close(lock)

        def watch() -> None:  # sampled all the time, not only between batches
            while not done.is_set():
                peaks["on disk"] = max(peaks["on disk"], on_disk())
                peaks["samples"] += 1
                peaks["accounted"] = max(peaks["accounted"], cache.cached_bytes())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        seen: list[bytes] = []
        try:
            for epoch in range(2):
                for batch in batches(dataset, epoch):
                    seen += batch
        finally:
            done.set()
            watcher.join()
        dataset.close()
        sampled_to_the_end = peaks["samples"]
        cache.close()
    assert sampled_to_the_end > 10  # the watcher ran all along (no exception ended it)
    assert 0 < peaks["accounted"] <= limit  # cached files plus downloads in flight
    assert peaks["on disk"] <= limit
    assert len(set(seen)) == SHARDS * 16
    assert len(seen) == 2 * SHARDS * 16
    # Shards were evicted and downloaded again (the bound bound), at most once an epoch.
    assert SHARDS < cache.downloads <= 2 * SHARDS


def test_upcoming_shards_follow_the_epoch_order() -> None:
    from lightning_resumable_data.index.sharding import shard_order

    order = shard_order(5, 7, 2, True).tolist()
    following = list(upcoming_shards(5, 7, True, 2, order[1]))
    assert following[:3] == order[2:]
    assert following[3:] == shard_order(5, 7, 3, True).tolist()[:1]


def test_example_reads_shards_from_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    examples = Path(__file__).resolve().parent.parent / "examples"
    monkeypatch.syspath_prepend(str(examples))
    spec = importlib.util.spec_from_file_location(
        "sharded_tokens_url", examples / "sharded_tokens.py"
    )
    assert spec is not None
    assert spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    write_token_shards(
        tmp_path / "d", example.documents(200, seed=0), seq_len=example.SEQ_LEN + 1,
        tokens_per_shard=4096,
    )  # fmt: skip
    monkeypatch.chdir(tmp_path)
    with FileServer(tmp_path / "d") as server:
        assert example.main(["--smoke", "--url", server.url, "--cache-mib", "0.1"]) == 0
