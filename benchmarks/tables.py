"""Rewrite the generated tables of the docs (benchmarks, documents, remote, ...) from JSON.

Run from the repository root after a benchmark run::

    .venv/bin/python benchmarks/bench_mixture.py --quick   # writes benchmarks/results/mixture.json
    .venv/bin/python benchmarks/tables.py                  # rewrites the marked block

A generated block sits between ``<!-- NAME -->`` and ``<!-- /NAME -->`` lines; everything
between them is replaced, nothing outside them is touched, so no number is typed by hand.
``--check`` exits with status 1 if the page is not what the JSON gives (for CI).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from _harness import REPO_ROOT, fmt_n, table_header, table_row
from bench_mixture_peers import MIXTURE_PEERS, mixture_peers_table
from bench_provenance import PROVENANCE, PROVENANCE_PAGE, provenance_table
from documents_table import DOCUMENTS, DOCUMENTS_PAGE, document_table
from formats_remote_table import FORMATS_REMOTE_JSON, formats_remote_table
from formats_table import FORMATS_JSON, formats_table
from remote_table import REMOTE, REMOTE_PAGE, remote_table
from seeding_tables import (
    LIGHTNING,
    SEEDING,
    SEEDING_PAGE,
    SHARD_RESUME,
    lightning_overhead_table,
    seeding_table,
    shard_resume_table,
)

PAGE = REPO_ROOT / "docs" / "benchmarks.md"
MIXTURE = REPO_ROOT / "benchmarks" / "results" / "mixture.json"
PEERS = REPO_ROOT / "benchmarks" / "results" / "peers.json"
SAMPLER = REPO_ROOT / "benchmarks" / "results" / "sampler.json"
SHARDS = REPO_ROOT / "benchmarks" / "results" / "shards.json"
MIXTURE_RANKS = REPO_ROOT / "benchmarks" / "results" / "mixture_ranks.json"
SHARDS_PAGE = REPO_ROOT / "docs" / "sharded.md"
SAMPLER_NAMES = {
    "torch": "torch `DistributedSampler`",
    "randperm": "ours, `randperm`",
    "feistel": "ours, `feistel`",
    "torch.randperm": "kernel: `torch.randperm`",
    "feistel-kernel": "kernel: `feistel_slice`",
}
PATH_NAMES = {
    "plain": "ours: `DistributedSampler` + `StatefulDataLoader`",
    "sharded": "ours: `DistributedShardedDataset` + its sampler",
    "torchdata": "torchdata: `.npy` memmap + torch `DistributedSampler`",
    "litdata": "LitData: `StreamingDataset` + `StreamingDataLoader`",
}


def peers_table(results: dict[str, Any]) -> list[str]:
    """Resume latency and read rate of ``bench_peers.py``, with every path's ratios."""
    names = {
        **PATH_NAMES,
        "torchdata": "torchdata: `.npy` memmap + torch `DistributedSampler`",
        "litdata": "LitData: `TokensLoader` + `StreamingDataLoader`",
        "grain": "Grain: `MapDataset` -> `IterDataset`",
        "mosaic": "Mosaic: `StreamingDataset` + `StreamingDataLoader`",
        "raw": "raw limit: memmap gather, one process",
    }
    refs = {
        "torchdata": "torchdata",
        "litdata": "LitData",
        "grain": "Grain",
        "mosaic": "Mosaic",
        "raw": "raw limit",
    }
    resume, rates = results["resume_s"], results["throughput"]

    def _ratio(value: float, ref: float | None) -> str:  # two significant digits below 0.1
        if not ref:
            return "—"
        return f"{value / ref:.2f}x" if value / ref >= 0.1 else f"{value / ref:.2g}x"

    def section(title: str, values: dict[str, dict[str, float]], unit: str) -> list[str]:
        present = [p for p in refs if values.get(p)]
        case = "resume at" if values is resume else "workers"
        out = [title, "", *table_header(case, "path", unit, *(f"÷ {refs[p]}" for p in present))]
        for key in sorted({k for row in values.values() for k in row}, key=int):
            for path, row in values.items():
                if key not in row:
                    continue
                value = row[key]
                shown = f"{value * 1e3:.1f}" if values is resume else f"{value:,.0f}"
                ratios = [_ratio(value, values[p].get(key)) for p in present]
                label = f"k = {int(key):,}" if values is resume else key
                out.append(table_row([label, names.get(path, path), shown, *ratios]))
        return out

    lines = [
        f"`{results['command']}`: {results['conditions']}; {results['load_average']} at the "
        "end of the run.",
        "",
    ]
    for path, reason in results.get("skipped", {}).items():
        lines += [f"Not measured: {path}: {reason}.", ""]
    lines += section(
        "Fresh loader + state load + first batch (k = 0: the first batch of a fresh start), "
        "and its ratio to each peer and to the raw limit (lower is faster):",
        resume,
        "ms",
    )
    lines += [""]
    lines += section(
        "Read throughput, samples/s, and its ratio to each peer and to the raw limit (higher "
        "is faster; the raw limit is one process beside both worker counts):",
        rates,
        "samples/s",
    )
    steps = results.get("lightning_steps_per_s", {})
    if steps:
        lines += ["", *table_header("Lightning `Trainer`, small model", "steps per CPU s")]
        labels = {"resumable": "`ResumableDataModule`", "plain": "plain `DataLoader`"}
        lines += [table_row([labels.get(k, k), f"{v:.1f}"]) for k, v in steps.items()]
    lines.append("")
    lines += [f"- {verdict}" for verdict in results["verdicts"]]
    return lines


