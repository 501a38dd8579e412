"""S3, GCS and Azure Blob, each a real local server: moto, gcp-storage-emulator, Azurite.

The same tests run against every store, through its fsspec backend (s3fs, gcsfs, adlfs) and
the store's own ``storage_options``: token shards written by ``write_token_shards`` and
uploaded read token for token like the local directory, a missing object fails at once, a
loader resumes over the store, a rewritten object is caught, and a Megatron corpus is read by
byte ranges. One server per store for the module; a store whose backend or server is not
installed is skipped with the name of what is missing.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

from remote_servers import (
    AZURITE_KEY,
    azurite_binary,
    azurite_blob,
    azurite_options,
    gcs_emulator,
    gcs_options,
    moto_s3,
)

from lightning_resumable_data import ShardedDataLoader, StateMismatchError
from lightning_resumable_data.documents import open_megatron, write_megatron
from lightning_resumable_data.remote import RemoteTokenShardReader, RetryPolicy, ShardCache
from lightning_resumable_data.shards import (
    DistributedShardedDataset,
    open_token_shards,
    write_token_shards,
)

SEQ_LEN, SHARD_TOKENS, SHARDS = 8, 8 * 16, 6
SAMPLES = SHARDS * SHARD_TOKENS // SEQ_LEN
SHARD_BYTES = SHARD_TOKENS * 2  # uint16
# A retry would wait at least 15 s (base_s x jitter >= 0.5): an answer within 5 s had none.
NO_PATIENCE_FOR_RETRIES = RetryPolicy(attempts=3, base_s=30.0, cap_s=30.0)
STORES = ["s3", "gcs", "azure"]
_prefixes = itertools.count()


@dataclass
class Store:
    """A bucket (container) of one store, the fsspec filesystem to fill it, the options."""

    name: str
    scheme: str
    bucket: str
    fs: Any
    options: dict[str, Any]
    secrets: list[str] = field(default_factory=list)

    def upload(self, local: Path) -> str:
        """Copy the files of ``local`` under a new prefix; return its URL."""
        prefix = f"{self.bucket}/t{next(_prefixes)}"
        for path in sorted(local.iterdir()):
            self.fs.pipe_file(f"{prefix}/{path.name}", path.read_bytes())
        self.fs.invalidate_cache()
        return f"{self.scheme}://{prefix}"

    def write(self, url: str, data: bytes) -> None:
        self.fs.pipe_file(url.split("://", 1)[1], data)

    def delete(self, url: str) -> None:
        self.fs.rm_file(url.split("://", 1)[1])


# -- the servers: one each for the module, always stopped --------------------------------


@pytest.fixture(scope="module")
def s3_store() -> Iterator[Store]:
    s3fs = pytest.importorskip("s3fs", reason="S3 needs s3fs (the [remote] extra)")
    pytest.importorskip("moto.server", reason="the local S3 server needs moto[server]")
    with moto_s3() as endpoint:
        options = {
            "key": "testing", "secret": "testing",  # moto's: any credentials pass
            "client_kwargs": {"endpoint_url": endpoint},
        }  # fmt: skip
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("stores")
        yield Store("s3", "s3", "stores", fs, options)


@pytest.fixture(scope="module")
def gcs_store() -> Iterator[Store]:
    pytest.importorskip("gcsfs", reason="GCS needs gcsfs (the [gcs] extra)")
    pytest.importorskip(
        "gcp_storage_emulator", reason="the local GCS server needs gcp-storage-emulator"
    )
    import fsspec
    import gcsfs.core

    # gcsfs >= 2025.x opens gs:// with ExtendedGcsFileSystem, which first asks the gRPC
    # Storage Control API for each bucket's layout (zonal, hierarchical). The emulator has
    # the JSON API only, so every call would wait out that lookup's retries (60 s) and fall
    # back. Users of an emulator set GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false before gcsfs is
    # imported (see docs/remote.md); here gcsfs may be imported already, so the plain
    # class is registered for the module, and the previous one restored after it.
    previous = {protocol: fsspec.get_filesystem_class(protocol) for protocol in ("gs", "gcs")}
    for protocol in previous:
        fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
    try:
        with gcs_emulator() as endpoint:
            options = gcs_options(endpoint)
            fs = gcsfs.core.GCSFileSystem(skip_instance_cache=True, **options)
            fs.mkdir("stores")
            yield Store("gcs", "gs", "stores", fs, options)
    finally:
        for protocol, cls in previous.items():
            fsspec.register_implementation(protocol, cls, clobber=True)


@pytest.fixture(scope="module")
def azure_store() -> Iterator[Store]:
    adlfs = pytest.importorskip("adlfs", reason="Azure Blob needs adlfs (the [azure] extra)")
    if azurite_binary() is None:
        pytest.skip(
            "Azurite's azurite-blob is not installed: `make setup` installs it with npm into "
            ".venv/azurite (or: npm install -g azurite@3)"
        )
    if shutil.which("node") is None:
        pytest.skip("Azurite needs node (Node.js), which is not on PATH")
    with azurite_blob() as endpoint:
        options = azurite_options(endpoint)
        fs = adlfs.AzureBlobFileSystem(skip_instance_cache=True, **options)
        fs.mkdir("stores")
        yield Store("azure", "az", "stores", fs, options, secrets=[AZURITE_KEY])


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Store:
    value: Store = request.getfixturevalue(f"{request.param}_store")
    return value


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six shards of 16 samples; every token differs, so every sample does."""
    directory = tmp_path_factory.mktemp("shards")
    tokens = np.random.default_rng(0).permutation(60_000)[: SHARDS * SHARD_TOKENS]
    write_token_shards(directory, [tokens], seq_len=SEQ_LEN, tokens_per_shard=SHARD_TOKENS)
    assert len(list(directory.glob("*.bin"))) == SHARDS
    return directory


