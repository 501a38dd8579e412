"""The tables of ``bench_formats.py`` for ``docs/benchmarks.md`` (called by ``tables.py``)."""

from __future__ import annotations

from typing import Any

from _harness import REPO_ROOT, table_header, table_row
from formats_paths import FORMATS, PATHS

FORMATS_JSON = REPO_ROOT / "benchmarks" / "results" / "formats.json"


def _ratio(ours: float | None, peer: float | None) -> str:
    """``ours / peer`` as ``1.23x``; a dash where either is missing."""
    return f"{ours / peer:.2f}x" if ours and peer else "—"


def _ours(path: str) -> str:
    """The path of ours (``StatefulDataLoader``) over the format of ``path``."""
    return f"ours_{PATHS[path][0]}"


def _images(row: dict[str, Any]) -> str:
    seen, distinct = row["images"], row["distinct"]
    return f"{seen:,}" if seen == distinct else f"{seen:,} ({distinct:,} distinct)"


def read_rows(results: dict[str, Any]) -> list[str]:
    """One epoch per path and worker count; peers' rows carry the ratio ours / peer."""
    read = results["read"]
    lines = table_header("format", "workers", "path", "images/s", "ours ÷ it", "images / CPU s",
                         "ours ÷ it", "first batch ms", "images read")  # fmt: skip
    order = [(w, p) for f in FORMATS for w in ("0", "2") for p in PATHS if PATHS[p][0] == f]
    for workers, path in order:
        fmt, _, name = PATHS[path]
        row = read.get(path, {}).get(workers)
        if row is not None:
            ours = read.get(_ours(path), {}).get(workers, {})
            peer = path != _ours(path) and not path.startswith("sharded_")
            wall, cpu = row["images_per_s"], row["images_per_cpu_s"]
            lines.append(table_row([
                FORMATS[fmt], workers, name, f"{wall:,.0f}",
                _ratio(ours.get("images_per_s"), wall) if peer else "—",
                f"{cpu:,.0f}", _ratio(ours.get("images_per_cpu_s"), cpu) if peer else "—",
                f"{row['first_batch_s'] * 1e3:,.0f}", _images(row),
            ]))  # fmt: skip
    return lines


def resume_rows(results: dict[str, Any]) -> list[str]:
    """Fresh loader + state + first batch at each k; peers' rows carry ours / peer."""
    resume, ks = results["resume"], [str(k) for k in results["resume_ks"]]
    cells = [f"k = {int(k):,} ms" for k in ks]
    lines = table_header("format", "path", "how", *cells, f"ours ÷ it, k = {int(ks[-1]):,}",
                         "exact")  # fmt: skip
    for path, (fmt, _, name) in PATHS.items():
        row = resume.get(path)
        if row is None:
            continue
        ours = resume.get(_ours(path), {}).get(ks[-1], {})
        peer = path != _ours(path) and not path.startswith("sharded_")
        how = "replays k batches (no state API)" if path == "webdataset" else "`load_state_dict`"
        times = [f"{row[k]['seconds'] * 1e3:,.1f}" for k in ks]
        ratio = _ratio(ours.get("seconds"), row[ks[-1]]["seconds"]) if peer else "—"
        exact = "yes" if all(row[k]["exact"] for k in ks) else "NO"
        lines.append(table_row([FORMATS[fmt], name, how, *times, ratio, exact]))
    return lines


def formats_table(results: dict[str, Any]) -> list[str]:
    """The Markdown of ``results`` (used by ``bench_formats.py`` and ``tables.py``)."""
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
        "One epoch (higher is faster; `ours ÷ it` above 1: ours is faster):",
        "",
        *read_rows(results),
        "",
        "Resume at k batches, 0 workers (lower is faster; `ours ÷ it` below 1: ours is "
        "faster; `exact`: the batch is the one an uninterrupted run read at k):",
        "",
        *resume_rows(results),
    ]
    return lines
