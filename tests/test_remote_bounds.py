"""Remote reads are bounded in time, retry transfers cut short, and list objects afresh.

Against real servers on 127.0.0.1: the threaded HTTP server of ``remote_servers`` with
faults (a stall: the request is read and never answered; a cut: half the body, then the
connection closes) and moto's S3 server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from remote_servers import FileServer
from test_remote_storage import (
    SHARDS,
    make_shards,
    s3,  # noqa: F401  (a fixture)
    s3_endpoint,  # noqa: F401  (a fixture)
)

from lightning_resumable_data.remote import (
    RemoteReadError,
    RemoteTokenShardReader,
    RetryPolicy,
    ShardCache,
)
from lightning_resumable_data.shards import open_token_shards

QUICK = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.02, timeout_s=1.0)


def test_the_documented_defaults() -> None:
    """docs/remote.md: six tries, 60 s each at most, 10 s to connect."""
    policy = RetryPolicy()
    assert (policy.attempts, policy.timeout_s, policy.connect_timeout_s) == (6, 60.0, 10.0)
    for bad in ({"timeout_s": 0}, {"timeout_s": float("nan")}, {"connect_timeout_s": -1}):
        with pytest.raises(ValueError, match="hang a job forever"):
            RetryPolicy(**bad)


def test_an_http_server_that_never_answers_fails_within_the_bound(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        server.stall.add("*")  # connections accepted, requests read, no answer ever
        start = time.monotonic()
        with pytest.raises(RemoteReadError) as raised:
            open_token_shards(server.url, cache=ShardCache(tmp_path / "c", retry=QUICK))
        elapsed = time.monotonic() - start
        requests = len(server.requests)
    assert 3.0 <= elapsed < 3 * 1.0 + 3, elapsed  # three tries of 1 s, then the error
    assert requests == 3
    message = str(raised.value)
    assert f"{server.url}/index.json" in message
    assert "3 attempts" in message
    assert "timeout_s=1 s" in message


def test_an_s3_endpoint_that_never_answers_fails_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    (tmp_path / "empty").mkdir()
    with FileServer(tmp_path / "empty") as server:
        server.stall.add("*")
        options = {"client_kwargs": {"endpoint_url": server.url}}
        cache = ShardCache(tmp_path / "c", storage_options=options, retry=QUICK)
        start = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"s3://bucket/shards/index\.json.*3 attempts"):
            open_token_shards("s3://bucket/shards", cache=cache)
        elapsed = time.monotonic() - start
    assert elapsed < 3 * 1.0 + 3, elapsed  # botocore's own retries live inside each try


def test_a_transfer_cut_short_is_retried(tmp_path: Path) -> None:
    local = make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=QUICK)
        readers = open_token_shards(server.url, cache=cache)
        server.cut["/shard_00001.bin"] = 2  # two cut transfers, then a whole one
        server.requests.clear()
        readers[1].load()
        gets = [path for method, path in server.requests if method == "GET"]
    assert gets == ["/shard_00001.bin"] * 3
    assert [readers[1].read(i).tolist() for i in range(len(readers[1]))] == [
        local[1].read(i).tolist() for i in range(len(local[1]))
    ]


def test_a_transfer_always_cut_short_ends_in_a_named_error(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=QUICK)
        readers = open_token_shards(server.url, cache=cache)
        server.cut["/shard_00001.bin"] = 10**6
        with pytest.raises(RemoteReadError) as raised:
            readers[1].load()
    message = str(raised.value)
    assert f"{server.url}/shard_00001.bin" in message
    assert "3 attempts" in message
    assert "Payload" in message  # the last cause: aiohttp's ClientPayloadError
    assert not any(p.name.endswith("shard_00001.bin") for p in (tmp_path / "c").iterdir())


@pytest.mark.parametrize("same_cache", [True, False])
def test_an_object_fixed_after_a_refused_open_is_seen_on_reopen(
    s3: dict[str, Any],  # noqa: F811
    tmp_path: Path,
    same_cache: bool,
) -> None:
    whole = (s3["local"] / "shard_00002.bin").read_bytes()
    key = f"{s3['url']}/shard_00002.bin"
    s3["fs"].pipe(key, whole[:100])  # truncated in the bucket
    cache = ShardCache(tmp_path / "c", storage_options=s3["options"], retry=QUICK)
    with pytest.raises(ValueError, match=r"shard_00002\.bin' has 100 bytes"):
        open_token_shards(s3["url"], cache=cache)
    s3["fs"].pipe(key, whole)  # fixed
    if not same_cache:
        cache = ShardCache(tmp_path / "c2", storage_options=s3["options"], retry=QUICK)
    readers = open_token_shards(s3["url"], cache=cache)
    assert isinstance(readers[2], RemoteTokenShardReader)
    assert readers[2].remote.size == len(whole)
    readers[2].load()
    assert readers[2].read(0).tolist() == open_token_shards(s3["local"])[2].read(0).tolist()


SAVE_OR_RESUME = """
import json, sys, warnings
from lightning_resumable_data import ShardedDataLoader
from lightning_resumable_data.remote import ShardCache
from lightning_resumable_data.shards import open_token_shards

