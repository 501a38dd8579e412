"""The table of ``bench_remote.py`` for ``docs/remote.md`` (called by ``tables.py``)."""

from __future__ import annotations

from typing import Any

from _harness import REPO_ROOT, table_header, table_row

REMOTE = REPO_ROOT / "benchmarks" / "results" / "remote.json"
REMOTE_PAGE = REPO_ROOT / "docs" / "remote.md"
NAMES = {
    "ours": "lightning-resumable-data",
    "litdata": "LitData",
    "streaming": "MosaicML Streaming",
}


def remote_table(results: dict[str, Any]) -> list[str]:
    """Rows per system, prefetch and cache temperature; the verdict under the table."""
    lines = [
        f"`{results['command']}`: {results['conditions']}; Python {results['python']}, "
        f"{results['load_average']} at the end of the run. {results.get('settings', '')}.",
        "",
        *table_header(
            "system", "prefetch", "cache", "first batch s", "epoch s", "samples/s", "cache MiB"
        ),
    ]
    for row in results["rows"]:
        name = NAMES.get(row["system"], row["system"])
        head = [name, "yes" if row["prefetch"] else "no", row["cache"]]
        if "error" in row:
            last = row["error"].strip().splitlines()[-1][:80].replace("|", "/")
            lines.append(table_row([*head, "failed", "", "", last]))
            continue
        bound = row["limit_bytes"]
        cache = f"{row['cache_peak_bytes'] / (1 << 20):.1f}"
        cache += f" (bound {bound / (1 << 20):.1f})" if bound else " (unbounded)"
        lines.append(
            table_row(
                [
                    *head,
                    f"{row['ttfb_s']:.2f}",
                    f"{row['epoch_s']:.2f}",
                    f"{row['samples_per_s']:,.0f}" + ("" if row["complete"] else " (incomplete)"),
                    cache,
                ]
            )
        )
    best = results.get("best_peer_samples_per_s")
    verdict = "met" if results["target_met"] else "not met"
    lines += [
        "",
        f"- Target (cold cache, prefetch on: at least the best peer's samples/s, cache within "
        f"its bound): **{verdict}**: {results['ours_samples_per_s']:,.0f} samples/s against "
        + (f"{best:,.0f}" if best else "no peer measured")
        + f"; bound held: {results['ours_cache_bounded']}.",
    ]
    warm = [r for r in results["rows"] if r["cache"] == "warm" and "error" not in r]
    ours = max((r["samples_per_s"] for r in warm if r["system"] == "ours"), default=None)
    peer = max((r["samples_per_s"] for r in warm if r["system"] != "ours"), default=None)
    if ours and peer:
        lines.append(
            f"- Warm cache (every shard local): {ours:,.0f} samples/s against the best peer's "
            f"{peer:,.0f}: {'at least as fast' if ours >= peer else 'slower'}."
        )
    return lines
