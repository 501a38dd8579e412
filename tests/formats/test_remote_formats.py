"""MDS, LitData and WebDataset read from object storage: a local S3 (moto) and HTTP servers.

The corpora are written by the peers' own writers (``write_mds.py``, ``write_litdata.py``,
``write_wds.py`` under ``LRD_PEERS_PYTHON``), uploaded as written, and read back through a
:class:`ShardCache`: sample for sample equal to the local copy, an exact mid-epoch resume
and a 2 -> 1 rank resume over the bucket within the cache's bound, a resume over an object
rewritten since the checkpoint refused, and a stalled or failing server ending in a
``RemoteReadError`` within the retry bound.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from remote_servers import FileServer, moto_s3

from formats.write_litdata import BLOCK_SIZE
from lightning_resumable_data import ResumeWarning, ShardedDataLoader, StateMismatchError
from lightning_resumable_data.formats import open_litdata, open_mds, open_webdataset
from lightning_resumable_data.formats._remote import RemoteShard
from lightning_resumable_data.formats._remote_wds import SIDECARS
from lightning_resumable_data.remote import (
    RemoteReadError,
    RetryPolicy,
    ShardCache,
    upcoming_shards,
)

ROOT = Path(__file__).resolve().parents[2]
WDS = "shard-{000000..000003}.tar"
READ_BACK = [
    "mds/plain",
    "mds/gz",
    "litdata/pytree",
    "litdata/tokens",
    "litdata/zstd_chunk",
    "wds",
]
QUICK = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.02, timeout_s=1.0)


def open_case(case: str, root: str, cache: ShardCache | None = None) -> list[Any]:
    """The readers of corpus ``case`` under ``root`` (a local folder or its URL)."""
    kind, _, name = case.partition("/")
    if kind == "mds":
        return open_mds(f"{root}/{case}", allow_unsafe_types=True, cache=cache)
    if kind == "litdata":
        block = BLOCK_SIZE if name == "tokens" else None
        return open_litdata(f"{root}/{case}", block_size=block, cache=cache)
    return open_webdataset(f"{root}/wds/{WDS}", cache=cache)


# -- the corpora and the servers -----------------------------------------------------------


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = Path(os.environ.get("LRD_PEERS_PYTHON", ROOT / ".venv-peers/bin/python"))
    if not python.exists():
        pytest.skip(
            f"no peers' interpreter at {python}: run `make setup` (or set LRD_PEERS_PYTHON)"
        )
    out = tmp_path_factory.mktemp("corpora")
    for kind in ("mds", "litdata", "wds"):
        (out / kind).mkdir()
        script = Path(__file__).with_name(f"write_{kind}.py")
        done = subprocess.run(
            [str(python), str(script), str(out / kind)],
            cwd=out / kind, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"write_{kind}.py failed:\n{done.stderr[-4000:]}"
    return out


class Bucket:
    """A bucket of the local S3 server, the corpora uploaded under ``corpora/``."""

    def __init__(self, endpoint: str, name: str, corpora: Path) -> None:
        import s3fs

        self.options = {"client_kwargs": {"endpoint_url": endpoint}}
        self.fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.options)
        self.name, self.local = name, corpora
        self.fs.mkdir(name)
        self.url = self.upload("corpora", *READ_BACK)

    def upload(self, prefix: str, *folders: str) -> str:
        """Upload corpus ``folders`` under ``prefix``, as written (no sidecar, no extra file)."""
        for folder in folders:
            self.fs.put(f"{self.local / folder}/", f"{self.name}/{prefix}/{folder}", recursive=True)
        return f"s3://{self.name}/{prefix}"

    def cache(self, directory: Path, max_bytes: int | None = None) -> ShardCache:
        return ShardCache(directory, max_bytes=max_bytes, storage_options=self.options)

    def rewrite(self, url: str) -> None:
        """Give the object at ``url`` other valid bytes of the same size (a new ETag).

        A gzip file gets another mtime in its header; any other, its last byte's low bit
        flipped (a tar's padding; in a LitData chunk of ``pytree_item``s, a digit of "p{i}").
        """
        data = bytearray(self.fs.cat_file(url))
        data[4 if url.endswith(".gz") else -1] ^= 1
        self.fs.pipe_file(url, bytes(data))


@pytest.fixture(scope="module")
def bucket(corpora: Path) -> Iterator[Bucket]:
    with pytest.MonkeyPatch.context() as patch, moto_s3() as endpoint:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            patch.setenv(name, "testing")  # dummy credentials, found by the backend
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        yield Bucket(endpoint, "formats", corpora)


# -- what a sample is --------------------------------------------------------------------


def same(got: Any, want: Any, where: str = "sample") -> None:
    """Equal values of the same types: arrays, tensors and NumPy scalars bit for bit."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, np.ndarray):
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())
    elif isinstance(want, torch.Tensor):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got, want), where
    elif isinstance(want, np.generic):
        assert got.tobytes() == want.tobytes(), where
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for number, (a, b) in enumerate(zip(got, want, strict=True)):
            same(a, b, f"{where}[{number}]")
    else:
        assert got == want, where


