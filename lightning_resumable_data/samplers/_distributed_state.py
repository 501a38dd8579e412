"""The state of a :class:`DistributedSampler`: what it saves, and the checks of one it loads.

Functions of the sampler's configuration (:class:`PositionOwner`): the sampler calls
:func:`position_state` to save and :func:`loaded_position` to validate a state before it
changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from lightning_resumable_data.index.partition import epoch_total_size
from lightning_resumable_data.index.skips import check_ranges
from lightning_resumable_data.pins import check_pins
from lightning_resumable_data.samplers._arguments import SEED_LIMIT
from lightning_resumable_data.samplers._cuts import Quarantine, check_quarantine, quarantine_state
from lightning_resumable_data.samplers.data_changes import changes_state
from lightning_resumable_data.state import StateMismatchError, check_state, make_state

Positions = Any  # an array of positions (or of dataset indices)

__all__ = [
    "PositionOwner",
    "epoch_position",
    "loaded_cuts",
    "loaded_position",
    "order_fingerprint",
    "position_state",
    "saved_data",
]


class PositionOwner(Protocol):
    """What the state of a sampler with one global position depends on."""

    KIND: ClassVar[str]

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the epoch's order depends on (apart from the epoch)."""

    @property
    def pins(self) -> Mapping[str, str]:
        """What identifies the bytes of the files the dataset reads."""

    @property
    def seed(self) -> int:
        """The seed of the order."""

    @property
    def epoch_length(self) -> int:
        """Length of the epoch's global order (before padding)."""

    @property
    def num_replicas(self) -> int:
        """The world size now."""

    @property
    def drop_last(self) -> bool:
        """Whether the ragged tail of an epoch is dropped."""

    @property
    def skips(self) -> Mapping[int, list[tuple[int, int]]]:
        """Skipped ranges of base positions, by epoch (``skip_positions``)."""

    @property
    def quarantined(self) -> Sequence[Quarantine]:
        """Quarantined samples, from where (``quarantine``)."""

    def cuts(self, epoch: int) -> list[tuple[int, int]]:
        """The base ranges ``epoch``'s order leaves out."""

    @property
    def epoch(self) -> int:
        """The current epoch."""

    @property
    def frontier(self) -> int:
        """Global position up to which the live iteration has computed the order."""

    def epoch_size(self, epoch: int | None = None) -> int:
        """Positions of an epoch's order that are read."""


def order_fingerprint(owner: Any) -> dict[str, Any]:
    """A single dataset's fingerprint: what its epoch order depends on besides the epoch."""
    return {
        "dataset_length": owner.dataset_length,
        "seed": owner.seed,
        "shuffle": owner.shuffle,
        "algorithm": owner.algorithm,
        "drop_last": owner.drop_last,
    }


def position_state(owner: PositionOwner, epoch: int, consumed: int) -> dict[str, Any]:
    """The state after ``consumed`` global samples of ``epoch``, with the fingerprint and pins.

    Example:
        >>> from types import SimpleNamespace
        >>> owner = SimpleNamespace(
        ...     KIND="K", fingerprint={}, pins={}, num_replicas=2, skips={}, quarantined=[]
        ... )
        >>> state = position_state(owner, 1, 4)
        >>> state["epoch"], state["consumed"], state["num_replicas"]
        (1, 4, 2)
    """
    state = make_state(
        owner.KIND,
        owner.fingerprint,
        epoch=epoch,
        consumed=consumed,
        num_replicas=owner.num_replicas,
    )
    if owner.pins:
        state["pins"] = dict(owner.pins)
    skips = [
        [e, start, stop]
        for e in sorted(owner.skips)
        if e >= epoch
        for start, stop in owner.skips[e]
    ]
    if skips:  # the epochs to come keep their skips; past ones are done with
        state["skips"] = skips
    if owner.quarantined:  # kept for every later epoch
        state["quarantine"] = quarantine_state(owner.quarantined)
    changes = getattr(owner, "changes", None)
    if changes:  # every epoch's order follows them (and lrd trace reads the past ones)
        state["changes"] = changes_state(changes)
    return state


