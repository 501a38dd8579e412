"""A mixture resumed under other weights (or with a source removed): a recorded change.

A :class:`~lightning_resumable_data.MixtureSampler` built with other initial weights than
the state it loads was saved with (the DataModule's ``weights`` changed, or a source was
removed and so weighs 0) is, under a :class:`~lightning_resumable_data.DataChangePolicy`
that allows it, loaded under the saved weights; the new ones then start at the resume
position as an online weight change. The change is in the schedule the state saves, so
every later resume replays it, and only the source sequence after it changes: nothing is
skipped or repeated within a source's pass.

Example:
    >>> from lightning_resumable_data import MixtureDataset, MixtureSampler
    >>> mix = MixtureDataset({"web": range(30), "code": range(10)})
    >>> before = MixtureSampler(mix, [1.0, 1.0], 1, 0, samples_per_epoch=40)
    >>> state = before.state_at(0, 8)
    >>> after = MixtureSampler(mix, [3.0, 1.0], 1, 0, samples_per_epoch=40)
    >>> after.data_changes = DataChangePolicy()
    >>> after.load_state_dict(state)
    >>> after.weights_at(0, 8)
    {'web': 0.75, 'code': 0.25}
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.samplers._mixture_plan import MixturePlan
from lightning_resumable_data.samplers.data_changes import DataChangePolicy
from lightning_resumable_data.state import StateMismatchError, _normalise

if TYPE_CHECKING:
    from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = [
    "DataChangePolicy",
    "apply_reweight",
    "changes_state",
    "configured",
    "reweighted",
    "saved_initial",
]

_log = logging.getLogger("lightning_resumable_data")


@contextmanager
def reweighted(sampler: MixtureSampler, state: Any) -> Iterator[Any]:
    """Load ``state`` (the body) under its own initial weights if the policy accepts new ones.

    The new weights then start at the restored position; if the body raises, the sampler
    is left as it was. Yields ``state``.
    """
    built = sampler.built_initial  # the weights this sampler was made with: the ones wanted
    saved = saved_initial(sampler, state)
    target = built if saved is None else saved
    before = None if _same(sampler._initial, target) else load_under(sampler, target)
    try:
        yield state
        last = None if saved is None else configured(state, saved, sampler.KIND)
    except BaseException:
        if before is not None:
            sampler._initial, sampler._plan = before
        raise
    if last is not None and not _same(last, built):
        apply_reweight(sampler, built)


def configured(state: Mapping[str, Any], initial: dict[str, Any], kind: str) -> dict[str, Any]:
    """The weights the configuration asked for at the state's last resume (``"configured"``).

    The initial weights unless a resume changed them: a weight change made online while
    training (``update_weights``) is not a change of the configuration, so a resume under
    the configured weights keeps it, and one under other weights replaces it.

    Raises:
        StateMismatchError: A malformed ``"configured"``.
    """
    saved = state.get("configured")
    if saved is None:
        return initial
    weights = saved.get("weights") if isinstance(saved, Mapping) else None
    temperature = saved.get("temperature") if isinstance(saved, Mapping) else None
    if (
        isinstance(weights, list)
        and len(weights) == len(initial["weights"])
        and all(isinstance(w, (int, float)) and w >= 0 for w in weights)
        and isinstance(temperature, (int, float))
        and temperature > 0
    ):
        return {"weights": [float(w) for w in weights], "temperature": float(temperature)}
    raise StateMismatchError(
        f"Cannot load this state into {kind}: its 'configured' ({saved!r}) must hold the "
        f"weights ({len(initial['weights'])}) and temperature a resume configured; the "
        "state is corrupted."
    )


def changes_state(sampler: MixtureSampler) -> dict[str, Any]:
    """The state keys of the changes made at resumes: ``configured``, ``sources_added``."""
    out: dict[str, Any] = {}
    if not _same(sampler.built_initial, sampler._initial):
        out["configured"] = dict(sampler.built_initial)
    if sampler._plan.added:
        out["sources_added"] = [list(a) for a in sampler._plan.added]
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return bool(_normalise(a) == _normalise(b))


def saved_initial(sampler: MixtureSampler, state: object) -> dict[str, Any] | None:
    """The state's initial weights if only they differ and the policy accepts a reweight."""
    policy = sampler.data_changes
    if policy is None or policy.sources == "refuse" or not isinstance(state, Mapping):
        return None
    saved, now = state.get("fingerprint"), sampler.fingerprint
    if not isinstance(saved, Mapping) or not isinstance(saved.get("initial"), Mapping):
        return None
    others = [k for k in set(saved) | set(now) if k != "initial"]
    if any(_normalise(saved.get(k)) != _normalise(now.get(k)) for k in others):
        return None  # another mixture: the usual checks refuse it
    initial = saved["initial"]
    weights, temperature = initial.get("weights"), initial.get("temperature")
    if not isinstance(weights, list) or not isinstance(temperature, (int, float)):
        return None
    return {"weights": [float(w) for w in weights], "temperature": float(temperature)}


