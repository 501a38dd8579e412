"""The merge of a saved mixture schedule with a changed one, on an allowed resume.

:func:`reconcile_schedule` checks the declared changes of the resuming sampler against the
saved ones and, where they differ and the change is allowed (``allow_schedule_change``),
keeps the saved schedule up to the resume point and applies the new one from there on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_resumable_data.samplers.schedule import _kind, carried, entry_key, since
from lightning_resumable_data.state import StateMismatchError

__all__ = ["reconcile_schedule"]

Entries = list[dict[str, Any]]


def _key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two declared changes the same: (epoch, position, weights, temperature)."""
    return (entry["epoch"], entry["position"], list(entry["weights"]), entry["temperature"])


def reconcile_schedule(
    owner: Any, saved: list[dict[str, Any]], epoch: int, consumed: int
) -> list[dict[str, Any]]:
    """Check ``owner``'s declared schedule against the saved one; the merge.

    The declared changes (initial weights, phases) installed before loading must be a
    prefix of the saved declared ones; the saved online changes (decided while training,
    some maybe ahead of the resume point) and carried entries come with the state and are
    kept as recorded. With ``allow_schedule_change``, the saved schedule is kept up to the
    resume point (and its online changes after it), and this sampler's declared changes
    apply from it on: what they have in force there (see :func:`_cut`), then their later
    changes.
    """
    now = [e for e in owner._schedule if _kind(e) == "declared"]
    declared = [e for e in saved if _kind(e) == "declared"]
    mismatch = next(
        (i for i, (a, b) in enumerate(zip(now, declared, strict=False)) if _key(a) != _key(b)),
        len(declared) if len(now) > len(declared) else None,
    )
    if mismatch is None:
        return saved
    if not owner.allow_schedule_change:
        shown_saved = _key(declared[mismatch]) if mismatch < len(declared) else "none"
        raise StateMismatchError(
            f"Cannot load this state into {owner.KIND}: the mixture schedule differs from "
            f"the saved one at change #{mismatch}: saved {shown_saved}, now "
            f"{_key(now[mismatch])} (epoch, position, weights, temperature). The resumed "
            "run would not mix what the interrupted run mixed. Restore the saved phases, "
            "or accept the change on purpose (ResumableDataModule(allow_config_change=True), or "
            "sampler.allow_schedule_change = True before loading) to keep the saved schedule "
            "up to the resume point and use the new one after it."
        )
    point = (epoch, consumed)
    merged = [dict(e) for e in saved if entry_key(e) < point]  # what the positions read had
    governing = None
    if consumed > 0:  # the segment being read keeps its plan, whatever comes next
        governing = merged[-1]
        if governing["epoch"] != epoch:  # the epoch began with inherited weights
            governing = carried(governing, epoch, 0)
            merged.append(governing)
        if governing["plan_end"] is None:  # planned to the next declared change, as it was
            ends = [e["position"] for e in saved if _kind(e) == "declared" and e["epoch"] == epoch]
            governing["plan_end"] = min([*(p for p in ends if p >= consumed), owner.epoch_length])
    # from the point: the declared changes, then the saved online ones at their places
    ahead = {(*entry_key(e), False): dict(e) for e in now if entry_key(e) >= point}
    for e in saved:  # (a carry at the point gives way to what is in force there: see _cut)
        online = _kind(e) == "online"
        if (entry_key(e) > point and _kind(e) != "declared") or (entry_key(e) == point and online):
            ahead.setdefault((e["epoch"], e["position"], online), dict(e))
    if not any(k[:2] == point for k in ahead):
        _cut(owner, merged, ahead, (now, saved, declared), point, governing)
    return merged + [ahead[k] for k in sorted(ahead)]


def _cut(
    owner: Any,
    merged: Entries,
    ahead: dict[tuple[int, int, bool], dict[str, Any]],
    schedules: tuple[Entries, Entries, Entries],
    point: tuple[int, int],
    governing: dict[str, Any] | None,
) -> None:
    """Start what the new schedule has in force at ``point`` (nothing starts there yet).

    The weights in force are the latest of: this sampler's declared changes before the
    point (with none but the initial weights, an elastic resume that does not give passed
    phases again: the saved ones), and the saved online and carried changes. If they are
    the weights the saved schedule has there, the segment being read goes on with its plan,
    and past that plan's end (a saved change no longer declared) with a fresh one.
    """
    now, saved, declared = schedules
    epoch, consumed = point
    own = [(entry_key(e), 1, e) for e in now if entry_key(e) < point]
    passed = declared if len(own) == 1 else []
    candidates = [(entry_key(e), 0, e) for e in passed] + own
    # an online change counts where it was made, also when carried into a later epoch
    candidates += [(s, 2, e) for e in saved if (s := since(e)) is not None]
    in_force = max((c for c in candidates if c[0] < point), key=lambda c: c[:2])[2]
    current = merged[-1]  # the governing entry (the initial one is always before the point)

    if _key(in_force)[2:] != _key(current)[2:]:  # other weights there
        if _kind(in_force) == "declared" and _key(in_force) not in map(_key, declared):
            cut = dict(in_force, epoch=epoch, position=consumed, plan_end=None)  # a new phase
        else:
            cut = carried(in_force, epoch, consumed)
        ahead[(epoch, consumed, False)] = cut
    elif governing is not None:
        ends = [k[1] for k in ahead if k[0] == epoch]
        if governing["plan_end"] < min([*ends, owner.epoch_length]):
            start = governing["plan_end"]  # its plan ends before its segment does
            ahead[(epoch, start, False)] = carried(governing, epoch, start)
