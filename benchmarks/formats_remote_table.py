"""The table of ``bench_formats_remote.py`` for ``docs/benchmarks.md`` (called by ``tables.py``)."""

from __future__ import annotations

from typing import Any

from _harness import REPO_ROOT, table_header, table_row
from formats_paths import FORMATS, PATHS

FORMATS_REMOTE_JSON = REPO_ROOT / "benchmarks" / "results" / "formats_remote.json"
RAW_NAME = "raw limit: list + parallel GET of the objects, no decode"
NAMES = {  # the remote form of a path, where ``PATHS`` names the local one
    "ours_mds": 'ours: `open_mds("s3://...", cache=ShardCache(...))` + `StatefulDataLoader`',
    "ours_litdata": 'ours: `open_litdata("s3://...", cache=...)` + `StatefulDataLoader`',
    "ours_wds": 'ours: `open_webdataset("s3://...", cache=...)` + `StatefulDataLoader`',
    "mosaic": 'Mosaic `StreamingDataset(remote="s3://...", local=...)` + its loader',
    "litdata": 'LitData `StreamingDataset("s3://...")` + `StreamingDataLoader`',
    "webdataset": "`webdataset.WebDataset(http URLs, cache_dir=...).shuffle(1000)`",
}


def _ratio(ours: float | None, other: float | None) -> str:
    """``ours / other`` as ``1.23x``; a dash where either is missing."""
    return f"{ours / other:.2f}x" if ours and other else "—"


def _images(row: dict[str, Any]) -> str:
    seen, distinct = row["images"], row["distinct"]
    return f"{seen:,}" if seen == distinct else f"{seen:,} ({distinct:,} distinct)"


def read_rows(results: dict[str, Any]) -> list[str]:
    """Per format, worker count and cache: each path, its ratios; then the format's raw GET."""
    read, raw = results["read"], results["raw"]
    lines = table_header("format", "workers", "cache", "path", "images/s", "ours ÷ it",
                         "÷ raw GET", "images / CPU s", "ours ÷ it", "first batch ms",
                         "cache MiB", "images read")  # fmt: skip
    cases = sorted({case for rows in read.values() for case in rows}, key=_case_order)
    for fmt in FORMATS:
        limit = raw.get(fmt, {})
        for case in cases:
            workers, temperature = case.split()
            for path, (of, _, name) in PATHS.items():
                row = read.get(path, {}).get(case)
                if of != fmt or row is None:
                    continue
                ours = read.get(f"ours_{fmt}", {}).get(case, {})
                peer = path != f"ours_{fmt}"
                wall, cpu = row["images_per_s"], row["images_per_cpu_s"]
                lines.append(table_row([
                    FORMATS[fmt], workers, temperature, NAMES.get(path, name), f"{wall:,.0f}",
                    _ratio(ours.get("images_per_s"), wall) if peer else "—",
                    _ratio(wall, limit.get("images_per_s")), f"{cpu:,.0f}",
                    _ratio(ours.get("images_per_cpu_s"), cpu) if peer else "—",
                    f"{row['first_batch_s'] * 1e3:,.0f}", f"{row['cache_bytes'] / 2**20:.1f}",
                    _images(row),
                ]))  # fmt: skip
        if limit:
            lines.append(table_row([
                FORMATS[fmt], "—", "none", RAW_NAME, f"{limit['images_per_s']:,.0f}", "—",
                "1.00x", f"{limit['images_per_cpu_s']:,.0f}", "—", "—", "—",
                f"{limit['objects']} objects, {limit['bytes'] / 2**20:.1f} MiB",
            ]))  # fmt: skip
    return lines


def _case_order(case: str) -> tuple[int, int]:
    workers, temperature = case.split()
    return int(workers), temperature != "cold"


def formats_remote_table(results: dict[str, Any]) -> list[str]:
    """The Markdown of ``results`` (used by ``bench_formats_remote.py`` and ``tables.py``)."""
    writers = "; ".join(f"{FORMATS[f]}: {w}" for f, w in results["writers"].items())
    lines = [
        f"`{results['command']}`: {results['conditions']}. Written by {writers}. "
        f"{results['load_average_start']} at the start, {results['load_average']} at the end "
        "of the run.",
        "",
    ]
    for path, reason in results.get("skipped", {}).items():
        lines += [f"Not measured: {PATHS[path][2]}: {reason}.", ""]
    for what, error in results.get("errors", {}).items():
        lines += [f"Failed: {what}: {error}.", ""]
    lines += [
        "One epoch from the bucket, the loader's build included (higher is faster; `ours ÷ "
        "it` above 1: ours is faster; `÷ raw GET`: the row's images/s over the raw limit's):",
        "",
        *read_rows(results),
    ]
    return lines
