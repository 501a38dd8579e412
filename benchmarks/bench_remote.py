"""Remote shards side by side: this library, LitData and MosaicML Streaming on one local S3.

Run from the repository root::

    .venv/bin/python benchmarks/bench_remote.py --quick   # writes benchmarks/results/remote.json
    .venv/bin/python benchmarks/tables.py                 # rewrites the table in docs/remote.md

The peers run in their own venv (they pull ``torchvision``, which breaks Lightning's imports
in the project's venv); without it only this library's rows are measured::

    python -m venv .venv-bench
    .venv-bench/bin/pip install -c <(echo torch==2.13.0) torch==2.13.0 litdata \
        mosaicml-streaming s3fs "moto[server]"
    .venv-bench/bin/pip uninstall -y torchvision   # a build for another torch: replace it
    # by a stub package: torchvision/{__init__,datasets/__init__,transforms/functional}.py
    # defining VisionDataset and to_tensor (Streaming imports them at the top level)

The same tokens (``--shards`` shards of ``--shard-mib`` MiB, samples of 2048 ``uint16``
tokens) are written in each system's own format and uploaded to one ``moto_server`` on
127.0.0.1, reached through a proxy that delays every request by ``--delay-ms`` (a far-away
object store). Each row is one fresh child process reading one epoch in a loop with no
model (batch 16, no workers): the time to the first batch and the epoch's throughput, with
a cold cache (empty directory, bounded by ``--limit-mib``) and a warm one (the whole data
cached by an earlier epoch). The parent samples the cache directory's size every 10 ms
during the run (the peak is the "cache MiB" column).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import REPO_ROOT, load_average, python_version

RESULTS = REPO_ROOT / "benchmarks" / "results" / "remote.json"
SEQ_LEN, BATCH = 2048, 16
SECRET = "bench-secret"  # dummy credentials of the local server


# ---------------------------------------------------------------------------------------
# A proxy that delays each request: a far-away server.
# ---------------------------------------------------------------------------------------


def _pump(source: socket.socket, sink: socket.socket, delay: float) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(1 << 16):
            if delay and data[:8].split(b" ", 1)[0] in (b"GET", b"HEAD", b"PUT", b"POST"):
                time.sleep(delay)  # a new request (the server answers after one RTT)
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def start_proxy(upstream_port: int, delay: float) -> tuple[int, socket.socket]:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", upstream_port))
            for a, b, d in ((client, server, delay), (server, client, 0.0)):
                threading.Thread(target=_pump, args=(a, b, d), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1]), listener


# ---------------------------------------------------------------------------------------
# Children: one system, one configuration, one epoch.
# ---------------------------------------------------------------------------------------


def _timed_epoch(batches: Any, samples_expected: int) -> dict[str, Any]:
    start = time.perf_counter()
    first = None
    samples = 0
    for batch in batches:
        if first is None:
            first = time.perf_counter() - start
        samples += len(next(iter(batch.values()))) if isinstance(batch, dict) else len(batch)
    seconds = time.perf_counter() - start
    return {
        "ttfb_s": first,
        "epoch_s": seconds,
        "samples": samples,
        "complete": samples >= samples_expected,
        "samples_per_s": samples / seconds,
    }


def child_ours(config: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO_ROOT))
    import s3fs  # noqa: F401  (imported before the clock, as the peers' clients are)

    from lightning_resumable_data import ShardedDataLoader
    from lightning_resumable_data.remote import ShardCache
    from lightning_resumable_data.shards import open_token_shards

    start = time.perf_counter()
    prefetch = config["prefetch"]
    cache = ShardCache(
        config["cache"],
        max_bytes=config["limit"],
        storage_options={"client_kwargs": {"endpoint_url": config["endpoint"]}},
        prefetch_bytes=(256 << 20) if prefetch else 0,
    )
    loader = ShardedDataLoader(
        open_token_shards(config["url"] + "/lrd", cache=cache),
        batch_size=BATCH, seed=0, dp_rank=0, num_replicas=1, multiprocessing=False,
        num_shard_prefetches=1 if prefetch else 0, max_resident=2,
    )  # fmt: skip
    result = _timed_epoch(loader, config["samples"])
    result["ttfb_s"] += time.perf_counter() - start - result["epoch_s"]
    loader.close()
    cache.close()
    return result


def litdata_endpoint(endpoint: str) -> None:
    """Point LitData's S3 clients at ``endpoint`` (a local plain-http S3), in this process."""
    import litdata.streaming.downloader as downloader

    os.environ["AWS_ENDPOINT_URL"] = endpoint
    # LitData's obstore client refuses a plain-http endpoint (a real S3 is https): allow it.
    options = downloader._OBSTORE_CLIENT_OPTIONS
    downloader._OBSTORE_CLIENT_OPTIONS = {**options, "allow_http": "true"}