def keys(samples: list[Any]) -> list[Any]:
    """The loaders' collation: each sample's key (WebDataset's ``__key__``, else ``id``)."""
    return [s["__key__"] if "__key__" in s else s["id"] for s in samples]


def loader(readers: list[Any], world: int = 1, rank: int = 0, **kwargs: Any) -> ShardedDataLoader:
    return ShardedDataLoader(
        readers, 4, seed=11, num_replicas=world, dp_rank=rank, collate_fn=keys,
        multiprocessing=False, **kwargs,
    )  # fmt: skip


def take(
    run: ShardedDataLoader, k: int | None = None, each: Callable[[], None] | None = None
) -> list[list[Any]]:
    out: list[list[Any]] = []
    for batch in run if k != 0 else ():
        out.append(batch)
        if each is not None:
            each()
        if len(out) == k:
            break
    return out


# -- read back -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", READ_BACK)
def test_a_bucket_reads_like_the_local_copy(bucket: Bucket, case: str, tmp_path: Path) -> None:
    cache = bucket.cache(tmp_path / "cache")
    remote = open_case(case, bucket.url, cache)
    local = open_case(case, str(bucket.local))
    assert all(isinstance(r, RemoteShard) for r in remote)
    assert [r.name for r in remote] == [r.name for r in local]
    assert [len(r) for r in remote] == [len(r) for r in local]
    assert all(r.identity and r.identity.startswith("etag=") for r in remote)  # pinned
    indexed = cache.downloads  # opening downloads no shard, but each tar once, to index it
    assert indexed == (len(remote) if case == "wds" else 0)
    for got, want in zip(remote, local, strict=True):
        samples = want.read_range(0, len(want))
        if case == "wds":  # the shard's URL, as WebDataset gives it for a remote shard
            samples = [{**s, "__url__": f"{bucket.url}/wds/{want.name}"} for s in samples]
        same(list(got.read_range(0, len(got))), list(samples), got.name)
        order = np.random.default_rng(0).permutation(len(got))
        same([got.read(int(i)) for i in order], [samples[i] for i in order], got.name)
    assert cache.downloads == indexed + (0 if case == "wds" else len(remote))


def test_webdataset_indexes_live_in_the_cache_never_in_the_bucket(
    bucket: Bucket, tmp_path: Path
) -> None:
    cache = bucket.cache(tmp_path / "cache")
    readers = open_case("wds", bucket.url, cache)
    sidecars = {str(s) for s in (tmp_path / "cache" / SIDECARS).iterdir()}
    assert {r.index_file for r in readers} == sidecars
    assert len(sidecars) == len(readers)
    assert not [p for p in bucket.fs.find(f"{bucket.name}/corpora") if "index.npz" in p]
    for cached in (tmp_path / "cache").glob("*.tar"):
        cached.unlink()  # the shards evicted: a new job on this node reopens from the index
    again = bucket.cache(tmp_path / "cache")
    reopened = open_case("wds", bucket.url, again)
    assert again.downloads == 0
    assert [len(r) for r in reopened] == [len(r) for r in readers]
    assert reopened[2].read(3) == readers[2].read(3)
    assert again.downloads == 1


def test_webdataset_urls_as_patterns_globs_folders_and_lists(
    bucket: Bucket, tmp_path: Path
) -> None:
    cache = bucket.cache(tmp_path / "cache")
    base = f"{bucket.url}/wds"
    shards = [f"shard-{i:06d}.tar" for i in range(4)]

    def names(source: Any) -> list[str]:
        return [reader.name for reader in open_webdataset(source, cache=cache)]

    assert names(f"{base}/shard-*.tar") == shards
    assert names(f"{base}/shard-00000{{0..1}}.tar::{base}/shard-00000[23].tar") == shards
    assert names([f"{base}/{name}" for name in reversed(shards)]) == shards[::-1]
    everything = ["edge-000000.tar", "gnu-000000.tar", *shards]
    assert names(f"{base}/") == names(base) == everything  # a folder: its .tar files
    assert cache.downloads == len(everything)  # each indexed once, then from its sidecar
    with pytest.raises(FileNotFoundError, match=r"wds/nothing-\*\.tar' names no WebDataset"):
        names(f"{base}/nothing-*.tar")
    with pytest.raises(ValueError, match="mixes local paths and URLs"):
        names([f"{base}/{shards[0]}", str(bucket.local / "wds" / shards[0])])


