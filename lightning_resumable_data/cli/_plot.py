"""``lrd plan --png``: the plan as a picture (needs matplotlib, the ``cli`` extra)."""

from __future__ import annotations

from pathlib import Path

from lightning_resumable_data.cli._errors import EXIT_FAILURE, CliError
from lightning_resumable_data.cli._plan_result import Plan

__all__ = ["plot_plan"]


def plot_plan(plan: Plan, path: Path) -> None:
    """Write a PNG: the share of each source over the steps, and the passes over each source.

    Raises:
        CliError: matplotlib is not installed, or the file cannot be written.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        raise CliError(
            "--png needs matplotlib, which is not installed",
            hint="pip install 'lightning-resumable-data[cli]' (or pip install matplotlib).",
            code=EXIT_FAILURE,
        ) from None
    names = list(plan.config.sources)
    figure = Figure(figsize=(9, 6), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True)
    colors = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for phase in plan.phases:
        if phase.stop <= phase.start:
            continue
        base = 0.0
        for name in names:
            share = phase.shares[name]
            top.bar(
                phase.start,
                share,
                width=phase.stop - phase.start,
                bottom=base,
                align="edge",
                color=colors[name],
            )
            base += share
        top.axvline(phase.start, color="black", linewidth=0.8, linestyle=":")
    handles = [Patch(color=colors[n], label=n) for n in names]
    top.legend(handles=handles, loc="upper right", fontsize="small")
    top.set_ylabel("share of samples")
    top.set_ylim(0, 1)
    top.set_title(f"lrd plan {Path(plan.name).name}")
    steps = [step for step, _ in plan.boundaries]
    for name in names:
        size = plan.config.sources[name]
        passes = [counts[name] / size if size else 0.0 for _, counts in plan.boundaries]
        bottom.plot(steps, passes, marker="o", color=colors[name], label=name)
    bottom.set_ylabel("epochs of source")
    bottom.set_xlabel("optimizer step")
    bottom.set_xlim(0, plan.max_steps)
    bottom.grid(alpha=0.3)
    try:
        figure.savefig(path, format="png", dpi=100)
    except OSError as error:
        raise CliError(
            f"cannot write {path}: {error.strerror or error}",
            hint="check that the folder exists and is writable.",
            code=EXIT_FAILURE,
        ) from None