def child_litdata(config: dict[str, Any]) -> dict[str, Any]:
    import boto3  # noqa: F401  (imported before the clock)
    from litdata import StreamingDataLoader, StreamingDataset

    litdata_endpoint(config["endpoint"])
    start = time.perf_counter()
    dataset = StreamingDataset(
        config["url"] + "/litdata", cache_dir=config["cache"], shuffle=True, seed=0,
        max_cache_size=config["limit"] or "100GB",
        max_pre_download=4 if config["prefetch"] else 1,
        storage_options={"endpoint_url": config["endpoint"]},
    )  # fmt: skip
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)
    result = _timed_epoch(loader, config["samples"])
    result["ttfb_s"] += time.perf_counter() - start - result["epoch_s"]
    return result


def child_streaming(config: dict[str, Any]) -> dict[str, Any]:
    os.environ["S3_ENDPOINT_URL"] = config["endpoint"]
    import boto3  # noqa: F401  (imported before the clock)
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    clean_stale_shared_memory()
    start = time.perf_counter()
    limit = config["limit"]
    dataset = StreamingDataset(
        remote=config["url"] + "/mds", local=config["cache"], shuffle=True, shuffle_seed=0,
        shuffle_algo="py1s",  # shards shuffled, samples within a shard: as ours and LitData
        batch_size=BATCH, cache_limit=limit,
        predownload=4 * config["shard_samples"] if config["prefetch"] else BATCH,
    )  # fmt: skip
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=0)
    result = _timed_epoch(loader, config["samples"])
    result["ttfb_s"] += time.perf_counter() - start - result["epoch_s"]
    return result


def prepare_peers(config: dict[str, Any]) -> dict[str, Any]:
    """In the peers' venv: write the tokens as LitData chunks and MDS shards, upload them."""
    import numpy as np
    import s3fs
    from litdata.streaming.writer import BinaryWriter
    from streaming import MDSWriter

    tokens = np.load(config["tokens"], mmap_mode="r").reshape(-1, SEQ_LEN)
    out = Path(config["work"])
    writer = BinaryWriter(str(out / "litdata"), chunk_bytes=config["shard_bytes"])
    for i, row in enumerate(tokens):
        writer.add_item(i, {"tokens": np.array(row)})
    writer.done()
    writer.merge()
    with MDSWriter(out=str(out / "mds"), columns={"tokens": "ndarray:uint16"},
                   size_limit=config["shard_bytes"]) as mds:  # fmt: skip
        for row in tokens:
            mds.write({"tokens": np.array(row)})
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": config["endpoint"]})
    for name in ("litdata", "mds"):
        fs.put(str(out / name) + "/", f"{config['bucket']}/{name}", recursive=True)
    return {
        "litdata_files": len(os.listdir(out / "litdata")),
        "mds_files": len(os.listdir(out / "mds")),
    }


CHILDREN = {
    "ours": child_ours,
    "litdata": child_litdata,
    "streaming": child_streaming,
    "prepare": prepare_peers,
}