def all_batches(dataset: DistributedShardedDataset[Any], epochs: int = 2) -> list[bytes]:
    """Every sample of ``epochs`` epochs in the sampler's order, read 4 at a time."""
    out: list[bytes] = []
    sampler = dataset.sampler(num_replicas=1, rank=0)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for start in range(0, len(order), 4):
            picked = dataset.__getitems__(order[start : start + 4])
            out += [np.asarray(sample).tobytes() for sample in picked]
    return out


def loader(readers: list[Any]) -> ShardedDataLoader:
    return ShardedDataLoader(
        readers, batch_size=4, seed=3, dp_rank=0, num_replicas=1, multiprocessing=False
    )


# -- the tests ---------------------------------------------------------------------------


def test_shards_read_like_local_ones(store: Store, shards: Path, tmp_path: Path) -> None:
    url = store.upload(shards)
    cache = ShardCache(tmp_path / "cache", storage_options=store.options)
    remote = open_token_shards(url, cache=cache)
    local = open_token_shards(shards)
    assert all(isinstance(r, RemoteTokenShardReader) for r in remote)
    assert [r.name for r in remote] == [r.name for r in local]
    # The store's ETag (and version), pinned in states:
    assert all(isinstance(r, RemoteTokenShardReader) and r.identity for r in remote)
    assert cache.downloads == 0  # opening downloads no shard
    dataset = DistributedShardedDataset(remote, max_resident=2, prefetch=1, seed=5)
    reference = DistributedShardedDataset(local, max_resident=2, prefetch=1, seed=5)
    try:
        seen = all_batches(dataset)
        assert seen == all_batches(reference)
    finally:
        dataset.close()
        reference.close()
        cache.close()
    assert len(seen) == 2 * SAMPLES
    assert len(set(seen)) == SAMPLES
    assert cache.downloads == SHARDS  # every shard came from the store, once (no bound)
    text = repr(remote) + repr(cache)
    assert not any(secret in text for secret in store.secrets)


def test_a_missing_object_fails_at_once(store: Store, shards: Path, tmp_path: Path) -> None:
    url = store.upload(shards)
    cache = ShardCache(
        tmp_path / "cache", storage_options=store.options, retry=NO_PATIENCE_FOR_RETRIES
    )
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"nothing-here/index\.json.*Not retried"):
        open_token_shards(f"{url}-nothing-here", cache=cache)
    assert time.monotonic() - start < 5

    readers = open_token_shards(url, cache=cache)
    store.delete(f"{url}/shard_00003.bin")  # gone after the listing
    start = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"shard_00003\.bin.*Not retried"):
        readers[3].load()
    assert time.monotonic() - start < 5
    assert cache.downloads == 0
    readers[2].load()  # the others are still there
    local = open_token_shards(shards)[2]
    assert np.array_equal(readers[2].read_range(0, len(local)), local.read_range(0, len(local)))


