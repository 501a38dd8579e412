"""Mixture schedules: phases (weights from a step or epoch on) and the saved schedule's checks.

A :class:`MixturePhase` is what a user writes; the sampler turns phases into weight changes
at exact (epoch, position) entries of its schedule, which is saved with its state. On load,
:func:`check_schedule` validates the saved entries and :func:`reconcile_schedule` merges
them with the schedule configured in the resuming process.

Example:
    >>> MixturePhase(start_epoch=2, weights={"web": 1.0}).start_epoch
    2
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_resumable_data.index.mixture import check_weights, mixture_probabilities
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.state import StateMismatchError

__all__ = ["MixturePhase", "check_phases", "check_schedule", "reconcile_schedule"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MixturePhase:
    """Weights from a training step (or epoch) on: one phase of a mixture schedule.

    Exactly one of ``start_step`` (global optimizer-step count) and ``start_epoch`` is set.

    Example:
        >>> phase = MixturePhase(start_step=1000, weights={"web": 0.7, "code": 0.3})
        >>> phase.start_step, phase.weights, phase.temperature
        (1000, {'web': 0.7, 'code': 0.3}, 1.0)
    """

    start_step: int | None = None
    start_epoch: int | None = None
    weights: Mapping[str, float] = field(default_factory=dict)
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if (self.start_step is None) == (self.start_epoch is None):
            raise ValueError(
                f"MixturePhase(start_step={self.start_step}, start_epoch={self.start_epoch}) "
                "needs exactly one of start_step and start_epoch."
            )
        start = self.start_step if self.start_step is not None else self.start_epoch
        check_non_negative_int(
            "start_step" if self.start_step is not None else "start_epoch", start
        )
        if not isinstance(self.weights, Mapping) or not self.weights:
            raise ValueError(
                f"MixturePhase weights={self.weights!r} must be a non-empty mapping of source "
                "names to weights."
            )
        check_weights(list(self.weights.values()), list(self.weights))
        mixture_probabilities([1.0], self.temperature)  # validates the temperature
        object.__setattr__(self, "weights", dict(self.weights))


def check_phases(phases: Sequence[MixturePhase]) -> None:
    """Raise ``ValueError`` unless phases are of one kind and strictly increasing.

    Example:
        >>> check_phases([MixturePhase(start_step=0, weights={"a": 1}),
        ...               MixturePhase(start_step=10, weights={"a": 1})])
    """
    by_step = {p.start_step is not None for p in phases}
    if len(by_step) > 1:
        raise ValueError("phases mix start_step and start_epoch; use one kind for all.")
    starts = [p.start_step if p.start_step is not None else p.start_epoch for p in phases]
    for before, after in itertools.pairwise(starts):
        if after is None or before is None or after <= before:
            raise ValueError(
                f"phases must start in strictly increasing order, got starts {starts}; "
                "sort them and merge phases that start at the same step."
            )


def reconcile_schedule(
    owner: Any, saved: list[dict[str, Any]], epoch: int, consumed: int
) -> list[dict[str, Any]]:
    """Check ``owner``'s schedule against the saved one (it must be a prefix); the merge.

    Changes installed before loading (phases) must match the saved run's; changes made
    later in that run (``update_weights`` while training) come with the state. With
    ``allow_schedule_change``, the saved schedule is kept up to the resume point and this
    sampler's changes apply after it.
    """

    def key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
        return (entry["epoch"], entry["position"], entry["weights"], entry["temperature"])

    now = owner._schedule
    mismatch = next(
        (i for i, (a, b) in enumerate(zip(now, saved, strict=False)) if key(a) != key(b)),
        len(saved) if len(now) > len(saved) else None,
    )
    if mismatch is None:
        return saved
    if not owner.allow_schedule_change:
        shown_saved = key(saved[mismatch]) if mismatch < len(saved) else "none"
        raise StateMismatchError(
            f"Cannot load this state into {owner.KIND}: the mixture schedule differs from "
            f"the saved one at change #{mismatch}: saved {shown_saved}, now "
            f"{key(now[mismatch])} (epoch, position, weights, temperature). The resumed "
            "run would not mix what the interrupted run mixed. Restore the saved phases, "
            "or set allow_schedule_change=True to keep the saved schedule up to the "
            "resume point and use the new one after it."
        )
    point = (epoch, consumed)
    merged = [dict(e) for e in saved if (e["epoch"], e["position"]) <= point]
    if consumed > 0:  # the segment being read keeps its plan, whatever comes next
        governing = merged[-1]
        if governing["epoch"] != epoch:  # the epoch began with inherited weights
            governing = dict(governing, epoch=epoch, position=0, plan_end=None)
            merged.append(governing)
        if governing["plan_end"] is None:
            later = [
                e["position"] for e in saved if e["epoch"] == epoch and e["position"] > consumed
            ]
            governing["plan_end"] = min([*later, owner.epoch_length])
    merged += [e for e in now if (e["epoch"], e["position"]) > point]
    return merged


def check_schedule(owner: Any, schedule: object) -> list[dict[str, Any]]:
    """Validate a saved schedule with ``owner``'s rules (weights, order, ``plan_end``)."""
    prefix = f"Cannot load this state into {owner.KIND}:"
    if not isinstance(schedule, list) or not schedule:
        raise StateMismatchError(
            f"{prefix} its 'schedule' is missing or empty; the state is truncated or corrupted."
        )
    checked: list[dict[str, Any]] = []
    try:
        for entry in schedule:
            epoch = check_non_negative_int("epoch", entry["epoch"])
            position = check_non_negative_int("position", entry["position"])
            fresh = owner._entry(epoch, position, entry["weights"], entry["temperature"])
            plan_end = entry.get("plan_end")
            if plan_end is not None:
                check_non_negative_int("plan_end", plan_end)
                if not position < plan_end <= owner.epoch_length:
                    raise ValueError(
                        f"plan_end={plan_end} must be in ({position}, {owner.epoch_length}]"
                    )
            fresh["plan_end"] = plan_end
            if checked and (epoch, position) <= (checked[-1]["epoch"], checked[-1]["position"]):
                raise ValueError(f"change at (epoch {epoch}, position {position}) is out of order")
            checked.append(fresh)
    except (KeyError, TypeError, ValueError) as error:
        raise StateMismatchError(f"{prefix} its schedule entry is invalid ({error}).") from None
    return checked
