"""Faults of remote storage: a server that dies and comes back, a slow one, bad objects,
403/404, a cache deleted mid-run, two processes sharing one cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from remote_servers import FileServer
from test_remote_storage import (
    SHARDS,
    batches,
    make_shards,
    s3,  # noqa: F401  (a fixture)
    s3_endpoint,  # noqa: F401  (a fixture)
)

from lightning_resumable_data.remote import RetryPolicy, ShardCache
from lightning_resumable_data.shards import (
    DistributedShardedDataset,
    open_token_shards,
)

FAST = RetryPolicy(attempts=12, base_s=0.05, cap_s=0.5)


def dataset_over(url: str, cache: ShardCache) -> DistributedShardedDataset[Any]:
    return DistributedShardedDataset(open_token_shards(url, cache=cache), prefetch=1, seed=11)


def test_server_killed_mid_epoch_and_restarted(tmp_path: Path) -> None:
    local = make_shards(tmp_path / "d")
    expected = Counter(r.read(i).tobytes() for r in local for i in range(len(r)))
    server = FileServer(tmp_path / "d")
    server.start()
    try:
        cache = ShardCache(tmp_path / "c", max_bytes=2 * 512, retry=FAST, prefetch_bytes=0)
        dataset = dataset_over(server.url, cache)
        ledger: list[bytes] = []
        restart = threading.Timer(0.6, server.start)
        for step, batch in enumerate(batches(dataset)):
            ledger += batch
            if step == 6:  # mid-epoch: the next shard is not downloaded yet
                server.stop()
                restart.start()
        restart.join()
        dataset.close()
    finally:
        server.stop()
    assert Counter(ledger) == expected  # nothing lost, nothing read twice


def test_server_down_for_good_names_the_url(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=RetryPolicy(attempts=3, base_s=0.01))
        readers = open_token_shards(server.url, cache=cache)
    with pytest.raises(OSError, match=r"after 3 attempts.*reachable") as info:
        readers[0].load()
    assert f"{server.url}/shard_00000.bin" in str(info.value)


def test_slow_server_is_hidden_by_prefetch(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    stalls = {}
    with FileServer(tmp_path / "d") as server:
        for prefetch_bytes in (0, 1 << 20):
            server.set_delay(0.0)
            cache = ShardCache(
                tmp_path / f"c{prefetch_bytes}", prefetch_bytes=prefetch_bytes, retry=FAST
            )
            dataset = DistributedShardedDataset(
                open_token_shards(server.url, cache=cache), prefetch=0, seed=1
            )
            server.set_delay(0.15)  # per request: a far-away server
            stalls[prefetch_bytes] = 0.0
            it = batches(dataset)
            while True:
                start = time.perf_counter()
                if next(it, None) is None:
                    break
                stalls[prefetch_bytes] += time.perf_counter() - start
                time.sleep(0.06)  # the training step
            dataset.close()
            cache.close()
            assert cache.downloads == SHARDS
    # Without prefetch each of the 6 shards waits for its download; with it only the
    # first does: the others download during the training steps.
    assert stalls[0] > 6 * 0.15
    assert stalls[1 << 20] < stalls[0] / 2, stalls


def test_truncated_object_is_detected(tmp_path: Path) -> None:
    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=FAST)
        readers = open_token_shards(server.url, cache=cache)  # HTTP: sizes from the index
        path = tmp_path / "d" / "shard_00002.bin"
        path.write_bytes(path.read_bytes()[:100])
        with pytest.raises(ValueError, match=r"shard_00002.bin' sent 100 bytes.*truncated"):
            readers[2].load()
        assert not any(p.name.endswith("shard_00002.bin") for p in (tmp_path / "c").iterdir())


def test_changed_s3_object(s3: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    cache = ShardCache(tmp_path / "c", storage_options=s3["options"], retry=FAST)
    readers = open_token_shards(s3["url"], cache=cache)
    data = bytearray((s3["local"] / "shard_00001.bin").read_bytes())
    data[:2] = b"\xff\xff"  # same size, other tokens
    s3["fs"].pipe(f"{s3['url']}/shard_00001.bin", bytes(data))
    with pytest.raises(ValueError, match=r"shard_00001.bin' has MD5 .* changed"):
        readers[1].load()
    with pytest.raises(ValueError, match="rewritten"):
        readers[1].check()


@pytest.mark.parametrize(("status", "error"), [(403, PermissionError), (404, FileNotFoundError)])
def test_forbidden_and_missing_are_not_retried(
    tmp_path: Path, status: int, error: type[Exception]
) -> None:
    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=RetryPolicy(attempts=6, base_s=0.2))
        readers = open_token_shards(server.url, cache=cache)
        server.status["/shard_00003.bin"] = status
        server.requests.clear()
        start = time.perf_counter()
        with pytest.raises(error, match=r"shard_00003.bin.*Not retried"):
            readers[3].load()
        assert time.perf_counter() - start < 0.5  # no backoff
        assert server.requests == [("GET", "/shard_00003.bin")]  # one request, no storm


def test_cache_directory_deleted_mid_run(tmp_path: Path) -> None:
    local = make_shards(tmp_path / "d")
    expected = Counter(r.read(i).tobytes() for r in local for i in range(len(r)))
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", max_bytes=3 * 512, retry=FAST)
        dataset = dataset_over(server.url, cache)
        ledger: list[bytes] = []
        for step, batch in enumerate(batches(dataset)):
            ledger += batch
            if step in (5, 13):
                shutil.rmtree(tmp_path / "c", ignore_errors=True)
        dataset.close()
        cache.close()
    assert Counter(ledger) == expected


def test_cache_directory_deleted_between_its_mkdir_and_a_lock_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder deleted at the worst moment (after the lock folder is made, before the lock
    file opens) is made again: the read goes on."""
    local = make_shards(tmp_path / "d")
    real_open, deleted = os.open, list[str]()

    def open_after_a_deletion(path: Any, *args: Any, **kwargs: Any) -> int:
        if not deleted and ".locks" in str(path):
            deleted.append(str(path))
            shutil.rmtree(tmp_path / "c")
        return int(real_open(path, *args, **kwargs))

    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c", retry=FAST)
        readers = open_token_shards(server.url, cache=cache)
        monkeypatch.setattr(os, "open", open_after_a_deletion)
        got = readers[0].read_range(0, len(readers[0])).tobytes()
        cache.close()
    assert deleted
    assert got == local[0].read_range(0, len(local[0])).tobytes()