def mixture_table(results: dict[str, Any]) -> list[str]:
    """The W-scaling table of ``bench_mixture.py``, its conditions and verdicts."""
    lines = [
        f"`{results['command']}`: {results['conditions']}; Python {results['python']}, "
        f"NumPy {results['numpy']}, {results['load_average']} at the end of the run.",
        "",
        *table_header(
            "N",
            "W",
            "rank-0 indices",
            "mixture CPU s",
            "feistel CPU s",
            "mixture / feistel",
            "mixture M indices/s",
        ),
    ]
    for row in results["scaling"]:
        cells = [
            fmt_n(row["n"]),
            str(row["world"]),
            f"{row['count']:,}",
            f"{row['mixture_cpu_s']:.3f}",
            f"{row['feistel_cpu_s']:.3f}",
            f"{row['ratio']:.1f}x",
            f"{row['mixture_rate'] / 1e6:.2f}",
        ]
        lines.append(table_row(cells))
    lines.append("")
    lines += [f"- {verdict}" for verdict in results["verdicts"]]
    for n, overlap in results.get("pass_overlap", {}).items():
        lines.append(
            f"- N={fmt_n(int(n))}: largest overlap of a source's consecutive passes, per "
            f"source: {', '.join(f'{v:,}' for v in overlap)} positions (must be 0)."
        )
    tables = results.get("tables", {})
    if tables.get("main"):
        lines += [
            "",
            f"One epoch of rank 0 of {results['world']} beside the plain samplers (wall "
            "seconds), and the resume just past the weight change:",
            "",
            *tables["main"],
        ]
    if tables.get("counts"):
        lines += ["", "Per-source counts, targets against what was drawn:", "", *tables["counts"]]
    return lines


def sampler_table(results: dict[str, Any]) -> list[str]:
    """One epoch of rank 0 of 8, and the bare permutation kernels, from ``sampler.json``."""
    lines = table_header("N", "what", "indices timed", "M indices/s", "peak MiB", "check")
    for row in results["rows"]:
        if row.get("error"):
            continue
        timed = f"{row['count']:,}" + (" (a slice)" if row.get("budget") else "")
        check = {True: "yes", False: "FAILED", None: "not checked"}[row.get("valid")]
        name = SAMPLER_NAMES.get(row["impl"], row["impl"])
        lines.append(
            table_row(
                [
                    fmt_n(row["n"]),
                    name,
                    timed,
                    f"{row['indices_per_s'] / 1e6:.2f}",
                    f"{row['peak_mib']:.1f}",
                    check,
                ]
            )
        )
    return [*lines, "", *(f"- {verdict}" for verdict in results.get("verdicts", []))]


