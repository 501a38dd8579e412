"""``lrd inspect``'s report as text: aligned labels, wrapped paragraphs, tables."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from lightning_resumable_data.cli._format import count, percent, table

__all__ = ["format_inspect"]


def _fingerprint_text(fingerprint: Mapping[str, Any]) -> str:
    # the order's version ("order") is for the state's checks, not for a reader: --json has it
    hidden = ("sources", "sizes", "initial", "order")
    shown = {k: v for k, v in fingerprint.items() if k not in hidden}
    return ", ".join(f"{k} {v}" for k, v in shown.items())


def format_inspect(report: Mapping[str, Any]) -> str:
    """The report of :func:`inspect` as text."""
    lines = [f"checkpoint   {report['checkpoint']}"]
    lines.append(f"data state   {report['found_at']} (loader resume mode: {report['mode']})")
    epoch, trained = report["epoch"], report["batches_trained"]
    step = report["global_step"]
    step_text = f"; global step {step}" if step is not None else ""
    batches = _plural(trained, "batch", "batches")
    if "consumed" in report:
        consumed, length = report["consumed"], report["epoch_length"]
        share = f" ({percent(consumed / length)})" if length else ""
        lines.append(
            f"position     epoch {epoch}: {count(consumed)} of {count(length)} samples consumed"
            f"{share}, {batches} trained{step_text}"
        )
    else:
        lines.append(f"position     epoch {epoch}: {batches} trained{step_text}")
    world, batch = report["world_size"], report["batch_size"]
    lines.append(
        f"saved with   world size {world} x batch size {batch} = {count(world * batch)} samples "
        "per step"
    )
    lines += _para("history", _history_text(report))
    sampler = report["sampler"]
    if sampler["kind"]:
        lines += _para("sampler", f"{sampler['kind']}: {_fingerprint_text(sampler['fingerprint'])}")
    mixture = report["mixture"]
    if mixture is not None:
        sizes = ", ".join(f"{n} {count(s)}" for n, s in mixture["sources"].items())
        lines.append(f"sources      {sizes}")
        lines.extend(["", *_format_mixture(mixture, report["epoch"])])
    lines.extend(["", *_format_resume(report)])
    for warning in report["warnings"]:
        lines += _para("warning", warning)
    return "\n".join(lines)


def _history_text(report: Mapping[str, Any]) -> str:
    """What ``lrd trace`` can name from this checkpoint."""
    history = report.get("history")
    if history is None:
        return (
            "none: written without a ResumableDataCallback or by a release before 0.4, so lrd "
            "trace cannot name the samples of its steps"
        )
    first, last = history["first_step"], history["last_step"]
    if first is None or last is None:
        return "no finished step recorded yet"
    changes = history["online_changes"]
    online = f", {_plural(changes, 'online weight change', 'online weight changes')}"
    text = (
        f"steps {first} to {last} recorded ({_plural(history['runs'], 'run', 'runs')}"
        f"{online if changes else ''}): lrd trace {report['checkpoint']} --step N names "
        "each step's samples"
    )
    skipped = history.get("skipped_steps") or []
    if skipped:
        cut = history.get("skipped_samples", {})
        epochs = ", ".join(f"{n} samples of epoch {e}" for e, n in cut.items())
        steps = ", ".join(f"{a}" if b == a + 1 else f"{a} to {b - 1}" for a, b in skipped)
        text += f"; the data of steps {steps} is cut ({epochs}), never read"
    quarantined = history.get("quarantined") or []
    if quarantined:
        shown = ", ".join(map(str, quarantined[:20])) + (", ..." if len(quarantined) > 20 else "")
        text += f"; {_plural(len(quarantined), 'sample')} quarantined (never drawn again): {shown}"
    return text


def _format_mixture(mixture: Mapping[str, Any], epoch: int) -> list[str]:
    phase = mixture["phase"]
    lines = [
        f"mixture      {phase['label']} in force since sample {count(phase['position'])} of epoch "
        f"{phase['epoch']}, temperature {phase['temperature']:g}"
    ]
    drawn, totals = mixture["drawn"] or {}, mixture["epoch_totals"] or {}
    header = ["source", "weight", "share", f"drawn in epoch {epoch}", "epoch plan"]
    rows = [
        [
            name,
            f"{phase['weights'][name]:g}",
            percent(phase["shares"][name]),
            count(drawn[name]) if name in drawn else "?",
            count(totals[name]) if name in totals else "?",
        ]
        for name in mixture["sources"]
    ]
    lines.extend("  " + row for row in table(header, rows, right=(1, 2, 3, 4)))
    if mixture.get("epoch_totals_unknown"):  # "?" above: say why
        lines += _para("epoch plan", f"unknown: {mixture['epoch_totals_unknown']}")
    following = mixture["next_phase"]
    if following is not None:
        shares = ", ".join(f"{n} {percent(p)}" for n, p in following["shares"].items())
        lines += _para(
            "next",
            f"{following['label']} from sample {count(following['position'])} of epoch "
            f"{following['epoch']}: {shares}",
        )
    else:
        online = mixture.get("online_changes", 0)
        if online:  # decided during training: not phases
            saved = f"{_plural(mixture['phases'], 'phase')}, {_plural(online, 'online change')}"
            lines.append(f"next         no further change ({saved} in the schedule)")
        else:
            lines.append(f"next         no further phase ({mixture['phases']} in the schedule)")
    return lines


def _para(label: str, text: str) -> list[str]:
    """``text`` wrapped to 100 columns, after a 13-column ``label``."""
    return textwrap.wrap(
        text, width=100, initial_indent=label.ljust(13), subsequent_indent=" " * 13
    )


def _plural(n: int, word: str, words: str = "") -> str:
    return f"{count(n)} {word if n == 1 else words or word + 's'}"


def _format_resume(report: Mapping[str, Any]) -> list[str]:
    resume = report["resume"]
    world, batch = resume["world_size"], resume["batch_size"]
    layout = f"world size {world} x batch size {batch}"
    if resume["mode"] == "exact":
        layout += " (the saved layout)"
    if resume["ok"] is None:  # not dry-run (a sharded run): say why
        return _para("resume", f"under {layout}: {resume['note']}.")
    if not resume["ok"]:
        lines = _para("resume", f"under {layout}: REFUSED.") + _para("", resume["error"])
        if resume.get("hint"):
            lines += _para("", f"HINT: {resume['hint']}")
        return lines
    if "remaining_samples" not in resume:  # not a position-mode state: exact only
        return _para(
            "resume",
            f"under {layout}: exact, after batch {report['batches_trained']} of epoch "
            f"{report['epoch']}.",
        )
    epoch, left = resume["epoch"], resume["remaining_samples"]
    per_rank, batches = resume["samples_per_rank"], resume["batches_left"]
    if resume["mode"] == "exact":
        text = (
            f"under {layout}: exact. The run continues at sample {count(resume['consumed'])} "
            f"of epoch {epoch} with the very batches the interrupted run would have read."
        )
    else:
        text = (
            f"under {layout}: elastic ({', '.join(resume['changes'])}). The remaining "
            f"{_plural(left, 'sample')} of epoch {epoch} are spread over "
            f"{_plural(world, 'rank')} in the same global order, each read once; the batches "
            "differ from those of the saved layout."
        )
    short = resume["last_batch"]
    detail = (
        f"Per rank: {_plural(per_rank, 'sample')} = "
        f"{_plural(batches, 'batch', 'batches')} of {batch}"
        + (f" (the last of {short})" if short and batches else "")
        + f"; epoch {epoch} counts {count(resume['epoch_batches'])} batches in this layout "
        f"({count(resume['batches_done'])} done), later epochs "
        f"{count(resume['batches_per_epoch'])}."
    )
    if resume["padding"]:
        detail += (
            f" {_plural(resume['padding'], 'padding sample')} "
            f"{'repeats an earlier one' if resume['padding'] == 1 else 'repeat earlier ones'} "
            "to even out the ranks (drop_last=False)."
        )
    if resume["dropped"]:
        detail += (
            f" The last {_plural(resume['dropped'], 'sample')} of the epoch's order "
            f"{'is' if resume['dropped'] == 1 else 'are'} left out to even out the ranks."
        )
    lines = _para("resume", text) + _para("", detail)
    for warning in resume.get("warnings", []):
        lines += _para("", f"note: {warning}")
    return lines
