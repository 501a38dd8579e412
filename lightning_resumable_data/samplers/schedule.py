"""Mixture schedules: phases (weights from a step or epoch on) and the saved schedule's checks.

A :class:`MixturePhase` is what a user writes; the sampler turns phases into weight changes
at exact (epoch, position) entries of its schedule, which is saved with its state. On load,
:func:`check_schedule` validates the saved entries, and
:func:`~lightning_resumable_data.samplers._schedule_merge.reconcile_schedule` merges them
with the schedule configured in the resuming process.

Example:
    >>> MixturePhase(start_epoch=2, weights={"web": 1.0}).start_epoch
    2
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_resumable_data.index.mixture import check_weights, mixture_probabilities
from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.state import StateMismatchError

__all__ = [
    "KINDS",
    "MixturePhase",
    "carried",
    "check_phases",
    "check_schedule",
    "compact_schedule",
    "entry_key",
    "phase_dict",
    "since",
]

# declared: the initial weights and phases (checked on resume); online: decided while
# training (replayed from the state); carry: an epoch's inherited weights, pinned, with
# "since": the (epoch, position) of the online change whose weights it carries (None: a
# declared change's; absent in states written before it: its own place).
KINDS = ("declared", "online", "carry")


def entry_key(entry: Mapping[str, Any]) -> tuple[int, int]:
    """Where a schedule entry starts: ``(epoch, position)``.

    Example:
        >>> entry_key({"epoch": 1, "position": 40})
        (1, 40)
    """
    return entry["epoch"], entry["position"]


def _kind(entry: Mapping[str, Any]) -> str:
    return str(entry.get("kind", "declared"))  # states written before kinds: all declared


def since(entry: Mapping[str, Any]) -> tuple[int, int] | None:
    """Where the online change whose weights ``entry`` applies was made; None if declared.

    Example:
        >>> online = {"epoch": 0, "position": 7, "kind": "online"}
        >>> since(online), since(dict(online, epoch=1, position=0, kind="carry", since=(0, 7)))
        ((0, 7), (0, 7))
    """
    kind = _kind(entry)
    if kind == "carry":
        origin = entry.get("since", entry_key(entry))
        return None if origin is None else (int(origin[0]), int(origin[1]))
    return entry_key(entry) if kind == "online" else None


def carried(entry: Mapping[str, Any], epoch: int, position: int) -> dict[str, Any]:
    """``entry``'s weights carried to ``(epoch, position)``: a fresh carry, planned afresh.

    Example:
        >>> declared = {"epoch": 0, "position": 0, "weights": [1.0], "kind": "declared"}
        >>> carried(declared, 2, 0)["kind"], carried(declared, 2, 0)["since"]
        ('carry', None)
    """
    origin = since(entry)
    return dict(
        entry,
        weights=list(entry["weights"]),
        epoch=epoch,
        position=position,
        plan_end=None,
        kind="carry",
        since=None if origin is None else list(origin),
    )


def compact_schedule(schedule: Sequence[Mapping[str, Any]], epoch: int) -> list[dict[str, Any]]:
    """The entries a state at ``epoch`` needs: declared ones, and those from ``epoch`` on.

    Online and carried changes of earlier epochs are dropped; the one in force at the
    epoch's start is carried to ``(epoch, 0)``. So a run with many online changes keeps a
    state proportional to the changes of one epoch.

    Example:
        >>> old = [{"epoch": 0, "position": 0, "weights": [1.0], "temperature": 1.0,
        ...         "plan_end": None, "kind": "declared"}]
        >>> old += [dict(old[0], position=p, kind="online") for p in (5, 9)]
        >>> [(e["epoch"], e["position"], e["kind"]) for e in compact_schedule(old, 1)]
        [(0, 0, 'declared'), (1, 0, 'carry')]
    """
    index = bisect.bisect_right(schedule, (epoch, 0), key=entry_key) - 1
    governing = schedule[index] if index >= 0 else None
    kept = [
        dict(e, weights=list(e["weights"]))
        for e in schedule[: index + 1]
        if _kind(e) == "declared" or e["epoch"] >= epoch
    ]
    if governing is not None and governing["epoch"] < epoch and _kind(governing) != "declared":
        kept.append(carried(governing, epoch, 0))
    kept += [dict(e, weights=list(e["weights"])) for e in schedule[index + 1 :]]
    return kept


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


def phase_dict(phase: MixturePhase) -> dict[str, Any]:
    """A phase as the plain dict that checkpoints save and a resume compares.

    Example:
        >>> phase_dict(MixturePhase(start_epoch=1, weights={"a": 1.0}))
        {'start_step': None, 'start_epoch': 1, 'weights': {'a': 1.0}, 'temperature': 1.0}
    """
    return {
        "start_step": phase.start_step,
        "start_epoch": phase.start_epoch,
        "weights": dict(phase.weights),
        "temperature": phase.temperature,
    }


def _follows(previous: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    """Whether ``entry`` may follow ``previous`` in a schedule.

    Later, or an online change at the position of a declared or carried one (the online
    change governs from there).
    """
    if entry_key(entry) != entry_key(previous):
        return entry_key(entry) > entry_key(previous)
    return _kind(entry) == "online" and _kind(previous) != "online"


def _all_valid(owner: Any, schedule: list[Any]) -> bool:
    """Whether every entry's weights and temperature pass ``owner._entry``'s checks.

    One array check for the whole schedule (10**4 online changes load in milliseconds);
    ``False`` sends the schedule through the entry-by-entry checks, which name the error.
    """
    width = len(owner.mixture.names)
    try:
        rows = [e["weights"] for e in schedule]
        temperatures = [e["temperature"] for e in schedule]
    except (KeyError, TypeError):
        return False
    plain = all(
        type(row) is list and len(row) == width and all(type(v) in (int, float) for v in row)
        for row in rows
    ) and all(type(t) in (int, float) for t in temperatures)
    if not plain:
        return False
    weights = np.array(rows, dtype=np.float64).reshape(len(rows), width)  # (entries, J)
    temps = np.array(temperatures, dtype=np.float64)
    empty = np.asarray(owner.mixture.sizes) == 0
    return bool(
        np.isfinite(weights).all()
        and (weights >= 0).all()
        and weights.any(axis=1).all()
        and not (weights[:, empty] > 0).any()
        and np.isfinite(temps).all()
        and (temps > 0).all()
    )


def _checked_since(origin: object, key: tuple[int, int]) -> list[int] | None:
    """A carry's ``since``: None, or an (epoch, position) pair not after the carry."""
    if origin is None:
        return None
    if not isinstance(origin, list | tuple) or len(origin) != 2:
        raise ValueError(f"since={origin!r} must be None or an (epoch, position) pair")
    pair = [check_non_negative_int("since", v) for v in origin]
    if tuple(pair) > key:
        raise ValueError(f"since={origin!r} must not be after the carry at {key}")
    return pair


