"""The loader paths and measurements of ``bench_formats_remote.py``, over a bucket.

The corpora of ``bench_formats.py`` (``formats_writers.py``), uploaded as written to
``s3://bench/{mds,litdata,wds}`` on a local S3 reached through a slow proxy (``endpoint``).
Every path shuffles, reads batches of 64 and decodes in ``formats_paths.collate``:

* ``ours_mds`` / ``ours_litdata`` / ``ours_wds``: ``open_mds`` / ``open_litdata`` /
  ``open_webdataset`` of the ``s3://`` URL with a ``ShardCache`` (unbounded) +
  ``DistributedShardedDataset`` + its sampler + ``StatefulDataLoader``;
* ``mosaic``: ``StreamingDataset(remote="s3://...", local=cache)`` + ``StreamingDataLoader``
  (endpoint: ``S3_ENDPOINT_URL``);
* ``litdata``: ``StreamingDataset("s3://...", cache_dir=cache)`` + ``StreamingDataLoader``
  (endpoint: ``AWS_ENDPOINT_URL`` and ``storage_options``, ``bench_remote.litdata_endpoint``);
* ``webdataset``: ``WebDataset(urls, cache_dir=cache).shuffle(1000)`` + a torch ``DataLoader``
  over the tars' presigned ``http://`` URLs (webdataset opens those with ``curl``: signed
  GETs through the same proxy; one listing to find the tars, as the other readers list).

:func:`child_read` times building the loader and one epoch (the opening's requests count:
they are part of reading a remote set); :func:`child_raw` is the limit, a parallel GET of
the objects of one format into memory.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import Json
from formats_children import _close, _cpu
from formats_paths import BATCH, BUFFER, PATHS, SEED, collate, import_all

BUCKET = "bench"
REMOTE_PATHS = ("ours_mds", "mosaic", "ours_litdata", "litdata", "ours_wds", "webdataset")
RAW_RULES = {  # format: the objects a raw GET reads (every file its readers need)
    "mds": lambda name: name.endswith((".mds", "index.json")),
    "litdata": lambda name: name.endswith((".bin", "index.json")),
    "wds": lambda name: name.endswith(".tar"),
}
RAW_THREADS = 8


def build_ours(fmt: str, url: str, endpoint: str, cache_dir: Path, workers: int) -> Any:
    """Our reader of ``url`` through a ``ShardCache`` + ``StatefulDataLoader``."""
    import lightning_resumable_data as lrd
    from lightning_resumable_data import formats
    from lightning_resumable_data.remote import ShardCache

    options = {"client_kwargs": {"endpoint_url": endpoint}}
    cache = ShardCache(cache_dir, max_bytes=None, storage_options=options)
    opened: dict[str, Callable[[], Any]] = {
        "mds": lambda: formats.open_mds(f"{url}/mds", cache=cache),
        "litdata": lambda: formats.open_litdata(f"{url}/litdata", cache=cache),
        "wds": lambda: formats.open_webdataset(f"{url}/wds", cache=cache),
    }
    dataset = lrd.DistributedShardedDataset(opened[fmt](), seed=SEED)
    sampler = dataset.sampler(num_replicas=1, rank=0)
    return lrd.StatefulDataLoader(
        dataset, BATCH, sampler=sampler, num_workers=workers, collate_fn=collate
    )


def build_remote(path: str, url: str, endpoint: str, cache_dir: Path, workers: int) -> Any:
    """A loader of ``path`` over the bucket at ``url`` (shuffled, batch 64, seed 0)."""
    import torch.utils.data

    if path.startswith("ours_"):
        return build_ours(PATHS[path][0], url, endpoint, cache_dir, workers)
    if path == "mosaic":
        from peers_mosaic import import_streaming

        streaming = import_streaming()
        mds = streaming.StreamingDataset(
            remote=f"{url}/mds", local=str(cache_dir), shuffle=True, shuffle_seed=SEED,
            batch_size=BATCH,
        )  # fmt: skip
        return streaming.StreamingDataLoader(
            mds, batch_size=BATCH, num_workers=workers, collate_fn=collate
        )
    if path == "litdata":
        litdata = importlib.import_module("litdata")
        chunks = litdata.StreamingDataset(
            f"{url}/litdata", cache_dir=str(cache_dir), shuffle=True, seed=SEED,
            storage_options={"endpoint_url": endpoint},
        )  # fmt: skip
        return litdata.StreamingDataLoader(
            chunks, batch_size=BATCH, num_workers=workers, collate_fn=collate
        )
    webdataset = importlib.import_module("webdataset")
    urls = tar_urls(url, endpoint)
    cache_dir.mkdir(parents=True, exist_ok=True)  # webdataset wants it made
    data: Any = webdataset.WebDataset(
        urls, shardshuffle=len(urls), seed=SEED, cache_dir=str(cache_dir)
    )
    data = data.shuffle(BUFFER, seed=SEED)
    return torch.utils.data.DataLoader(
        data, batch_size=BATCH, num_workers=workers, collate_fn=collate
    )


def _client(endpoint: str) -> Any:
    """A boto3 S3 client of ``endpoint`` (credentials from the environment)."""
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=2 * RAW_THREADS)
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def _keys(client: Any, url: str, fmt: str) -> list[str]:
    """The keys of the format's objects that its readers read (one listing)."""
    bucket = url.removeprefix("s3://")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{fmt}/")
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    return sorted(key for key in keys if RAW_RULES[fmt](key))


