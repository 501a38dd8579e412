"""Images per second from MDS, LitData and WebDataset in a bucket: our readers against the peers'.

``bench_formats.py``'s image set (``--samples`` 32x32 RGB PNGs with a caption and an int
label, written once per format by the peers' own writers, ``formats_writers.py``) is uploaded
as written to one ``moto_server`` on 127.0.0.1 (``tests/remote_servers.moto_s3``) and read
through ``bench_remote.start_proxy``, which delays every request by ``--delay-ms`` (a
far-away object store). Paths (``formats_remote_paths.py``): ours (``open_mds`` /
``open_litdata`` / ``open_webdataset`` of the ``s3://`` URL with a ``ShardCache``), Mosaic
``StreamingDataset(remote=s3://..., local=cache)``, LitData ``StreamingDataset("s3://...")``
and a ``webdataset`` pipeline over the tars' ``http://`` URLs (with its ``cache_dir``);
every path shuffles, reads batches of 64 and decodes every PNG in the same collate
(``formats_paths.collate``), at 0 and 2 workers.

Each read is a fresh process timing the loader's build and one epoch: images per wall
second, per CPU second (the process and its reaped workers; the server and the proxy run in
the parent and are not counted) and the first batch. ``cold``: an empty cache directory;
``warm``: the same directory right after, filled by the cold epoch (no bound on any cache).
``raw``: the limit, one process listing a format's objects and GETting them all into memory
(8 threads), no decode. The paths run interleaved, in alternating order, for ``--rounds``
rounds (median); the load average is recorded per round. From the repository root, in a
venv with the peers (``bench_peers.py`` says how to make one) and the S3 clients; pin these to
one botocore, or pip backtracks through aiobotocore's releases for many minutes::

    /work/bench-venv/bin/pip install -c <(echo torch==2.13.0) -e . mosaicml-streaming==0.13.0 \
        litdata==0.2.76 webdataset==1.0.2 pillow "moto[server]==5.2.5" boto3==1.43.117 \
        botocore==1.43.117 aiobotocore==3.10.0 s3fs==2026.9.0 fsspec==2026.9.0
    /work/bench-venv/bin/pip uninstall -y torchvision   # see bench_peers.py

    /work/bench-venv/bin/python benchmarks/bench_formats_remote.py   # -> formats_remote.json
    .venv/bin/python benchmarks/tables.py                             # docs/benchmarks.md

``--quick`` is CI's smoke run: without the peers the MDS and WebDataset corpora come from
``formats_standins.py``, only our paths run (and the raw GETs), LitData's are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _harness import REPO_ROOT, Json, load_average, package_version, python_version, spawn_json
from bench_remote import SECRET, start_proxy
from formats_paths import BATCH, FORMATS, PATHS, SEED, installed, missing
from formats_remote_paths import BUCKET, RAW_THREADS, REMOTE_PATHS, run_child
from formats_remote_table import formats_remote_table
from formats_writers import shard_sizes, write_corpora

RESULTS = REPO_ROOT / "benchmarks" / "results" / "formats_remote.json"
QUICK = {"samples": 320, "per_shard": 80, "rounds": 1, "workers": "0"}
VERSIONS = ("torch", "pillow", "mosaicml-streaming", "litdata", "webdataset", "moto", "boto3")
TEMPERATURES = ("cold", "warm")


def _run(*args: object) -> Json:
    result = spawn_json(__file__, ["--child", *map(str, args)])
    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    print(f"  {args[0]} {args[1]} {' '.join(map(str, args[5:]))}: {shown}", file=sys.stderr)
    return result


def measure(args: argparse.Namespace, url: str, endpoint: str, paths: Sequence[str],
            formats: Sequence[str], work: Path) -> Json:  # fmt: skip
    """Every path's cold and warm epochs and the raw GETs, interleaved per round."""
    reads: dict[str, dict[str, list[Json]]] = {p: {} for p in paths}
    raw: dict[str, list[Json]] = {f: [] for f in formats}
    loads = []
    for number in range(args.rounds):
        order = list(paths) if number % 2 == 0 else list(reversed(paths))
        for workers in args.workers:
            for path in order:
                cache = work / f"cache-{number}-{workers}-{path}"  # new: empty
                for temperature in TEMPERATURES:  # warm: the cold epoch's cache
                    run = _run("read", path, url, endpoint, cache, workers, temperature)
                    reads[path].setdefault(f"{workers} {temperature}", []).append(run)
        for fmt in order_formats(formats, number):
            raw[fmt].append(_run("raw", fmt, url, endpoint, args.samples))
        loads.append(os.getloadavg())
    return {**summarise(reads, raw), "load_by_round": loads}


def order_formats(formats: Sequence[str], number: int) -> list[str]:
    """The formats in alternating order by round."""
    return list(formats) if number % 2 == 0 else list(reversed(formats))


def _median(runs: list[Json], keys: Sequence[str]) -> Json:
    return {key: statistics.median(run[key] for run in runs) for key in keys}