def shards_rows(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``bench_shards.py``'s rows: path, prefetch, seconds, samples/s, ideal seconds."""
    lines = table_header("path", "prefetch", "seconds", "samples/s", "ideal seconds")
    for row in rows:
        ideal = "—" if row["ideal_seconds"] is None else f"{row['ideal_seconds']:.3f}"
        cells = [row["path"], row["prefetch"], f"{row['seconds']:.3f}"]
        lines.append(table_row([*cells, f"{row['samples_per_s']:,.0f}", ideal]))
    return lines


def shards_table(results: dict[str, Any]) -> list[str]:
    """The shard-prefetch table of ``docs/sharded.md``, with its conditions and verdicts."""
    return [
        f"`{results['command']}`: {results['conditions']}; {results['load_average']} at the "
        "end of the run.",
        "",
        *shards_rows(results["rows"]),
        "",
        *(f"- {line}" for line in results["verdicts"]),
    ]


def mixture_ranks_table(results: dict[str, Any]) -> list[str]:
    """Cost per sample per rank by source-size mix and world size (``bench_mixture_ranks``)."""
    lines = [
        f"`{results['command']}`: N = {fmt_n(results['n'])} samples per epoch, rank 0 of W, "
        f"one thread pinned to one CPU, CPU time; Python {results['python']}, "
        f"{results['load_average']} at the end of the run.",
        "",
        *table_header(
            "sources",
            "W",
            "rank epoch",
            "timed samples",
            "mixture us/sample",
            "feistel us/sample",
            "mixture / feistel",
            "rank epoch s",
        ),
    ]
    for row in results["rows"]:
        cells = [
            row["mix"].replace("**", "^"),
            f"{row['world']:,}",
            f"{row['rank_epoch']:,}",
            f"{row['count']:,}",
            f"{row['mixture_us']:.3f}",
            f"{row['feistel_us']:.3f}",
            f"{row['ratio']:.1f}x",
            f"{row['rank_epoch_s']:.2f}",
        ]
        lines.append(table_row(cells))
    lines.append("")
    lines += [f"- {verdict}" for verdict in results["verdicts"]]
    return lines


def replace_block(text: str, name: str, lines: Sequence[str]) -> str:
    """Replace the lines between ``<!-- name -->`` and ``<!-- /name -->`` in ``text``."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"a page has no block {start} ... {end}; add the two marker lines.")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n" + "\n".join(lines) + f"\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or, with ``--check``, compare) the generated blocks of the pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args(argv)
    text = PAGE.read_text()
    results = json.loads(MIXTURE.read_text())
    new = replace_block(text, "mixture-table", mixture_table(results))
    if PEERS.exists():
        new = replace_block(new, "peers-table", peers_table(json.loads(PEERS.read_text())))
    if MIXTURE_RANKS.exists():
        ranks = mixture_ranks_table(json.loads(MIXTURE_RANKS.read_text()))
        new = replace_block(new, "mixture-ranks-table", ranks)
    if MIXTURE_PEERS.exists():
        peers = mixture_peers_table(json.loads(MIXTURE_PEERS.read_text()))
        new = replace_block(new, "mixture-peers-table", peers)
    if SAMPLER.exists():
        new = replace_block(new, "sampler-table", sampler_table(json.loads(SAMPLER.read_text())))
    if FORMATS_JSON.exists():
        formats = formats_table(json.loads(FORMATS_JSON.read_text()))
        new = replace_block(new, "formats-table", formats)
    if FORMATS_REMOTE_JSON.exists():
        remote = formats_remote_table(json.loads(FORMATS_REMOTE_JSON.read_text()))
        new = replace_block(new, "formats-remote-table", remote)
    pages = {PAGE: (text, new)}  # page: (as it is, as the JSON gives it)
    for page, name, path, table in (  # tables of benchmarks that report on their own page
        (REMOTE_PAGE, "remote", REMOTE, remote_table),
        (DOCUMENTS_PAGE, "documents-table", DOCUMENTS, document_table),
        (SHARDS_PAGE, "shards-table", SHARDS, shards_table),
        (SHARDS_PAGE, "shard-resume-table", SHARD_RESUME, shard_resume_table),
        (SEEDING_PAGE, "seeding-table", SEEDING, seeding_table),
        (SEEDING_PAGE, "lightning-overhead-table", LIGHTNING, lightning_overhead_table),
        (PROVENANCE_PAGE, "provenance-table", PROVENANCE, provenance_table),
    ):
        if path.exists():
            old, current = pages.get(page, (page.read_text(), page.read_text()))
            pages[page] = (old, replace_block(current, name, table(json.loads(path.read_text()))))
    if args.check:
        stale = [
            str(page.relative_to(REPO_ROOT)) for page, (old, new) in pages.items() if old != new
        ]
        if stale:
            print(f"generated blocks differ from benchmarks/results/*.json in {', '.join(stale)}:")
            print("run .venv/bin/python benchmarks/tables.py (never edit them by hand)")
        return 1 if stale else 0
    for page, (_, new) in pages.items():
        page.write_text(new)
    names = ", ".join(str(page.relative_to(REPO_ROOT)) for page in pages)
    print(f"rewrote the generated blocks of {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
