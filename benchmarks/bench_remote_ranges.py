"""A Megatron corpus in S3 read by byte ranges against a whole-file download.

Run from the repository root (a few minutes; writes benchmarks/results/remote_ranges.json)::

    .venv/bin/python benchmarks/bench_remote_ranges.py

A Megatron ``.bin`` of ``--mib`` MiB (``uint16`` tokens, documents of 200 to 4000 tokens)
is written with ``write_megatron`` and uploaded to one ``moto_server`` on 127.0.0.1, reached
through a proxy that delays every request by ``--delay-ms`` (a far-away object store, as in
``bench_remote.py``). Moto reads the whole object for every ranged GET (about 100 ms for
96 MiB here), which real object stores do not: ``--server http`` serves the files with the
tests' ``FileServer(ranges=True)`` instead (results in ``remote_ranges_http.json``), whose
ranged GETs cost what they read. Each row is one fresh child process that opens the corpus
(``open_megatron(url)``) and reads ``PackedDataset(seq_len=2048)`` batches of 16 with no
workers: a whole epoch in order (``sequential``: documents and samples in order), or the
first ``--shuffled-batches`` batches of a shuffled epoch (``shuffled``: documents and
samples shuffled). ``ranges`` reads the ``.bin`` in cached chunks of ``--chunk-mib`` MiB
(one shuffled row: ``--small-chunk-mib``); ``whole`` (``chunk_bytes=None``) downloads it
whole first, as before. Cold: an empty cache directory, bounded by ``--limit-mib`` for
``ranges`` where the row says so (``whole`` cannot work with a cache smaller than the
file); warm: every byte cached by an earlier run.

Samples/s counts the time from the open to the last batch (a whole download is part of
the cost); the first-batch time is from the open. The parent samples the size of the cache
directory every 10 ms (the peak column); the child counts the bytes fetched from the store.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _harness import REPO_ROOT, load_average, python_version
from bench_remote import start_proxy

RESULTS = REPO_ROOT / "benchmarks" / "results" / "remote_ranges.json"
SEQ_LEN, BATCH = 2048, 16
SECRET = "bench-secret"  # dummy credentials of the local server


def child(config: dict[str, Any]) -> dict[str, Any]:
    """Open the corpus and read the batches of one row; time them."""
    sys.path.insert(0, str(REPO_ROOT))
    import numpy as np
    import s3fs  # noqa: F401  (imported before the clock)

    from lightning_resumable_data.documents import PackedDataset, open_megatron
    from lightning_resumable_data.remote import ShardCache

    cache = ShardCache(
        config["cache"], max_bytes=config["limit"], storage_options=config["storage_options"]
    )
    fetched = [0]
    read_bytes = cache.read_bytes

    def counting(url: str, start: int | None = None, stop: int | None = None) -> bytes:
        data = read_bytes(url, start, stop)
        fetched[0] += len(data) if url.endswith(".bin") else 0
        return data

    cache.read_bytes = counting  # type: ignore[method-assign]
    shuffled = config["order"] == "shuffled"
    start = time.perf_counter()
    corpus = open_megatron(config["url"], cache=cache, chunk_bytes=config["chunk_bytes"])
    dataset = PackedDataset(corpus, SEQ_LEN, eos_id=0, shuffle_documents=shuffled)
    order = np.arange(len(dataset))
    if shuffled:
        order = np.random.default_rng(0).permutation(len(dataset))[: config["batches"] * BATCH]
    first, checksum = None, 0
    for begin in range(0, len(order), BATCH):
        batch = dataset.__getitems__(order[begin : begin + BATCH].tolist())
        checksum += int(sum(int(sample["input_ids"][-1]) for sample in batch))
        if first is None:
            first = time.perf_counter() - start
    seconds = time.perf_counter() - start
    cache.close()
    return {
        "ttfb_s": first,
        "seconds": seconds,
        "samples": len(order),
        "samples_per_s": len(order) / seconds,
        "fetched_bytes": fetched[0],
        "checksum": checksum,
    }


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def run_child(config: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
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
            [sys.executable, __file__, "--child", json.dumps(config)],
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
    """The fastest run, with the shortest first batch and the largest cache of all runs."""
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0]
    best = dict(max(runs, key=lambda run: run["samples_per_s"]))
    best["ttfb_s"] = min(run["ttfb_s"] for run in runs)
    best["cache_peak_bytes"] = max(run["cache_peak_bytes"] for run in runs)
    best["runs"] = len(runs)
    return best


def write_corpus(folder: Path, mib: float) -> int:
    """A Megatron corpus of about ``mib`` MiB of ``uint16`` tokens; returns the .bin size."""
    import numpy as np

    from lightning_resumable_data.documents import write_megatron

    rng = np.random.default_rng(0)
    lengths = rng.integers(200, 4000, size=int(mib * (1 << 20)) // 2 // 2100)
    tokens = rng.integers(1, 50_000, size=int(lengths.sum()), dtype=np.uint16)
    ends = np.cumsum(lengths)
    write_megatron(folder / "corpus", np.split(tokens, ends[:-1]), dtype=np.uint16)
    return (folder / "corpus.bin").stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", metavar="CONFIG")
    parser.add_argument("--mib", type=float, default=96.0, help="size of the .bin")
    parser.add_argument("--chunk-mib", type=float, default=16.0)
    parser.add_argument("--small-chunk-mib", type=float, default=1.0, help="one shuffled row")
    parser.add_argument("--limit-mib", type=float, default=48.0, help="bounded cold rows")
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--shuffled-batches", type=int, default=20)
    parser.add_argument("--server", choices=("s3", "http"), default="s3")
    parser.add_argument("--repeat", type=int, default=2, help="runs per row, best kept")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    sys.path.insert(0, str(REPO_ROOT))
    import s3fs
    from remote_servers import FileServer, moto_s3

    env = {**os.environ, "AWS_ACCESS_KEY_ID": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    os.environ.update(env)
    chunk_bytes = int(args.chunk_mib * (1 << 20)) // 8 * 8
    small_chunk = int(args.small_chunk_mib * (1 << 20)) // 8 * 8
    limit = int(args.limit_mib * (1 << 20))
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        (work / "d").mkdir()
        size = write_corpus(work / "d", args.mib)
        if args.server == "s3":
            endpoint = stack.enter_context(moto_s3())
            fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
            fs.mkdir("bench")
            fs.put(str(work / "d") + "/", "bench/d", recursive=True)
        else:  # answers Range requests with the bytes asked for, whatever the file's size
            endpoint = stack.enter_context(FileServer(work / "d", ranges=True)).url
        port, listener = start_proxy(int(endpoint.rsplit(":", 1)[1]), args.delay_ms / 1000)
        proxy = f"http://127.0.0.1:{port}"
        base: dict[str, Any] = {"batches": args.shuffled_batches, "storage_options": {}}
        if args.server == "s3":
            base["url"] = "s3://bench/d/corpus"
            base["storage_options"] = {"client_kwargs": {"endpoint_url": proxy}}
        else:
            base["url"] = f"{proxy}/corpus"
        plan = [  # (mode, order, temperature, bounded, chunk bytes)
            (mode, order, temperature, bounded, None if mode == "whole" else chunk_bytes)
            for order in ("sequential", "shuffled")
            for mode in ("whole", "ranges")
            for temperature, bounded in (("cold", False), ("cold", True), ("warm", False))
            if not (bounded and mode == "whole")
        ]
        plan.append(("ranges", "shuffled", "cold", True, small_chunk))  # smaller chunks
        for mode, order, temperature, bounded, chunk in plan:
            cache = work / f"cache-{mode}"
            config = {**base, "cache": str(cache), "mode": mode, "order": order,
                      "limit": limit if bounded else None, "chunk_bytes": chunk}  # fmt: skip
            if temperature == "warm":  # an earlier run cached every byte
                shutil.rmtree(cache, ignore_errors=True)
                run_child({**config, "order": "sequential"}, env)
            runs = []
            for _ in range(args.repeat):
                if temperature == "cold":
                    shutil.rmtree(cache, ignore_errors=True)
                runs.append(run_child(config, env))
            row = {"mode": mode, "order": order, "cache": temperature,
                   "limit_bytes": config["limit"], "chunk_bytes": chunk,
                   **best_of(runs)}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
        listener.close()

    def find(mode: str, order: str, temperature: str, bounded: bool) -> dict[str, Any]:
        chunk = None if mode == "whole" else chunk_bytes
        return next(
            r for r in rows
            if (r["mode"], r["order"], r["cache"], r["limit_bytes"] is not None,
                r["chunk_bytes"]) == (mode, order, temperature, bounded, chunk)
        )  # fmt: skip

    ratios: dict[str, Any] = {}
    for order in ("sequential", "shuffled"):
        whole, ranges = find("whole", order, "cold", False), find("ranges", order, "cold", True)
        warm = find("whole", order, "warm", False), find("ranges", order, "warm", False)
        if any("error" in row for row in (whole, ranges, *warm)):
            continue
        ratios[order] = {
            "first_batch_whole_over_ranges": whole["ttfb_s"] / ranges["ttfb_s"],
            "cold_samples_per_s_ranges_over_whole": ranges["samples_per_s"]
            / whole["samples_per_s"],
            "warm_samples_per_s_ranges_over_whole": warm[1]["samples_per_s"]
            / warm[0]["samples_per_s"],
            "peak_cache_ranges_over_whole": ranges["cache_peak_bytes"] / whole["cache_peak_bytes"],
            "fetched_ranges_over_whole": ranges["fetched_bytes"] / whole["fetched_bytes"],
        }
    bounded = all(
        r.get("cache_peak_bytes", 0) <= limit for r in rows if r["limit_bytes"] is not None
    )
    same = all(  # every row of an order read the same tokens
        len({r.get("checksum") for r in rows if r["order"] == order}) == 1
        for order in ("sequential", "shuffled")
    )
    results = {
        "command": " ".join(["benchmarks/bench_remote_ranges.py", *sys.argv[1:]]),
        "conditions": (
            f"Megatron .bin of {size / (1 << 20):.1f} MiB (uint16), PackedDataset seq_len "
            f"{SEQ_LEN}, batch {BATCH}, no workers; one local "
            f"{'moto S3' if args.server == 's3' else 'HTTP (tests FileServer, ranges=True)'} "
            f"server behind a proxy adding {args.delay_ms:g} ms per request; ranges in chunks of "
            f"{chunk_bytes / (1 << 20):g} MiB, bounded cold rows at {limit / (1 << 20):g} MiB; "
            f"sequential: one epoch in order; shuffled: the first {args.shuffled_batches} "
            f"batches of a shuffled epoch (one bounded row with chunks of "
            f"{small_chunk / (1 << 20):g} MiB); best of {args.repeat} runs per row"
        ),
        "python": python_version(),
        "load_average": load_average(),
        "rows": rows,
        "ratios": ratios,
        "ranges_cache_bounded": bounded,
        "same_tokens": same,
    }
    out = RESULTS if args.server == "s3" else RESULTS.with_name("remote_ranges_http.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    for order, values in ratios.items():
        print(order, " ".join(f"{name}={value:.3g}" for name, value in values.items()))
    print(f"wrote {out}; cache bounded: {bounded}; same tokens in every row: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