def test_a_corrupt_object_is_named_by_its_url(bucket: Bucket, tmp_path: Path) -> None:
    url = f"s3://{bucket.name}/corrupt/bad.tar"
    bucket.fs.pipe_file(url, b"not a tar " * 100)
    cache = bucket.cache(tmp_path / "cache")
    with pytest.raises(
        ValueError, match=rf"'{url}' is corrupt: the header.* before its first sample"
    ):
        open_webdataset(url, cache=cache)
    root = bucket.upload("corrupt", "mds/gz")
    shard = f"{root}/mds/gz/shard.00003.mds.gz"
    bucket.fs.pipe_file(shard, bytes(bucket.fs.size(shard)))  # zeros, at the same size
    readers = open_case("mds/gz", root, cache)
    with pytest.raises(ValueError, match=rf"'{re.escape(shard)}' cannot be decompressed"):
        readers[3].read(0)


# -- resume over the bucket ----------------------------------------------------------------

RESUMED = ["mds/gz", "litdata/pytree", "wds"]


def largest(bucket: Bucket, case: str) -> int:
    """The largest shard file of corpus ``case``."""
    files = (bucket.local / "wds").glob("shard-*.tar") if case == "wds" else (
        p for p in (bucket.local / case).iterdir() if p.name != "index.json"
    )  # fmt: skip
    return max(p.stat().st_size for p in files)


@pytest.mark.parametrize("case", RESUMED)
def test_an_exact_mid_epoch_resume_over_the_bucket_within_the_bound(
    bucket: Bucket, case: str, tmp_path: Path
) -> None:
    reference = take(loader(open_case(case, str(bucket.local))))
    bound = 3 * largest(bucket, case)  # the shard read, one loaded ahead, one prefetched
    cache = bucket.cache(tmp_path / "c1", max_bytes=bound)
    peak = [0]

    def watch() -> None:
        peak[0] = max(peak[0], cache.cached_bytes())

    first = loader(open_case(case, bucket.url, cache))
    seen = take(first, 5, watch)
    state = json.loads(json.dumps(first.state_dict()))
    first.close()
    text = json.dumps(state)
    assert "://" not in text
    assert "cache" not in text
    assert set(state["pins"]) == {r.name for r in open_case(case, str(bucket.local))}
    fresh = bucket.cache(tmp_path / "c2", max_bytes=bound)  # another job: a cold cache
    resumed = loader(open_case(case, bucket.url, fresh))
    resumed.load_state_dict(state)
    rest = take(resumed)
    resumed.close()
    assert seen + rest == reference
    assert 0 < peak[0] <= bound
    assert cache.cached_bytes() <= bound
    assert fresh.cached_bytes() <= bound


@pytest.mark.parametrize("case", RESUMED)
def test_two_ranks_resume_on_one_over_the_bucket(bucket: Bucket, case: str, tmp_path: Path) -> None:
    everything = [k for batch in take(loader(open_case(case, str(bucket.local)))) for k in batch]
    cache = bucket.cache(tmp_path / "cache")  # one node: both ranks share its cache
    consumed: list[Any] = []
    states = []
    for rank in range(2):
        run = loader(open_case(case, bucket.url, cache), world=2, rank=rank)
        consumed += [k for batch in take(run, 3) for k in batch]
        states.append(json.loads(json.dumps(run.state_dict())))
        run.close()
    assert states[0] == states[1]
    assert states[0]["consumed"] == 24
    resumed = loader(open_case(case, bucket.url, bucket.cache(tmp_path / "other")))
    resumed.load_state_dict(states[0])
    rest = [k for batch in take(resumed) for k in batch]
    resumed.close()
    assert Counter(consumed + rest) == Counter(everything)  # every sample exactly once


