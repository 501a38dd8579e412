"""``lrd plan CONFIG --resume CKPT``: what resuming a checkpoint under a config would do.

The config's data (a single dataset's length, or a mixture's sources with their sizes and
its weights, by default the sizes as ``ResumableDataModule`` takes them) and layout (world
and batch size) are handed to ``lrd inspect``'s dry run: the report says whether the resume
is exact, elastic or refused, and what a changed dataset or mixture does to the rest of the
interrupted epoch (docs/changes.md).

Example:
    >>> from lightning_resumable_data.lightning.plan import PlanConfig
    >>> _data(PlanConfig(sources={"web": 3, "code": 1}))
    (None, ({'web': 3, 'code': 1}, {'web': 3.0, 'code': 1.0}, 4))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_resumable_data.lightning.plan import PlanConfig

__all__ = ["plan_resume"]


def plan_resume(config: PlanConfig, checkpoint: Path, as_json: bool) -> str:
    """The ``lrd inspect`` report of ``checkpoint`` under ``config``'s data and layout."""
    from lightning_resumable_data.cli._change_report import format_changes
    from lightning_resumable_data.cli.checkpoint import format_inspect, inspect

    length, mixture = _data(config)
    report = inspect(
        checkpoint,
        config.world_size,
        config.batch_size,
        dataset_length=length,
        mixture=mixture,
    )
    if as_json:
        return json.dumps(report, indent=2)
    changes = report.get("data_changes")
    return format_inspect(report) + ("\n" + format_changes(changes) if changes else "")


def _data(config: PlanConfig) -> tuple[int | None, Any]:
    """A single dataset's length, or a mixture's (sources, weights), of ``config``."""
    sources = dict(config.sources)
    if list(sources) == [""]:
        return sources[""], None
    weights = config.weights or {name: float(size) for name, size in sources.items()}
    budget = config.samples_per_epoch or sum(sources.values())
    return None, (sources, {name: float(w) for name, w in weights.items()}, budget)