_CHILD = textwrap.dedent(
    """
    import hashlib, sys
    from lightning_resumable_data.remote import ShardCache
    from lightning_resumable_data.shards import open_token_shards
    cache = ShardCache(sys.argv[2], max_bytes=3 * 512)
    digest = hashlib.sha256()
    for _ in range(3):
        for reader in open_token_shards(sys.argv[1], cache=cache):
            digest.update(reader.read_range(0, len(reader)).tobytes())
            reader.close()
    print(digest.hexdigest(), cache.downloads)
    """
)


def test_two_processes_share_one_cache(tmp_path: Path) -> None:
    local = make_shards(tmp_path / "d")
    import hashlib

    digest = hashlib.sha256()
    for _ in range(3):
        for reader in local:
            digest.update(reader.read_range(0, len(reader)).tobytes())
    with FileServer(tmp_path / "d") as server:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, server.url, str(tmp_path / "shared")],
                stdout=subprocess.PIPE, text=True,
            )
            for _ in range(2)
        ]  # fmt: skip
        outputs = [child.communicate(timeout=120)[0].split() for child in children]
    assert [child.returncode for child in children] == [0, 0]
    assert [out[0] for out in outputs] == [digest.hexdigest()] * 2
    cached = sum(p.stat().st_size for p in (tmp_path / "shared").iterdir() if p.is_file())
    assert cached <= 3 * 512
    # The bound evicts, so a shard may be downloaded again, but never by both at once.
    assert sum(int(out[1]) for out in outputs) >= len(local)


_CHILD_ONCE = _CHILD.replace("max_bytes=3 * 512", "max_bytes=1 << 20")