def check_schedule(owner: Any, schedule: object) -> list[dict[str, Any]]:
    """Validate a saved schedule with ``owner``'s rules (weights, order, ``plan_end``)."""
    prefix = f"Cannot load this state into {owner.KIND}:"
    if not isinstance(schedule, list) or not schedule:
        raise StateMismatchError(
            f"{prefix} its 'schedule' is missing or empty; the state is truncated or corrupted."
        )
    checked: list[dict[str, Any]] = []
    valid = _all_valid(owner, schedule)
    try:
        for entry in schedule:
            epoch = check_non_negative_int("epoch", entry["epoch"])
            position = check_non_negative_int("position", entry["position"])
            if valid:  # what owner._entry returns, without checking each entry again
                fresh = {
                    "epoch": epoch,
                    "position": position,
                    "weights": [float(w) for w in entry["weights"]],
                    "temperature": float(entry["temperature"]),
                }
            else:
                fresh = owner._entry(epoch, position, entry["weights"], entry["temperature"])
            plan_end = entry.get("plan_end")
            if plan_end is not None:
                check_non_negative_int("plan_end", plan_end)
                if not position < plan_end <= owner.epoch_length:
                    raise ValueError(
                        f"plan_end={plan_end} must be in ({position}, {owner.epoch_length}]"
                    )
            fresh["plan_end"] = plan_end
            fresh["kind"] = _kind(entry)
            if fresh["kind"] not in KINDS:
                raise ValueError(f"kind={fresh['kind']!r} must be one of {list(KINDS)}")
            if fresh["kind"] == "carry" and "since" in entry:
                fresh["since"] = _checked_since(entry["since"], (epoch, position))
            if checked and not _follows(checked[-1], fresh):
                raise ValueError(f"change at (epoch {epoch}, position {position}) is out of order")
            checked.append(fresh)
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        raise StateMismatchError(f"{prefix} its schedule entry is invalid ({error}).") from None
    return checked