def load_under(sampler: MixtureSampler, initial: dict[str, Any]) -> tuple[Any, Any]:
    """Rebuild ``sampler``'s plan from ``initial``; return what to restore on failure."""
    before = sampler._initial, sampler._plan
    config = sampler._plan.config
    sampler._initial = dict(initial)
    first = config.entry(0, 0, initial["weights"], initial["temperature"])
    sampler._plan = MixturePlan(config, first)
    return before


def apply_reweight(sampler: MixtureSampler, wanted: dict[str, Any]) -> None:
    """Start ``wanted`` at the restored position (unless already in force there); log it."""
    epoch, position = sampler.epoch, sampler.consumed
    new = mixture_probabilities(wanted["weights"], wanted["temperature"]).tolist()
    old = sampler._plan.weights_at(epoch, position)
    if np.allclose(old, new, rtol=0, atol=1e-12):
        return  # replayed from the state: a later resume of the same change
    length = sampler.epoch_length
    left_before = sampler._plan.counts(epoch, length) - sampler._plan.counts(epoch, position)
    sampler.update_weights(
        wanted["weights"], wanted["temperature"], epoch=epoch, position=position, kind="online"
    )
    left_after = sampler._plan.counts(epoch, length) - sampler._plan.counts(epoch, position)
    names = sampler.mixture.names
    entry = sampler._plan.schedule[sampler._plan.governing(epoch, position)]
    report = {
        "epoch": epoch,
        "position": position,
        "weights": list(entry["weights"]),  # as the schedule holds them (a run's history too)
        "temperature": entry["temperature"],
        "before": dict(zip(names, old, strict=True)),
        "after": dict(zip(names, new, strict=True)),
        "left_before": dict(zip(names, left_before.tolist(), strict=True)),
        "left_after": dict(zip(names, left_after.tolist(), strict=True)),
        "added": _appended_here(sampler, epoch, position),
    }
    logged = report == sampler.last_reweight  # Lightning loads a state twice: said once
    sampler.last_reweight = report
    if sampler.rank == 0 and not logged:
        _log.info(describe_reweight(report))


def _appended_here(sampler: MixtureSampler, epoch: int, position: int) -> list[str]:
    """The sources the last addition appended, if it was made at ``position`` of ``epoch``."""
    added = sampler._plan.added
    if not added or tuple(added[-1][:2]) != (epoch, position):
        return []
    return list(sampler.mixture.names[added[-1][2] :])


def describe_reweight(report: Mapping[str, Any]) -> str:
    """One paragraph for the log: the weights and each source's draws left in the epoch."""
    parts = [
        f"{name} {report['before'][name]:.3g} -> {report['after'][name]:.3g} "
        f"({report['left_before'][name]} -> {report['left_after'][name]} draws left)"
        for name in report["after"]
    ]
    removed = [n for n, p in report["after"].items() if p == 0 and report["before"][n] > 0]
    gone = f" (removed or weighing 0 now: {', '.join(removed)})" if removed else ""
    if report.get("added"):
        gone = f" (added to the mixture: {', '.join(report['added'])})" + gone
    return (
        f"The mixture's weights changed since the checkpoint{gone}; from epoch "
        f"{report['epoch']}, sample {report['position']} on: " + ", ".join(parts) + ". Draws "
        "a source no longer makes in this epoch are not made; each source is still read in "
        "whole passes, a sample repeated only by the next pass."
    )