def tar_urls(url: str, endpoint: str) -> list[str]:
    """The tar shards as presigned ``http://`` URLs of the proxy (what ``curl`` GETs).

    The bucket is private, as the other paths read it: a presigned URL is a signed GET
    that ``curl`` can send (webdataset's cache names a file by the URL's path alone).
    """
    client, bucket = _client(endpoint), url.removeprefix("s3://")
    return [
        client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key})
        for key in _keys(client, url, "wds")
    ]


def child_read(path: str, url: str, endpoint: str, cache_dir: Path, workers: int) -> Json:
    """Build ``path``'s loader, read one epoch: images per wall and CPU second, from the build."""
    import_all(path)
    for client in ("boto3", "s3fs"):  # every path's S3 client, imported before the clock
        importlib.import_module(client)
    if path == "litdata":
        from bench_remote import litdata_endpoint

        litdata_endpoint(endpoint)
    if path == "mosaic":
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
    start, cpu = time.perf_counter(), _cpu()
    loader = build_remote(path, url, endpoint, cache_dir, workers)
    images, captions, first = 0, set(), 0.0
    for number, batch in enumerate(iter(loader)):
        if number == 0:
            first = time.perf_counter() - start
        images += len(batch["caption"])
        captions.update(batch["caption"])
    seconds = time.perf_counter() - start
    _close(loader)
    del loader, batch
    import gc

    gc.collect()  # workers joined and reaped: their CPU time is in RUSAGE_CHILDREN
    cpu = _cpu() - cpu
    cached = sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file())
    return {
        "images_per_s": images / seconds, "images_per_cpu_s": images / cpu,
        "first_batch_s": first, "seconds": seconds, "cpu_s": cpu, "images": images,
        "distinct": len(captions), "cache_bytes": cached,
    }  # fmt: skip


def child_raw(fmt: str, url: str, endpoint: str, samples: int) -> Json:
    """The limit: list the format's objects and GET them all, ``RAW_THREADS`` at a time."""
    from concurrent.futures import ThreadPoolExecutor

    bucket = url.removeprefix("s3://")
    client = _client(endpoint)
    start, cpu = time.perf_counter(), _cpu()
    keys = _keys(client, url, fmt)

    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    with ThreadPoolExecutor(RAW_THREADS) as pool:
        sizes = list(pool.map(get, keys))
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    return {
        "images_per_s": samples / seconds, "images_per_cpu_s": samples / cpu,
        "seconds": seconds, "cpu_s": cpu, "objects": len(keys), "bytes": sum(sizes),
    }  # fmt: skip


def run_child(spec: list[str]) -> Json:
    """Run one measurement in this (child) process."""
    kind, path, url, endpoint, last = spec[:5]
    if kind == "raw":
        return child_raw(path, url, endpoint, int(last))
    return child_read(path, url, endpoint, Path(last), int(spec[5]))
