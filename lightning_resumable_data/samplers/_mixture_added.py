"""Sources appended to a mixture since its checkpoint: the state widened, the addition recorded.

A :class:`~lightning_resumable_data.MixtureSampler` whose sources are the saved ones (same
names and sizes, in the same order) followed by new ones loads, under a
:class:`~lightning_resumable_data.DataChangePolicy` that accepts changed sources, a state
saved before the new sources existed: each new source weighed 0 up to the resume position
(its place in the saved weights, schedule and counts is filled with 0), and the record
``[epoch, position, sources before]`` (the state's ``"sources_added"``) keeps every segment
that started before the addition arranged over the sources it had, so the positions already
read keep their draws. The weights the sampler was built with then start at the resume
position (:func:`~lightning_resumable_data.samplers._mixture_changes.reweighted`): the new
sources draw from there on, in passes of their own.

Example:
    >>> from lightning_resumable_data import DataChangePolicy, MixtureDataset, MixtureSampler
    >>> old = MixtureSampler(MixtureDataset({"web": range(30)}), [1.0], 1, 0,
    ...                      samples_per_epoch=40)
    >>> state = old.state_at(0, 8)
    >>> mix = MixtureDataset({"web": range(30), "math": range(10)})
    >>> new = MixtureSampler(mix, [1.0, 1.0], 1, 0, samples_per_epoch=40)
    >>> new.data_changes = DataChangePolicy()
    >>> new.load_state_dict(state)
    >>> new.source_counts(8), new.weights_at(0, 8)
    ({'web': 8, 'math': 0}, {'web': 0.5, 'math': 0.5})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lightning_resumable_data.samplers.data_changes import source_change
from lightning_resumable_data.state import StateMismatchError, _normalise

if TYPE_CHECKING:
    from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["Added", "check_added", "sources_at", "with_added_sources"]

Added = Sequence[tuple[int, int, int]]  # (epoch, position, sources before) of each addition

# What an addition may change in the fingerprint; the rest must be as saved.
_WIDENED = ("sources", "sizes", "initial")


def with_added_sources(sampler: MixtureSampler, state: object) -> object:
    """``state`` widened to ``sampler``'s sources if only sources were appended since.

    Any other state (no policy, or a policy that refuses changed sources, or sources that
    are not the saved ones plus new ones at the end) is returned as it is: the usual checks
    then accept or refuse it.

    Raises:
        StateMismatchError: Sources were appended, but the epoch's sample budget changed
            too (the interrupted epoch could not keep its positions).
    """
    policy = sampler.data_changes
    if policy is None or policy.sources == "refuse" or not isinstance(state, Mapping):
        return state
    saved = state.get("fingerprint")
    names, sizes = list(sampler.mixture.names), list(sampler.mixture.sizes)
    if not isinstance(saved, Mapping) or not _appended(saved, names, sizes):
        return state
    now = sampler.fingerprint
    others = [k for k in set(saved) | set(now) if k not in (*_WIDENED, "samples_per_epoch")]
    if any(_normalise(saved.get(k)) != _normalise(now.get(k)) for k in others):
        return state  # another seed, order law...: refused by the usual checks
    before = len(saved["sources"])
    new = names[before:]
    if saved.get("samples_per_epoch") != now["samples_per_epoch"]:
        raise StateMismatchError(
            f"Cannot load this state into {sampler.KIND}: sources {new} were added to the "
            f"mixture, and the epoch's sample budget changed with them "
            f"({saved.get('samples_per_epoch')} -> {now['samples_per_epoch']}; by default it "
            "is the sum of the sources' sizes). The interrupted epoch must keep its budget to "
            "keep the positions already read. Pass samples_per_epoch="
            f"{saved.get('samples_per_epoch')} (ResumableDataModule(samples_per_epoch=...)) "
            "to add them at the resume position (docs/changes.md)."
        )
    return _widened(state, saved, names, sizes, before)


def _appended(saved: Mapping[str, Any], names: list[str], sizes: list[int]) -> bool:
    """Whether ``names``/``sizes`` are the saved sources followed by at least one more."""
    old_names, old_sizes = saved.get("sources"), saved.get("sizes")
    if not (isinstance(old_names, list) and isinstance(old_sizes, list)) or not old_names:
        return False
    before = dict(zip(old_names, old_sizes, strict=False))
    return source_change(before, dict(zip(names, sizes, strict=True)))[0] == "added"


def _widened(
    state: Mapping[str, Any],
    saved: Mapping[str, Any],
    names: list[str],
    sizes: list[int],
    before: int,
) -> dict[str, Any]:
    """``state`` with a 0 for each new source wherever it lists one, and the addition."""
    extra = len(names) - before

    def padded(weights: object) -> object:
        return [*weights, *[0.0] * extra] if isinstance(weights, list) else weights

    widened = dict(state)
    initial = saved.get("initial")
    if isinstance(initial, Mapping):
        initial = {**initial, "weights": padded(initial.get("weights"))}
    widened["fingerprint"] = {**saved, "sources": names, "sizes": sizes, "initial": initial}
    schedule = state.get("schedule")
    if isinstance(schedule, list):
        widened["schedule"] = [
            {**e, "weights": padded(e.get("weights"))} if isinstance(e, Mapping) else e
            for e in schedule
        ]
    wanted = state.get("configured")
    if isinstance(wanted, Mapping):
        widened["configured"] = {**wanted, "weights": padded(wanted.get("weights"))}
    counts = state.get("source_counts")
    if isinstance(counts, Mapping):
        widened["source_counts"] = {**counts, **dict.fromkeys(names[before:], 0)}
    segment = state.get("segment")
    if isinstance(segment, Mapping) and isinstance(segment.get("drawn"), list):
        widened["segment"] = {**segment, "drawn": [*segment["drawn"], *[0] * extra]}
    recorded = state.get("sources_added", [])
    addition = [state.get("epoch"), state.get("consumed"), before]
    widened["sources_added"] = [*recorded, addition] if isinstance(recorded, list) else recorded
    return widened


def check_added(state: Mapping[str, Any], sources: int, kind: str) -> Added:
    """The state's ``"sources_added"``, checked: in order, each with fewer sources than now.

    Example:
        >>> check_added({"sources_added": [[0, 8, 1]]}, 2, "MixtureSampler")
        [(0, 8, 1)]
    """
    recorded = state.get("sources_added", [])
    checked: list[tuple[int, int, int]] = []
    problem = not isinstance(recorded, list)
    for item in recorded if not problem else []:
        values = item if isinstance(item, list) and len(item) == 3 else None
        if values is None or not all(type(v) is int and v >= 0 for v in values):
            problem = True
            break
        epoch, position, before = values
        last = checked[-1] if checked else (0, 0, 0)
        if not (last[2] < before < sources and (epoch, position) >= last[:2]):
            problem = True
            break
        checked.append((epoch, position, before))
    if problem:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: its 'sources_added' ({recorded!r}) must "
            f"list [epoch, position, sources before] in order, each with 1 to {sources - 1} "
            "sources before and fewer than the next; the state is corrupted."
        )
    return checked


def sources_at(added: Added, epoch: int, position: int, sources: int) -> int:
    """How many of the mixture's sources existed at ``position`` of ``epoch``.

    Example:
        >>> sources_at([(1, 8, 2)], 1, 7, 3), sources_at([(1, 8, 2)], 1, 8, 3)
        (2, 3)
    """
    for at_epoch, at_position, before in added:
        if (epoch, position) < (at_epoch, at_position):
            return before
    return sources
