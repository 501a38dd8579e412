"""The table of ``bench_documents.py`` for ``docs/documents.md`` (called by ``tables.py``)."""

from __future__ import annotations

from typing import Any

from _harness import REPO_ROOT, fmt_n, table_header, table_row

DOCUMENTS = REPO_ROOT / "benchmarks" / "results" / "documents.json"
DOCUMENTS_PAGE = REPO_ROOT / "docs" / "documents.md"


def document_table(results: dict[str, Any]) -> list[str]:
    """The Markdown of ``results`` (used here and by ``benchmarks/tables.py``)."""
    lines = [
        f"`{results['command']}`: {results['conditions']}; Python {results['python']}, "
        f"NumPy {results['numpy']}, megatron-core {results['megatron_core']}, litdata "
        f"{results['litdata']}, {results['load_average']} at the end of the run.",
        "",
        *table_header("documents", "samples", "ours s", "Megatron s", "speed-up", "ours peak MiB",
                      "Megatron peak MiB", "ours index B/doc", "Megatron index B/doc"),
    ]  # fmt: skip
    for row in results["builds"]:
        ours, theirs, n = row["ours"], row["megatron"], row["documents"]
        lines.append(table_row([
            fmt_n(n), f"{ours['samples']:,}", f"{ours['seconds']:.3f}",
            f"{theirs['seconds']:.3f}", f"{theirs['seconds'] / ours['seconds']:.1f}x",
            f"{ours['peak_mib']:.1f}", f"{theirs['peak_mib']:.1f}",
            f"{ours['index_bytes'] / n:.3f}", f"{theirs['index_bytes'] / n:.2f}",
        ]))  # fmt: skip
    lines += ["", *table_header("reader (1e5 documents)", "us per sample", "M tokens/s",
                                "CPU us per sample", "M tokens per CPU s")]  # fmt: skip
    names = {"ours": "PackedDataset, one sample a call",
             "ours_batch": f"PackedDataset, batches of {results['batch']} + collate_packed",
             "megatron": "Megatron GPTDataset", "litdata": "LitData TokensLoader",
             "litdata_batch": f"LitData TokensLoader, batches of {results['batch']} "
                              "+ default_collate"}  # fmt: skip
    for side, name in names.items():
        if side not in results["reads"]:  # a run from before that row existed
            continue
        read = results["reads"].get(side)
        if read:
            cpu = ["", ""]  # a run from before CPU time was recorded
            if "cpu_us" in read:
                cpu = [f"{read['cpu_us']:.1f}", f"{read['tokens_per_cpu_s'] / 1e6:.1f}"]
            lines.append(table_row(
                [name, f"{read['latency_us']:.1f}", f"{read['tokens_per_s'] / 1e6:.1f}", *cpu]
            ))  # fmt: skip
        else:
            lines.append(table_row([name, "skipped (not installed)", "", "", ""]))
    lines.append("")
    lines += [f"- {verdict}" for verdict in results["verdicts"]]
    return lines