def summarise(reads: dict[str, dict[str, list[Json]]], raw: dict[str, list[Json]]) -> Json:
    """Medians over the rounds of each path's reads and of the raw GETs; the failed runs."""
    errors: dict[str, str] = {}
    read: Json = {}
    for path, cases in reads.items():
        for case, runs in cases.items():
            good = [run for run in runs if "error" not in run]
            errors.update({f"read {path} {case}": r["error"] for r in runs if "error" in r})
            if good:
                row = _median(good, ("images_per_s", "images_per_cpu_s", "first_batch_s"))
                row.update(images=good[0]["images"], distinct=good[0]["distinct"],
                           cache_bytes=max(r["cache_bytes"] for r in good), runs=good)  # fmt: skip
                read.setdefault(path, {})[case] = row
    limit: Json = {}
    for fmt, runs in raw.items():
        good = [run for run in runs if "error" not in run]
        errors.update({f"raw {fmt}": r["error"] for r in runs if "error" in r})
        if good:
            limit[fmt] = _median(good, ("images_per_s", "images_per_cpu_s", "seconds"))
            limit[fmt].update(objects=good[0]["objects"], bytes=good[0]["bytes"], runs=good)
    return {"read": read, "raw": limit, "errors": errors}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (``--quick`` sets the CI-sized defaults of ``QUICK``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI-sized: " + str(QUICK))
    parser.add_argument("--samples", type=int, default=2_000, help="images in the set")
    parser.add_argument("--per-shard", type=int, default=250, help="images per shard")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (median)")
    parser.add_argument("--workers", default="0,2", help="DataLoader worker counts")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="proxy delay per request")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        given = set(argv if argv is not None else sys.argv[1:])
        for name, value in QUICK.items():
            if f"--{name.replace('_', '-')}" not in given:
                setattr(args, name, value)
    args.workers = [int(w) for w in str(args.workers).split(",")]
    return args


def conditions(args: argparse.Namespace, shards: dict[str, list[int]]) -> str:
    """The conditions of the run, for the JSON and the docs."""
    counts = ", ".join(f"{FORMATS[f]} {len(s)}" for f, s in shards.items())
    return (
        f"{args.samples:,} synthetic 32x32 RGB PNGs (about 3.2 kB each, random pixels) with a "
        f"caption and an int label; shards of about {args.per_shard:,} images ({counts} "
        f"shards); shuffled, seed {SEED}, batch {BATCH}, rank 0 of 1; every PNG decoded by "
        "PIL into a uint8 (64, 32, 32, 3) tensor in the same collate on every path; uploaded "
        "as written to one local S3 (moto) on 127.0.0.1, reached through a proxy adding "
        f"{args.delay_ms:g} ms to every request; reads: the loader's build and one epoch, "
        "per wall second and per CPU second of the process and its workers "
        "(the server and proxy not counted); cold: an empty cache directory, warm: the same "
        "directory after the cold epoch, no bound on any cache; raw: one process listing a "
        f"format's objects and GETting them into memory, {RAW_THREADS} threads, no decode; "
        f"median of {args.rounds} interleaved rounds, a fresh process per measurement, "
        f"{os.cpu_count()} CPUs shared with other work"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Write and upload the corpora, run every case, print the table and write the JSON."""
    args = parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child)))
        return 0
    needed = [m for m in ("PIL", "s3fs", "boto3", "moto") if not installed(m)]
    if needed:
        print(f"bench_formats_remote.py skipped: {', '.join(needed)} not installed")
        return 0
    import s3fs

    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from remote_servers import moto_s3

    started, load_start = time.time(), load_average()
    os.environ.update(AWS_ACCESS_KEY_ID=SECRET, AWS_SECRET_ACCESS_KEY=SECRET,
                      AWS_DEFAULT_REGION="us-east-1")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lrd-formats-remote-") as tmp, moto_s3() as direct:
        work = Path(tmp)
        writers = write_corpora(work / "data", args.samples, args.per_shard)
        skipped = {p: r for p in REMOTE_PATHS if (r := missing(p))}
        skipped.update({p: "no corpus (its writer is not installed)" for p in REMOTE_PATHS
                        if PATHS[p][0] not in writers and p not in skipped})  # fmt: skip
        paths = [p for p in REMOTE_PATHS if p not in skipped]
        for path, reason in skipped.items():
            print(f"note: {path} skipped: {reason}", flush=True)
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": direct})
        fs.mkdir(BUCKET)
        for fmt in writers:
            fs.put(f"{work / 'data' / fmt}/", f"{BUCKET}/{fmt}", recursive=True)
        port, listener = start_proxy(int(direct.rsplit(":", 1)[1]), args.delay_ms / 1000)
        endpoint = f"http://127.0.0.1:{port}"
        os.environ["S3_ENDPOINT_URL"] = endpoint  # Mosaic's
        try:
            results = measure(args, f"s3://{BUCKET}", endpoint, paths, list(writers), work)
        finally:
            listener.close()
        shards = {f: shard_sizes(work / "data", f) for f in writers}
        corpus = {f: sum(p.stat().st_size for p in (work / "data" / f).rglob("*")) for f in shards}
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["benchmarks/bench_formats_remote.py", *given])
    results.update(
        command=command,
        conditions=conditions(args, shards),
        writers=writers,
        skipped=skipped,
        corpus={"samples": args.samples, "bytes": corpus, "shard_sizes": shards},
        workers=args.workers,
        delay_ms=args.delay_ms,
        seconds=round(time.time() - started, 1),
        load_average_start=load_start,
        load_average=load_average(),
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        versions={"python": python_version(), **{d: package_version(d) for d in VERSIONS}},
    )
    print("\n".join(formats_remote_table(results)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
