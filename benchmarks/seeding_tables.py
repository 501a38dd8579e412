"""Tables of the cost benchmarks (for ``tables.py``): seeding, Lightning, sharded resume.

``bench_seeding.py`` and ``bench_lightning_overhead.py`` go on ``docs/randomness.md``, the
page that says what the callback does per batch; ``bench_shard_resume.py`` on
``docs/sharded.md``.
"""

from __future__ import annotations

from typing import Any

from _harness import REPO_ROOT, table_header, table_row

SEEDING = REPO_ROOT / "benchmarks" / "results" / "seeding.json"
LIGHTNING = REPO_ROOT / "benchmarks" / "results" / "lightning_overhead.json"
SHARD_RESUME = REPO_ROOT / "benchmarks" / "results" / "shard_resume.json"
SEEDING_PAGE = REPO_ROOT / "docs" / "randomness.md"
SETUPS = {
    "plain": "a plain `DataLoader(shuffle=True)`, no callback",
    "default": "`ResumableDataModule(...)` as documented (its callback, torch reseeded)",
    "all-generators": '... `ResumableDataCallback(seed_training=("torch", "numpy", "random"))`',
    "seeding-off": "... `ResumableDataCallback(seed_training=False)`",
}


def seeding_table(results: dict[str, Any]) -> list[str]:
    """The cost of ``seed_training_step`` against a small model's step (``bench_seeding.py``)."""
    r = results["results"]
    rows = [
        ("`seed_training_step` (key + torch: the default)", f"{r['seed_us']:.0f} us", ""),
        ("... with NumPy and `random` too", f"{r['all_generators_seed_us']:.0f} us", ""),
        (
            "`torch.manual_seed` (for comparison, not used)",
            f"{r['torch_manual_seed_us']:.0f} us",
            "",
        ),
        (
            "MLP 784-256-256-10 with dropout, batch 64, AdamW: plain torch step",
            f"{r['torch_step_us'] / 1e3:.2f} ms",
            f"{r['ratio_torch']:.2%}",
        ),
        (
            "the same model, one `Trainer` training batch (seeding off)",
            f"{r['lightning_step_off_us'] / 1e3:.2f} ms",
            f"**{r['ratio_lightning']:.2%}**",
        ),
    ]
    return [
        f"`{results['command']}`: {results['conditions']}; {results['load_average']} at the "
        "end of the run.",
        "",
        *table_header("measurement (CPU time, one thread)", "per call / step", "seeding / step"),
        *(table_row(list(row)) for row in rows),
    ]


def lightning_overhead_table(results: dict[str, Any]) -> list[str]:
    """Throughput and callback time per batch at a short step (``bench_lightning_overhead``)."""
    lines = [
        f"`{results['command']}`: {results['conditions']}; Python {results['python']}, "
        f"torch {results['torch']}, lightning {results['lightning']}; "
        f"{results['load_average']} at the end of the run.",
        "",
        *table_header(
            "set-up",
            "CPU time / batch",
            "throughput vs plain",
            "callback hooks / batch",
            "runs: fastest-slowest",
        ),
    ]
    plain = results["results"]["plain"]["step_us"]
    for setup, row in results["results"].items():
        hooks = (
            "" if setup == "plain" else f"{row['hooks_us']:.1f} us ({row['hooks_us'] / plain:.1%})"
        )
        low, high = row.get("runs_us", (row["step_us"], row["step_us"]))
        spread = f"{low:.0f}-{high:.0f} us"
        cells = [
            SETUPS.get(setup, setup),
            f"{row['step_us']:.0f} us",
            f"{row['ratio']:.3f}",
            hooks,
            spread,
        ]
        lines.append(table_row(cells))
    return [*lines, "", f"- {results['verdict']}"]


def shard_resume_table(results: dict[str, Any]) -> list[str]:
    """Open and resume time by shard count, lazy and verified (``bench_shard_resume``)."""
    lines = [
        f"`{results['command']}`: {results['conditions']}; Python {results['python']}; "
        f"{results['load_average']} at the end of the run.",
        "",
        *table_header("shards", "open ms", "resume ms", "with verify=True: open ms", "resume ms"),
    ]
    for row in results["rows"]:
        lazy, verify = row["lazy"], row["verify"]
        cells = [f"{row['shards']:,}", f"{lazy['open_ms']:.1f}", f"{lazy['resume_ms']:.1f}"]
        lines.append(table_row([*cells, f"{verify['open_ms']:.1f}", f"{verify['resume_ms']:.1f}"]))
    return [*lines, "", f"- {results['verdict']}"]