def saved_data(owner: Any, state_dict: object) -> tuple[int, list[str]]:
    """The saved dataset's length and the pinned files that changed, if ``owner`` may follow.

    Without a policy (``owner.data_changes`` is ``None``), or when anything but the length
    differs in the fingerprint (a mixture's or sharded sampler's holds more than a length),
    it is the length now and no file: the usual checks then refuse what changed.
    """
    now = owner.dataset_length
    state = state_dict if isinstance(state_dict, Mapping) else {}
    saved = state.get("fingerprint")
    if owner.data_changes is None or not isinstance(saved, Mapping):
        return now, []
    length = saved.get("dataset_length")
    others = {k: v for k, v in saved.items() if k != "dataset_length"}
    current = {k: v for k, v in owner.fingerprint.items() if k != "dataset_length"}
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        return now, []
    if others != current:
        return now, []
    pins = state.get("pins")
    files = (
        [name for name, identity in sorted(pins.items()) if owner.pins.get(name) != identity]
        if isinstance(pins, Mapping)
        else []
    )
    return length, files


def loaded_cuts(
    state_dict: object, length: int, kind: str
) -> tuple[dict[int, list[tuple[int, int]]], list[Quarantine]]:
    """The skipped ranges (by epoch) and the quarantine a state holds (none if absent).

    Raises:
        StateMismatchError: ``skips`` is not a list of ``[epoch, start, stop]`` with sorted,
            disjoint ranges inside the epoch, or ``quarantine`` is malformed.
    """
    state = state_dict if isinstance(state_dict, Mapping) else {}
    by_epoch: dict[int, list[list[int]]] = {}
    try:
        for epoch, start, stop in state.get("skips") or ():
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
                raise ValueError(f"epoch {epoch!r} is not an epoch number")
            by_epoch.setdefault(epoch, []).append([start, stop])
        skips = {e: check_ranges(r, length, f"epoch {e}") for e, r in by_epoch.items()}
    except (TypeError, ValueError) as error:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: its 'skips' must be [[epoch, start, stop], "
            f"...] inside an epoch of {length} positions ({error}). The state is corrupted."
        ) from None
    try:
        quarantined = check_quarantine(state.get("quarantine") or [], length)
    except ValueError as error:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: its 'quarantine' is malformed: {error}. The "
            "state is corrupted."
        ) from None
    return skips, quarantined


def loaded_position(
    owner: PositionOwner,
    state_dict: dict[str, Any],
    fingerprint: Mapping[str, Any] | None = None,
    *,
    check_files: bool = True,
) -> tuple[int, int]:
    """Check ``state_dict`` against ``owner``'s configuration; its ``(epoch, consumed)``.

    ``consumed`` is the global position to resume at in the current layout: a position past
    the end of this layout's epoch (saved under a wider world) becomes that end.

    Raises:
        StateMismatchError: What :meth:`DistributedSampler.load_state_dict` refuses.
    """
    kind, drop_last = owner.KIND, owner.drop_last
    check_state(
        state_dict,
        kind,
        owner.fingerprint if fingerprint is None else fingerprint,
        {"epoch": int, "consumed": int, "num_replicas": int},
    )
    if check_files:
        check_pins(state_dict, kind, owner.pins)
    length = owner.epoch_size(state_dict["epoch"])  # what is read
    if owner.seed + state_dict["epoch"] >= SEED_LIMIT:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: epoch={state_dict['epoch']} with "
            f"seed={owner.seed} exceeds 2**64 - 1 (torch's seed range). The state is "
            "corrupted."
        )
    consumed, saved_replicas = state_dict["consumed"], state_dict["num_replicas"]
    if saved_replicas == 0:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: num_replicas=0; a state is saved "
            "by at least one rank. The state is corrupted."
        )
    limit = epoch_total_size(length, saved_replicas, drop_last)
    if consumed > limit:
        raise StateMismatchError(
            f"Cannot load this state into {kind}: consumed={consumed} is past the "
            f"end of an epoch of {length} samples over "
            f"num_replicas={saved_replicas} ranks (at most {limit}). The state is "
            "corrupted or belongs to another dataset."
        )
    return state_dict["epoch"], epoch_position(consumed, length, owner)


def epoch_position(consumed: int, length: int, owner: PositionOwner) -> int:
    """``consumed`` of an epoch that reads ``length`` samples, as the current layout reads it.

    An epoch with no real sample left reads nothing in any layout; past the end of this
    layout's epoch (a narrower resume), it is saved again as that end, so the state it saves
    loads here too.
    """
    if consumed >= length:
        return min(consumed, epoch_total_size(length, owner.num_replicas, owner.drop_last))
    return consumed