# ---------------------------------------------------------------------------------------
# The parent.
# ---------------------------------------------------------------------------------------


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def run_child(
    python: str, system: str, config: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    cache = Path(config["cache"])
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _dir_bytes(cache))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        process = subprocess.run(
            [python, __file__, "--child", system, json.dumps(config)],
            capture_output=True, text=True, env=env, timeout=600, cwd=REPO_ROOT,
        )  # fmt: skip
    finally:
        done.set()
        watcher.join()
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        return {"error": (process.stderr or process.stdout)[-1500:]}
    result: dict[str, Any] = json.loads(lines[-1])
    result["cache_peak_bytes"] = max(peak[0], _dir_bytes(cache))
    return result


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest epoch of the runs, the shortest time to first batch, the largest cache."""
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0]
    best = dict(max(runs, key=lambda run: run["samples_per_s"]))
    best["ttfb_s"] = min(run["ttfb_s"] for run in runs)
    best["cache_peak_bytes"] = max(run["cache_peak_bytes"] for run in runs)
    best["complete"] = all(run["complete"] for run in runs)
    best["runs"] = len(runs)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", nargs=2, metavar=("SYSTEM", "CONFIG"))
    parser.add_argument("--quick", action="store_true", help="16 shards of 1 MiB")
    parser.add_argument("--shards", type=int, default=32)
    parser.add_argument("--shard-mib", type=float, default=4.0)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per row, best kept")
    parser.add_argument("--limit-mib", type=float, default=0.0, help="default: 5 shards")
    parser.add_argument("--peer-python", default=str(REPO_ROOT / ".venv-bench" / "bin" / "python"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](json.loads(args.child[1]))))
        return 0
    if args.quick:
        args.shards, args.shard_mib = 16, 1.0
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import numpy as np
    import s3fs
    from remote_servers import moto_s3

    from lightning_resumable_data.shards import write_token_shards

    shard_bytes = int(args.shard_mib * (1 << 20)) // (SEQ_LEN * 2) * SEQ_LEN * 2
    total = shard_bytes * args.shards
    # Streaming refuses a bound below 4 shards (plus its headers): 5 shards for everyone.
    limit = int(args.limit_mib * (1 << 20)) or 5 * shard_bytes + (64 << 10)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    os.environ.update(env)
    peers = Path(args.peer_python).exists()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, moto_s3() as endpoint:
        work = Path(tmp)
        port = int(endpoint.rsplit(":", 1)[1])
        proxy_port, listener = start_proxy(port, args.delay_ms / 1000)
        slow = f"http://127.0.0.1:{proxy_port}"
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, 50_000, size=total // 2, dtype=np.uint16)
        np.save(work / "tokens.npy", tokens)
        write_token_shards(
            work / "lrd", [tokens], seq_len=SEQ_LEN, tokens_per_shard=shard_bytes // 2
        )
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
        fs.mkdir("bench")
        fs.put(str(work / "lrd") + "/", "bench/lrd", recursive=True)
        samples = total // (SEQ_LEN * 2)
        base = {
            "url": "s3://bench", "endpoint": slow, "samples": samples,
            "shard_samples": shard_bytes // (SEQ_LEN * 2),
        }  # fmt: skip
        if peers:
            prep = {
                "tokens": str(work / "tokens.npy"), "work": str(work), "bucket": "bench",
                "shard_bytes": shard_bytes, "endpoint": endpoint,
            }  # fmt: skip
            prepared = run_child(
                args.peer_python, "prepare", {**prep, "cache": str(work / "x")}, env
            )
            if "error" in prepared:
                print("peers could not be prepared:", prepared["error"], file=sys.stderr)
                peers = False
        systems = [("ours", sys.executable)]
        if peers:
            systems += [("litdata", args.peer_python), ("streaming", args.peer_python)]
        for system, python in systems:
            for prefetch in (False, True):
                cache = work / f"cache-{system}-{prefetch}"
                for temperature in ("cold", "warm"):
                    if temperature == "warm":  # an earlier epoch cached everything
                        shutil.rmtree(cache, ignore_errors=True)
                        run_child(
                            python,
                            system,
                            {**base, "cache": str(cache), "limit": None, "prefetch": True},
                            env,
                        )
                    else:
                        shutil.rmtree(cache, ignore_errors=True)
                    bound = limit if temperature == "cold" else None
                    config = {**base, "cache": str(cache), "limit": bound, "prefetch": prefetch}
                    runs = []
                    for _ in range(args.repeat):
                        if temperature == "cold":
                            shutil.rmtree(cache, ignore_errors=True)
                        runs.append(run_child(python, system, config, env))
                    result = best_of(runs)
                    row = {"system": system, "prefetch": prefetch, "cache": temperature,
                           "limit_bytes": bound, **result}  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        listener.close()
    cold = [r for r in rows if r["cache"] == "cold" and "error" not in r and r["prefetch"]]
    best_peer = max((r["samples_per_s"] for r in cold if r["system"] != "ours"), default=None)
    ours = max((r["samples_per_s"] for r in cold if r["system"] == "ours"), default=0.0)
    bounded = all(
        r["cache_peak_bytes"] <= limit
        for r in rows
        if r["system"] == "ours" and r["cache"] == "cold"
    )
    results = {
        "command": " ".join(["benchmarks/bench_remote.py", *sys.argv[1:]]),
        "conditions": (
            f"{args.shards} shards of {shard_bytes / (1 << 20):.1f} MiB ({samples} samples of "
            f"{SEQ_LEN} uint16 tokens), batch {BATCH}, one local moto S3 server behind a "
            f"proxy adding {args.delay_ms:g} ms per request, cold-cache bound "
            f"{limit / (1 << 20):.1f} MiB, best of {args.repeat} runs per row"
        ),
        "settings": (
            "prefetch: 4 shards ahead in each system (ours: ShardCache prefetch, 4 workers; "
            "LitData max_pre_download=4; Streaming predownload=4 shards of samples, "
            "shuffle_algo='py1s'); no prefetch: ours prefetch_bytes=0 and "
            "num_shard_prefetches=0, LitData max_pre_download=1, Streaming predownload=batch"
        ),
        "python": python_version(),
        "load_average": load_average(),
        "rows": rows,
        "target_met": best_peer is not None and ours >= best_peer and bounded,
        "best_peer_samples_per_s": best_peer,
        "ours_samples_per_s": ours,
        "ours_cache_bounded": bounded,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS}; target met: {results['target_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