url, cache_dir, endpoint, mode, path = sys.argv[1:6]
cache = ShardCache(cache_dir, storage_options={"client_kwargs": {"endpoint_url": endpoint}})
loader = ShardedDataLoader(open_token_shards(url, cache=cache), batch_size=4, seed=3,
                           multiprocessing=False, dp_rank=0, num_replicas=1,
                           strict_resume=mode != "lenient")
if mode == "save":
    batches = iter(loader)
    for _ in range(5):
        next(batches)
    json.dump(loader.state_dict(), open(path, "w"))
    loader.close()  # a live iterator's threads must not outlive the interpreter
else:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.load_state_dict(json.load(open(path)))
    print(json.dumps({"batches": [b.tolist() for b in loader],
                      "warnings": [str(w.message) for w in caught]}))
    loader.close()
cache.close()
"""


def save_or_resume(
    bucket: dict[str, Any], tmp_path: Path, mode: str
) -> subprocess.CompletedProcess[str]:
    endpoint = bucket["options"]["client_kwargs"]["endpoint_url"]
    (tmp_path / "run.py").write_text(SAVE_OR_RESUME)
    return subprocess.run(
        [sys.executable, "run.py", bucket["url"], str(tmp_path / f"cache-{mode}"), endpoint, mode,
         "state.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_resume_over_a_replaced_object_is_refused(
    s3: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Saved in one process; the shard is rewritten (same size, other bytes); another
    process resumes: refused, naming the shard and both ETags. Unchanged: it resumes."""
    saved = save_or_resume(s3, tmp_path, "save")
    assert saved.returncode == 0, saved.stderr[-2000:]
    state = json.loads((tmp_path / "state.json").read_text())
    assert set(state["pins"]) == {f"shard_{i:05d}.bin" for i in range(SHARDS)}
    assert all(pin.startswith("etag=") for pin in state["pins"].values())

    unchanged = save_or_resume(s3, tmp_path, "strict")
    assert unchanged.returncode == 0, unchanged.stderr[-2000:]
    expected = json.loads(unchanged.stdout)["batches"]
    assert len(expected) == SHARDS * 16 // 4 - 5

    data = bytearray((s3["local"] / "shard_00001.bin").read_bytes())
    data[:2] = b"\xff\xff"  # same size, other tokens
    s3["fs"].pipe(f"{s3['url']}/shard_00001.bin", bytes(data))
    refused = save_or_resume(s3, tmp_path, "strict")
    assert refused.returncode != 0
    was, now = state["pins"]["shard_00001.bin"], s3["fs"].info(f"{s3['url']}/shard_00001.bin")
    assert "StateMismatchError" in refused.stderr
    assert f"'shard_00001.bin' was {was}, is now etag={now['ETag'].strip(chr(34))}" in (
        refused.stderr
    )

    lenient = save_or_resume(s3, tmp_path, "lenient")  # strict_resume=False: on, warned
    assert lenient.returncode == 0, lenient.stderr[-2000:]
    out = json.loads(lenient.stdout)
    assert len(out["batches"]) == len(expected)
    assert any("shard_00001.bin" in message for message in out["warnings"])