def test_a_file_is_downloaded_once_by_a_node_and_the_others_wait(tmp_path: Path) -> None:
    """docs/remote.md: every rank and worker of a node may share the directory; a file is
    downloaded once (an exclusive lock per file, the others wait for it)."""
    local = make_shards(tmp_path / "d")
    shard_files = sorted(p.name for p in (tmp_path / "d").iterdir() if p.suffix == ".bin")
    assert len(shard_files) == len(local) > 1
    with FileServer(tmp_path / "d") as server:
        server.set_delay(0.3)  # every download is slow: both processes ask at the same time
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _CHILD_ONCE, server.url, str(tmp_path / "shared")],
                stdout=subprocess.PIPE, text=True,
            )
            for _ in range(3)
        ]  # fmt: skip
        outputs = [child.communicate(timeout=120)[0].split() for child in children]
        gets = [path for method, path in server.requests if method == "GET"]
    assert [child.returncode for child in children] == [0, 0, 0]
    assert len({out[0] for out in outputs}) == 1  # all read the same bytes
    for name in shard_files:  # one GET per shard for the whole node
        assert sum(path.endswith("/" + name) for path in gets) == 1, (name, gets)
    assert sum(int(out[1]) for out in outputs) == len(shard_files)  # downloads, all processes


def test_secrets_never_reach_a_state_a_log_or_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/remote.md: storage_options never reaches a state dict, a log line or an error
    message, and URLs are printed without user info or query strings."""
    import json
    import logging

    from lightning_resumable_data import StatefulDataLoader

    caplog.set_level(logging.DEBUG)
    make_shards(tmp_path / "d")
    secrets = ("SECRET-OPTION", "SECRET-PASSWORD", "SECRET-SIGNATURE")
    with FileServer(tmp_path / "d") as server:
        options = {"headers": {"X-Token": "SECRET-OPTION"}}
        cache = ShardCache(tmp_path / "c", storage_options=options, retry=FAST)
        dataset = dataset_over(server.url, cache)
        loader = StatefulDataLoader(dataset, batch_size=2, sampler=dataset.sampler(1, 0))
        next(iter(loader))
        shown = [json.dumps(loader.state_dict()), repr(cache), repr(dataset)]
        dataset.close()
        # Errors about URLs with user info and a presigned-style query string.
        server.status["/shard_00002.bin"] = 403
        fresh = ShardCache(tmp_path / "c2", storage_options=options, retry=FAST)
        signed = server.url.replace("http://", "http://user:SECRET-PASSWORD@")
        with pytest.raises(PermissionError) as forbidden:
            open_token_shards(signed, cache=fresh)[2].load()
        shown.append(f"{forbidden.value!r} {forbidden.value}")
        assert "127.0.0.1" in str(forbidden.value)  # the URL is named, without its user info
        with pytest.raises(Exception) as bad:  # noqa: PT011 - any error: its text is checked
            open_token_shards(f"{server.url}/missing?sig=SECRET-SIGNATURE", cache=fresh)
        shown.append(f"{bad.value!r} {bad.value}")
        fresh.close()
        cache.close()
    # The package's own log lines (fsspec's DEBUG lines are fsspec's: not filtered here).
    ours = [r for r in caplog.records if r.name.startswith("lightning_resumable_data")]
    shown += [record.getMessage() for record in ours]
    for text in shown:
        for secret in secrets:
            assert secret not in text, text


def test_the_default_retry_policy(tmp_path: Path) -> None:
    """docs/remote.md: a 5xx is retried with exponential backoff and jitter, by default
    RetryPolicy(attempts=6, base_s=0.25, cap_s=8); after the last attempt a RemoteReadError
    names the URL and the last error."""
    from lightning_resumable_data.remote import RemoteReadError

    make_shards(tmp_path / "d")
    with FileServer(tmp_path / "d") as server:
        cache = ShardCache(tmp_path / "c")  # the default policy
        readers = open_token_shards(server.url, cache=cache)
        server.status["/shard_00001.bin"] = 503
        server.requests.clear()
        start = time.perf_counter()
        with pytest.raises(RemoteReadError, match=r"shard_00001\.bin.*503") as raised:
            readers[1].load()
        elapsed = time.perf_counter() - start
        cache.close()
    assert server.requests == [("GET", "/shard_00001.bin")] * 6  # six tries in all
    delays = [0.25 * 2**k for k in range(5)]  # before tries 2..6, each jittered in [d/2, d]
    assert sum(delays) / 2 <= elapsed < sum(delays) + 2, elapsed
    assert "127.0.0.1" in str(raised.value)
