"""How a resume treats a dataset that changed since its checkpoint: the policy and its decision.

:class:`DataChangePolicy` says, for each kind of change, what a resume does;
:func:`decide_change` compares the saved dataset (its length and pinned files) with the one
now and returns the :class:`~lightning_resumable_data.index.changes.DataChange` to record, or
refuses with the reason and the options. :class:`ChangeReport` counts what the change does to
the interrupted epoch.

Example:
    >>> decide_change(DataChangePolicy(), "DistributedSampler", 2, 40, 100, 120, [])
    DataChange(epoch=2, position=40, old_length=100, new_length=120, added_start=100, \
added_stop=120, removed_from=100)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lightning_resumable_data.index.changes import DataChange
from lightning_resumable_data.state import StateMismatchError

__all__ = [
    "ChangeReport",
    "DataChangePolicy",
    "changes_state",
    "decide_change",
    "loaded_changes",
    "source_change",
]

Grown = Literal["this_epoch", "next_epoch", "refuse"]
Shrunk = Literal["skip_removed", "refuse"]
Replaced = Literal["refuse", "remove_and_add"]
Sources = Literal["at_resume", "refuse"]


@dataclass(frozen=True)
class DataChangePolicy:
    """What a resume does when the training dataset changed since the checkpoint.

    Decided once, at the resume, from the saved and the current dataset, and recorded in the
    sampler's state: every later resume, on any world or batch size, replays it.

    Args:
        grown: The dataset has more samples (appended at the end: new shards or rows).
            ``"this_epoch"``: the interrupted epoch reads its unread old samples, then the
            new ones, each once; ``"next_epoch"``: the new samples join from the next epoch;
            ``"refuse"``: the resume raises.
        shrunk: The dataset has fewer samples (the last ones removed). ``"skip_removed"``:
            the removed samples are skipped where the interrupted epoch would have read them;
            every other unread sample is read once; ``"refuse"``: the resume raises.
        replaced: A pinned file's bytes changed (its size, ETag or version), so the same
            indices are other samples. ``"refuse"`` (the default) raises;
            ``"remove_and_add"``: the interrupted epoch's unread old samples are dropped (and
            counted) and the new dataset is read once in the rest of the epoch.
        sources: A mixture's weights changed, a source was removed (it weighs 0 from
            then on) or appended (it weighed 0 up to the resume; the epoch keeps its
            ``samples_per_epoch``). ``"at_resume"``: the new weights start at the resume
            position, as an online weight change (nothing skipped or repeated within a
            source's pass); ``"refuse"``: the resume raises.

    Example:
        >>> DataChangePolicy(grown="next_epoch").grown
        'next_epoch'
    """

    grown: Grown = "this_epoch"
    shrunk: Shrunk = "skip_removed"
    replaced: Replaced = "refuse"
    sources: Sources = "at_resume"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("grown", ("this_epoch", "next_epoch", "refuse")),
            ("shrunk", ("skip_removed", "refuse")),
            ("replaced", ("refuse", "remove_and_add")),
            ("sources", ("at_resume", "refuse")),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"DataChangePolicy({name}={value!r}): expected one of "
                    + ", ".join(repr(a) for a in allowed)
                    + "."
                )


@dataclass(frozen=True)
class ChangeReport:
    """What a change did to the interrupted epoch, in global samples."""

    change: DataChange
    unread_before: int  # samples the epoch had left to read under the old data
    removed: int  # of those, left out by the change
    added: int  # new samples appended to this epoch
    consumed: int = 0  # samples of the epoch read before the resume
    dropped: int = 0  # of those left, the tail drop_last leaves out in the resume's layout

    @property
    def left(self) -> int:
        """Samples of the epoch's order left from the resume on (before ``dropped``)."""
        return self.unread_before - self.removed + self.added

    def describe(self) -> str:
        """One paragraph for the log."""
        c = self.change
        what = (
            f"grew {c.old_length} -> {c.new_length}"
            if c.new_length > c.old_length
            else f"shrank {c.old_length} -> {c.new_length}"
            if c.new_length < c.old_length
            else f"was replaced ({c.new_length} samples)"
        )
        later = f"epochs after {c.epoch} read the {c.new_length} samples."
        if c.position == 0:
            return f"The training data {what}; epoch {c.epoch} and later read the new data."
        tail = (
            f" With drop_last, the last {self.dropped} of them, which do not fill a step, are "
            "dropped, as at any epoch's end."
            if self.dropped
            else ""
        )
        return (
            f"The training data {what} since the checkpoint (epoch {c.epoch}, after "
            f"{self.consumed} samples of it). Epoch {c.epoch} now reads its "
            f"{self.unread_before - self.removed} unread old samples, leaves out "
            f"{self.removed} removed ones and adds {self.added} new ones, each once; {later}"
            f"{tail}"
        )


def decide_change(
    policy: DataChangePolicy | None,
    kind: str,
    epoch: int,
    position: int,
    old_length: int,
    new_length: int,
    changed_files: Sequence[str],
) -> DataChange | None:
    """The change to record for a resume at base ``position`` of ``epoch``; ``None`` if none.

    Raises:
        StateMismatchError: The policy (or ``None``: no policy) refuses the change.
    """
    if old_length == new_length and not changed_files:
        return None
    prefix = f"Cannot load this state into {kind}: the dataset"
    if changed_files:
        listed = ", ".join(repr(f) for f in changed_files[:5])
        kind_of = "replaced"
        allowed = policy is not None and policy.replaced == "remove_and_add"
        reason = f"{prefix}'s files changed since the checkpoint ({listed})"
        option = "DataChangePolicy(replaced='remove_and_add')"
        added, removed_from = (0, new_length), 0
    elif new_length > old_length:
        kind_of = "grown"
        allowed = policy is not None and policy.grown != "refuse"
        reason = f"{prefix} grew from {old_length} to {new_length} samples"
        option = "DataChangePolicy(grown='this_epoch') (or grown='next_epoch')"
        late = policy is not None and policy.grown == "next_epoch"
        added, removed_from = (old_length, old_length if late else new_length), old_length
    else:
        kind_of = "shrunk"
        allowed = policy is not None and policy.shrunk != "refuse"
        reason = f"{prefix} shrank from {old_length} to {new_length} samples"
        option = "DataChangePolicy(shrunk='skip_removed')"
        added, removed_from = (new_length, new_length), new_length
    if not allowed:
        raise StateMismatchError(
            f"{reason}, and the {kind_of} data is refused"
            + (" (no DataChangePolicy)" if policy is None else f" ({policy!r})")
            + ". Restore the saved data, or accept the change with "
            f"data_changes={option} (ResumableDataModule(data_changes=...) or the sampler's "
            "data_changes attribute; docs/changes.md)."
        )
    if position == 0:
        return DataChange(epoch, 0, old_length, new_length, new_length, new_length, new_length)
    return DataChange(epoch, position, old_length, new_length, *added, removed_from)


def changes_state(changes: Sequence[DataChange]) -> list[list[int]]:
    """The changes as plain lists, for a state dict."""
    return [list(change) for change in changes]


def loaded_changes(state: object, kind: str) -> list[DataChange]:
    """The changes a state records (none if absent), checked.

    Raises:
        StateMismatchError: ``changes`` is not a list of 7 non-negative ints each, in order.
    """
    value: Any = state.get("changes") if isinstance(state, dict) else None
    if value is None:
        return []
    found: list[DataChange] = []
    for entry in value if isinstance(value, list) else [value]:
        ok = (
            isinstance(entry, (list, tuple))
            and len(entry) == 7
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in entry)
        )
        if ok:
            change = DataChange(*entry)
            ok = change.added_start <= change.added_stop <= change.new_length and (
                not found
                or (found[-1].epoch, found[-1].position) <= (change.epoch, change.position)
            )
        if not ok:
            raise StateMismatchError(
                f"Cannot load this state into {kind}: a 'changes' entry must be [epoch, "
                "position, old_length, new_length, added_start, added_stop, removed_from] of "
                f"non-negative ints, in order, got {entry!r:.200}. The state is corrupted."
            )
        found.append(change)
    return found