def test_a_wait_for_another_process_lock_is_bounded_and_follows_progress(
    tmp_path: Path,
) -> None:
    """A process stuck while it holds a shard's lock cannot hang the others: they give up
    with a named error once it made no progress for the policy's patience; a holder whose
    download grows is waited for."""
    import fcntl
    import os
    import threading

    from lightning_resumable_data.remote import CacheLockTimeoutError

    make_shards(tmp_path / "d")
    patient = RetryPolicy(attempts=1, base_s=0, cap_s=0, timeout_s=0.5)  # patience 0.5 s
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=patient)
        readers = open_token_shards(server.url, cache=cache)
        assert isinstance(readers[1], RemoteTokenShardReader)
        key = readers[1].remote.key
        (tmp_path / "c" / ".locks").mkdir(parents=True)
        holder = os.open(tmp_path / "c" / ".locks" / key, os.O_RDWR | os.O_CREAT)
        fcntl.flock(holder, fcntl.LOCK_EX)  # "another process" downloading, then stuck
        start = time.monotonic()
        with pytest.raises(CacheLockTimeoutError, match=rf"{key}.*no progress"):
            readers[1].load()
        assert 0.5 <= time.monotonic() - start < 3

        growing = tmp_path / "c" / f".{key}.256.1.1.tmp"

        def download_slowly() -> None:  # grows for 2 s (4x the patience), then lets go
            for _ in range(10):
                with growing.open("ab") as file:
                    file.write(b"x")
                time.sleep(0.2)
            growing.unlink()
            os.close(holder)

        thread = threading.Thread(target=download_slowly)
        start = time.monotonic()
        thread.start()
        readers[1].load()  # waits while the holder progresses, then downloads itself
        thread.join()
        assert time.monotonic() - start >= 1.8
    local = open_token_shards(tmp_path / "d")[1]
    assert readers[1].read(3).tolist() == local.read(3).tolist()


def test_a_stateful_loader_around_a_sharded_sampler_pins_the_shards(
    s3: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    """docs/remote.md: StatefulDataLoader(strict_resume=False) around a ShardedSampler; its
    checkpoints carry the pins too, so a rewritten shard is refused by default."""
    from lightning_resumable_data import ResumeWarning, StatefulDataLoader, StateMismatchError
    from lightning_resumable_data.shards import DistributedShardedDataset

    datasets: list[DistributedShardedDataset[Any]] = []

    def loader(strict: bool) -> StatefulDataLoader[Any]:
        cache = ShardCache(tmp_path / f"c{strict}", storage_options=s3["options"])
        dataset = DistributedShardedDataset(open_token_shards(s3["url"], cache=cache), seed=2)
        datasets.append(dataset)
        sampler = dataset.sampler(num_replicas=1, rank=0)
        return StatefulDataLoader(dataset, batch_size=4, sampler=sampler, strict_resume=strict)

    try:
        first = loader(True)
        batches = iter(first)
        for _ in range(3):
            next(batches)
        state = first.state_dict()
        assert set(state["sampler"]["pins"]) == {f"shard_{i:05d}.bin" for i in range(SHARDS)}

        data = bytearray((s3["local"] / "shard_00002.bin").read_bytes())
        data[:2] = b"\xff\xff"
        s3["fs"].pipe(f"{s3['url']}/shard_00002.bin", bytes(data))
        with pytest.raises(StateMismatchError, match=r"'shard_00002\.bin' was etag="):
            loader(True).load_state_dict(state)
        lenient = loader(False)
        with pytest.warns(ResumeWarning, match="shard_00002"):
            lenient.load_state_dict(state)
    finally:  # stop the shard prefetch while the server is up: a download left running
        for dataset in datasets:  # past the server's end retries, and holds up exit
            dataset.close()