@pytest.mark.parametrize("case", RESUMED)
def test_a_resume_over_an_object_rewritten_since_the_checkpoint_is_refused(
    bucket: Bucket, case: str, tmp_path: Path
) -> None:
    url = bucket.upload(f"rewritten-{case.replace('/', '-')}", case)
    readers = open_case(case, url, bucket.cache(tmp_path / "c1"))
    run = loader(readers)
    take(run, 3)
    state = run.state_dict()
    run.close()
    loaded = next(r for r in readers if r.opened)
    loaded.check()  # unchanged: nothing raised
    bucket.rewrite(loaded.remote.url)
    file = re.escape(loaded.remote.url.rsplit("/", 1)[1])
    with pytest.raises(ValueError, match=rf"{file}' now has .*rewritten"):
        loaded.check()  # the same process sees it before a resume too
    reopened = open_case(case, url, bucket.cache(tmp_path / "c2"))  # listed afresh
    resumed = loader(reopened)
    name = re.escape(loaded.name)
    with pytest.raises(StateMismatchError, match=rf"'{name}' was etag=\S+, is now etag="):
        resumed.load_state_dict(state)
    resumed.close()
    lenient = loader(open_case(case, url, bucket.cache(tmp_path / "c3")), strict_resume=False)
    with pytest.warns(ResumeWarning, match=name):  # over the new bytes, on purpose
        lenient.load_state_dict(state)
    assert len(take(lenient)) == len(take(loader(open_case(case, str(bucket.local))))) - 3
    lenient.close()


def wait_for(cache: ShardCache, downloads: int) -> None:
    deadline = time.monotonic() + 30
    while cache.downloads < downloads and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize("case", ["mds/gz", "litdata/pytree"])
def test_the_epoch_order_downloads_the_next_shards_ahead(
    bucket: Bucket, case: str, tmp_path: Path
) -> None:
    cache = bucket.cache(tmp_path / "cache")
    readers = open_case(case, bucket.url, cache)
    readers[2].follow_order(0, 2, 11, True, readers)  # what the dataset calls entering shard 2
    ahead = set(upcoming_shards(len(readers), 11, True, 0, 2)) - {2}  # 2: its reader fetches it
    assert len(ahead) >= 2
    wait_for(cache, len(ahead))
    cached = {n for n, reader in enumerate(readers) if cache.path_for(reader.remote).exists()}
    assert cached == ahead
    assert sum(reader.loads for reader in readers) == 0
    cache.close()


def test_the_loader_downloads_ahead_of_the_shards_it_loads(bucket: Bucket, tmp_path: Path) -> None:
    cache = bucket.cache(tmp_path / "cache")
    readers = open_case("mds/gz", bucket.url, cache)
    run = loader(readers)
    take(run, 1)
    wait_for(cache, len(readers))
    loaded = sum(reader.loads for reader in readers)
    run.close()
    assert loaded < len(readers) == cache.downloads


def test_a_cache_too_small_for_one_shard_says_so(bucket: Bucket, tmp_path: Path) -> None:
    readers = open_case("mds/plain", bucket.url, bucket.cache(tmp_path / "c", max_bytes=64))
    with pytest.raises(
        ValueError, match=r"ShardCache\(max_bytes=64\) cannot hold .*Raise max_bytes"
    ):
        readers[0].read(0)


# -- a stalled or failing server -----------------------------------------------------------


@pytest.mark.parametrize("case", ["mds/plain", "litdata/pytree", "wds"])
def test_a_stalled_shard_ends_in_a_bounded_error(corpora: Path, case: str, tmp_path: Path) -> None:
    folder = corpora / (case if case != "wds" else "wds")
    with FileServer(corpora) as server:
        server.stall.update(f"/{folder.relative_to(corpora)}/{p.name}" for p in folder.glob("*"))
        server.stall.discard(f"/{case}/index.json")  # the index answers, no shard does
        cache = ShardCache(tmp_path / "cache", retry=QUICK)

        def first_sample() -> Any:  # a tar is read when it is opened (to index it)
            return open_case(case, server.url, cache)[0].read(0)

        start = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"after 3 attempts.*timeout_s=1 s") as raised:
            first_sample()
        elapsed = time.monotonic() - start
    assert 3.0 <= elapsed < 3 * 1.0 + 3, elapsed  # three tries of 1 s, then the error
    assert server.url in str(raised.value)


def test_a_failing_server_ends_in_a_named_error_after_the_retries(
    corpora: Path, tmp_path: Path
) -> None:
    with FileServer(corpora) as server:
        readers = open_case("mds/gz", server.url, ShardCache(tmp_path / "c", retry=QUICK))
        server.status[f"/mds/gz/{readers[1].remote.url.rsplit('/', 1)[1]}"] = 503
        with pytest.raises(RemoteReadError, match=r"shard\.00001\.mds\.gz' after 3 attempts"):
            readers[1].read(0)
        assert readers[0].read(0)["id"] == 0  # the others still read