def source_change(saved: Mapping[str, int], now: Mapping[str, int]) -> tuple[str, str]:
    """How a mixture's sources (name: size, in order) changed, and why it is refused.

    ``("same" | "added" | "removed", "")`` for the changes a resume follows exactly: the
    saved sources, each with its size, with new ones appended after them or with some left
    out (not both); ``("refused", why)`` for any other.

    Example:
        >>> source_change({"web": 4}, {"web": 4, "math": 1})
        ('added', '')
        >>> source_change({"web": 4, "code": 2}, {"code": 2, "web": 4})[0]
        'refused'
    """
    kept = [name for name in now if name in saved]
    added = [name for name in now if name not in saved]
    removed = [name for name in saved if name not in now]
    resized = [name for name in kept if saved[name] != now[name]]
    if resized:
        sizes = [saved[n] for n in resized], [now[n] for n in resized]
        return "refused", f"sources {resized} changed size ({sizes[0]} -> {sizes[1]})"
    if kept != [name for name in saved if name in now] or list(now)[: len(kept)] != kept:
        return "refused", (
            "the sources are in another order; new sources resume exactly only appended "
            "after the saved ones"
        )
    if added and removed:
        return "refused", (
            f"sources {added} added and {removed} removed in one resume; add and remove "
            "sources in two resumes"
        )
    return ("added" if added else "removed" if removed else "same"), ""
