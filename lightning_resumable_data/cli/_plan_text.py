"""``lrd plan``'s text: a header, the table of phases and sources, and the notes."""

from __future__ import annotations

from lightning_resumable_data.cli._format import count, percent, table
from lightning_resumable_data.cli._plan_result import Plan

__all__ = ["format_plan"]


def format_plan(plan: Plan) -> str:
    """The plan as text: a header, the phase table and the source table."""
    c = plan.config
    acc = f" x {c.accumulate_grad_batches} accumulated" if c.accumulate_grad_batches > 1 else ""
    steps_per_epoch = plan.batches_per_epoch / c.accumulate_grad_batches
    lines = [
        f"plan         {plan.name}: {len(c.sources)} sources, {count(plan.max_steps)} steps",
        f"step         batch {c.batch_size} x {c.world_size} ranks{acc} = "
        f"{count(plan.samples_per_step)} samples "
        f"({count(plan.max_steps * plan.samples_per_step)} in all)",
        f"epoch        {count(plan.epoch_length)} samples = {steps_per_epoch:g} steps; the run "
        f"covers {plan.epochs:.2f} epochs",
        "",
    ]
    rows = []
    for phase in plan.phases:
        steps = f"{phase.start}-{phase.stop - 1}" if phase.stop > phase.start else "-"
        for j, name in enumerate(c.sources):
            first = j == 0
            rows.append(
                [
                    str(phase.index) if first else "",
                    phase.label if first else "",
                    steps if first else "",
                    count(phase.samples) if first else "",
                    f"{phase.temperature:g}" if first else "",
                    name,
                    f"{phase.weights[name]:g}",
                    percent(phase.shares[name]),
                    count(phase.drawn[name]),
                ]
            )
    header = ["phase", "start", "steps", "samples", "temp", "source", "weight", "share", "drawn"]
    lines.extend(table(header, rows, right=(3, 6, 7, 8)))
    lines.append("")
    source_rows = [
        [name, count(size), count(plan.drawn[name]), f"{plan.source_epochs(name):.2f}"]
        for name, size in c.sources.items()
    ]
    lines.extend(table(["source", "size", "drawn", "epochs of source"], source_rows, (1, 2, 3)))
    if plan.notes:
        lines.append("")
        lines.extend(f"note: {note}" for note in plan.notes)
    return "\n".join(lines)