def test_a_loader_resumes_over_the_store(store: Store, shards: Path, tmp_path: Path) -> None:
    url = store.upload(shards)
    reference = [b.numpy().tobytes() for b in loader(open_token_shards(shards))]
    assert len(set(reference)) == SAMPLES // 4

    bound = 3 * SHARD_BYTES  # the cache holds half the shards
    cache = ShardCache(tmp_path / "c1", max_bytes=bound, storage_options=store.options)
    first_run = loader(open_token_shards(url, cache=cache))
    it = iter(first_run)
    first = [next(it).numpy().tobytes() for _ in range(7)]
    state = first_run.state_dict()
    first_run.close()
    assert cache.cached_bytes() <= bound
    text = json.dumps(state)
    assert "://" not in text
    assert "cache" not in text
    assert not any(secret in text for secret in store.secrets)
    assert set(state["pins"]) == {f"shard_{i:05d}.bin" for i in range(SHARDS)}

    # Another "job": the shards listed afresh (same identities), another cache, cold.
    fresh = ShardCache(tmp_path / "c2", max_bytes=bound, storage_options=store.options)
    resumed = loader(open_token_shards(url, cache=fresh))
    resumed.load_state_dict(state)
    rest = [b.numpy().tobytes() for b in resumed]
    resumed.close()
    assert first + rest == reference


def rewrite_shard_1(store: Store, url: str, shards: Path) -> None:
    data = bytearray((shards / "shard_00001.bin").read_bytes())
    data[:2] = b"\xff\xff"  # same size, other tokens
    store.write(f"{url}/shard_00001.bin", bytes(data))


def test_a_resume_over_a_rewritten_object_is_refused(
    store: Store, shards: Path, tmp_path: Path
) -> None:
    url = store.upload(shards)
    run = loader(
        open_token_shards(url, cache=ShardCache(tmp_path / "c", storage_options=store.options))
    )
    it = iter(run)
    for _ in range(3):
        next(it)
    state = run.state_dict()
    run.close()
    rewrite_shard_1(store, url, shards)
    fresh = ShardCache(
        tmp_path / "c2", storage_options=store.options
    )  # listed afresh: new identity
    resumed = loader(open_token_shards(url, cache=fresh))
    with pytest.raises(StateMismatchError, match=r"'shard_00001\.bin' was .+, is now "):
        resumed.load_state_dict(state)
    resumed.close()


@pytest.mark.parametrize(
    "name",
    [
        "s3",
        "gcs",
        "azure",
    ],
)
def test_check_sees_a_rewritten_object(
    name: str, request: pytest.FixtureRequest, shards: Path, tmp_path: Path
) -> None:
    store: Store = request.getfixturevalue(f"{name}_store")
    url = store.upload(shards)
    readers = open_token_shards(
        url, cache=ShardCache(tmp_path / "c", storage_options=store.options)
    )
    assert isinstance(readers[1], RemoteTokenShardReader)
    readers[1].load()
    readers[1].check()  # unchanged: no error
    rewrite_shard_1(store, url, shards)
    with pytest.raises(ValueError, match=r"shard_00001\.bin' now has .*rewritten"):
        readers[1].check()


@pytest.mark.parametrize(
    "name",
    [
        "s3",
        "gcs",
        "azure",
    ],
)
def test_an_object_rewritten_after_open_is_not_read(
    name: str, request: pytest.FixtureRequest, shards: Path, tmp_path: Path
) -> None:
    store: Store = request.getfixturevalue(f"{name}_store")
    url = store.upload(shards)
    cache = ShardCache(tmp_path / "c", storage_options=store.options)
    readers = open_token_shards(url, cache=cache)
    rewrite_shard_1(store, url, shards)
    with pytest.raises(ValueError, match=r"shard_00001\.bin'.*changed"):
        readers[1].load()


def test_a_megatron_corpus_read_by_ranges(store: Store, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    documents = [
        rng.integers(-(2**31), 2**31 - 1, rng.integers(1, 300), dtype=np.int32) for _ in range(120)
    ]
    write_megatron(tmp_path / "d" / "corpus", documents, dtype=np.int32)
    url = store.upload(tmp_path / "d")
    chunk = 8 << 10
    assert (tmp_path / "d" / "corpus.bin").stat().st_size > 4 * chunk
    cache = ShardCache(tmp_path / "cache", max_bytes=4 * chunk, storage_options=store.options)
    corpus = open_megatron(f"{url}/corpus", cache=cache, chunk_bytes=chunk)
    order = np.random.default_rng(1).permutation(len(documents)).tolist()
    for number in order:
        assert np.array_equal(corpus.document(number), documents[number]), number
    cache.close()
    assert any("corpus.bin@" in path.name for path in (tmp_path / "cache").iterdir())


def test_azure_abfs_urls_too(azure_store: Store, shards: Path, tmp_path: Path) -> None:
    url = azure_store.upload(shards).replace("az://", "abfs://")
    cache = ShardCache(tmp_path / "cache", storage_options=azure_store.options)
    remote, local = open_token_shards(url, cache=cache), open_token_shards(shards)
    assert [r.read_range(0, len(r)).tolist() for r in remote] == [
        r.read_range(0, len(r)).tolist() for r in local
    ]
