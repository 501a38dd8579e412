"""The table of ``bench_documents.py`` in ``docs/documents.md``, generated from its JSON.

Run from the repository root after a benchmark run::

    .venv/bin/python benchmarks/bench_documents.py      # writes benchmarks/results/documents.json
    .venv/bin/python benchmarks/documents_table.py      # rewrites the marked block of the page

The block sits between ``<!-- documents-table -->`` and ``<!-- /documents-table -->``;
nothing outside it is touched. ``--check`` exits with status 1 if the page is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from _harness import REPO_ROOT, fmt_n, table_header, table_row

RESULTS = REPO_ROOT / "benchmarks" / "results" / "documents.json"
PAGE = REPO_ROOT / "docs" / "documents.md"
BLOCK = "documents-table"


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
    lines += ["", *table_header("reader (1e5 documents)", "us per sample", "M tokens/s")]
    names = {"ours": "PackedDataset, one sample a call",
             "ours_batch": f"PackedDataset, __getitems__ of {results['batch']}",
             "megatron": "Megatron GPTDataset", "litdata": "LitData TokensLoader"}  # fmt: skip
    for side, name in names.items():
        read = results["reads"].get(side)
        if read:
            lines.append(table_row(
                [name, f"{read['latency_us']:.1f}", f"{read['tokens_per_s'] / 1e6:.1f}"]
            ))  # fmt: skip
        else:
            lines.append(table_row([name, "skipped (not installed)", ""]))
    lines.append("")
    lines += [f"- {verdict}" for verdict in results["verdicts"]]
    return lines


def replace_block(text: str, lines: Sequence[str]) -> str:
    """Replace the lines between the block's two marker lines in ``text``."""
    start, end = f"<!-- {BLOCK} -->", f"<!-- /{BLOCK} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{PAGE} has no block {start} ... {end}; add the two marker lines.")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n" + "\n".join(lines) + f"\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite (or, with ``--check``, compare) the generated block of the page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args(argv)
    text = PAGE.read_text()
    new = replace_block(text, document_table(json.loads(RESULTS.read_text())))
    if args.check:
        return 0 if new == text else 1
    PAGE.write_text(new)
    print(f"rewrote the generated block of {PAGE.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
