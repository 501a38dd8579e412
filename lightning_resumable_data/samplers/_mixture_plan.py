"""A mixture sampler's schedule of weight changes and the plan of segments it gives each epoch.

The schedule is the list of entries (:mod:`~lightning_resumable_data.samplers.schedule`):
weights from an (epoch, position) on. :class:`MixturePlan` holds it, adds changes to it, and
cuts an epoch into :class:`~lightning_resumable_data.samplers._mixture_draw.Segment` objects
at its changes (cached per epoch, extended in O(1) by a change appended at its end). A
loaded state's :class:`Anchor` lets a resume plan an epoch from its resume point on.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.samplers._mixture_added import Added, check_added
from lightning_resumable_data.samplers._mixture_config import MixtureConfig, Weights
from lightning_resumable_data.samplers._mixture_draw import Segment, handed_on, make_segment
from lightning_resumable_data.samplers.schedule import carried, entry_key
from lightning_resumable_data.state import StateMismatchError

__all__ = ["Anchor", "MixturePlan"]


@dataclass(frozen=True, slots=True)
class Anchor:
    """Where a loaded epoch's plan may start: a segment's start and its ``Segment`` counts.

    Saved with the state (``"segment"``), so that a resume builds the segments from the
    resume point on, not every segment of the epoch (10**4 online changes: 10**4 segments).
    """

    epoch: int
    start: int
    drawn: NDArray[np.int64]


class MixturePlan:
    """The schedule of weight changes in force, and each epoch's segments under it.

    Example:
        >>> from lightning_resumable_data.samplers._mixture_config import SourceSizes
        >>> config = MixtureConfig(SourceSizes(("a", "b"), (5, 5)), 0, 10)
        >>> plan = MixturePlan(config, config.entry(0, 0, [1.0, 1.0], 1.0))
        >>> plan.add(config.entry(0, 4, [1.0, 0.0], 1.0), started=False)
        >>> [(s.start, s.stop) for s in plan.segments(0, 0)]
        [(0, 4), (4, 10)]
    """

    def __init__(self, config: MixtureConfig, first: dict[str, Any]) -> None:
        self.config = config
        self.schedule: list[dict[str, Any]] = [first]
        self.plans: dict[int, list[Segment]] = {}
        self.anchor: Anchor | None = None  # a loaded epoch's plan starts here (see segments)
        self.added: Added = []  # sources appended at a resume (_mixture_added)

    def governing(self, epoch: int, position: int) -> int:
        """Index of the entry in force at ``position`` of ``epoch`` (-1: none)."""
        return bisect.bisect_right(self.schedule, (epoch, position), key=entry_key) - 1

    def change(
        self,
        epoch: int,
        position: int,
        weights: Weights,
        temperature: float | None,
        kind: str,
    ) -> dict[str, Any]:
        """The checked entry of a change; temperature ``None``: the one in force there."""
        governing = self.schedule[max(0, self.governing(epoch, position))]
        temperature = governing["temperature"] if temperature is None else temperature
        return self.config.entry(epoch, position, weights, temperature, kind)

    def weights_at(self, epoch: int, position: int) -> list[float]:
        """The probabilities (after temperature) in force at a position of an epoch."""
        entry = self.schedule[self.governing(epoch, position)]
        probabilities: list[float] = mixture_probabilities(
            entry["weights"], entry["temperature"]
        ).tolist()
        return probabilities

    def _find(self, entry: dict[str, Any]) -> tuple[int, bool]:
        """The entry in force at ``entry``'s start, and whether it is at the same place.

        An online change at a declared entry's position goes after it, not over it.
        """
        epoch, position = entry_key(entry)
        index = self.governing(epoch, position)
        same = (
            index >= 0
            and entry_key(self.schedule[index]) == (epoch, position)
            and (self.schedule[index]["kind"] == "online") == (entry["kind"] == "online")
        )
        return index, same

    def scheduled(self, entry: dict[str, Any]) -> bool:
        """Whether ``entry`` is in the schedule already (e.g. restored from a checkpoint)."""
        index, same = self._find(entry)
        governing = self.schedule[index]
        pair = (governing["weights"], governing["temperature"])
        return same and pair == (entry["weights"], entry["temperature"])

    def add(self, entry: dict[str, Any], started: bool) -> None:
        """Add (or replace at its place) ``entry``; ``started``: its epoch is being read."""
        epoch, position = entry_key(entry)
        index, same = self._find(entry)
        last = self.schedule[-1]
        if entry["kind"] == "declared" and (epoch, position) < entry_key(last):
            raise ValueError(
                f"update_weights(epoch={epoch}, position={position}) comes before the last "
                f"change (epoch {last['epoch']}, position {last['position']}); add changes in "
                "order (online changes, kind='online', may come before declared phases)."
            )
        if not same and entry["kind"] != "online" and started:
            self._freeze_segment_at(epoch, position)  # the positions read keep their plan
            index = self.governing(epoch, position)
        tail = index == len(self.schedule) - 1
        if same:
            self.schedule[index] = entry
        else:
            self.schedule.insert(index + 1, entry)
        if tail and self._can_extend(epoch, position):
            self._extend(epoch, entry)
        else:
            self.plans.clear()

    def _freeze_segment_at(self, epoch: int, position: int) -> None:
        """Pin the plan ends that a declared change at ``position`` would move.

        Segments are planned up to the next declared change: the one it cuts, and the online
        changes' before it back to the last declared change, keep their ends (``plan_end``).
        """
        length = self.config.epoch_length
        if position == 0 or position >= length:
            return
        index = self.governing(epoch, position)
        if self.schedule[index]["epoch"] != epoch:  # the epoch starts with inherited weights
            index += 1
            self.schedule.insert(index, carried(self.schedule[index - 1], epoch, 0))
        later = self.schedule[index + 1 :]  # what segments() plans these segments up to:
        ends = [e["position"] for e in later if e["kind"] == "declared" and e["epoch"] == epoch]
        following = ends[0] if ends else length
        for entry in reversed(self.schedule[: index + 1]):
            if entry["epoch"] != epoch:
                break
            if entry["plan_end"] is None:
                entry["plan_end"] = following
            if entry["kind"] != "online":
                break

    def segments(self, epoch: int, at: int) -> list[Segment]:
        """The segments of ``epoch`` from the one holding position ``at`` (or earlier) on.

        A plan starts at the epoch's beginning, or at a loaded state's anchor (the segment
        of the resume point) when ``at`` is not before it: a resume after many changes
        builds only the segments from there on.
        """
        plan = self.plans.get(epoch)
        if plan is not None and plan[0].start <= at:
            return plan
        length, seed = self.config.epoch_length, self.config.seed
        first = self.governing(epoch, 0)
        drawn = np.zeros(len(self.config.mixture.names), dtype=np.int64)
        anchor = self.anchor
        if anchor is not None and anchor.epoch == epoch and 0 < anchor.start <= at:
            first = self.governing(epoch, anchor.start)
            drawn = anchor.drawn
        last = bisect.bisect_left(self.schedule, (epoch, length), key=entry_key)
        entries = [self.schedule[first], *self.schedule[first + 1 : last]]
        # Online changes only cut segments: each is planned up to the next declared change.
        planned, following = [], length
        for entry in reversed(entries):
            planned.append(following)
            if entry["kind"] == "declared" and entry["epoch"] == epoch:
                following = entry["position"]
        planned.reverse()
        plan = []
        for i, entry in enumerate(entries):
            stop = entries[i + 1]["position"] if i + 1 < len(entries) else length
            plan.append(make_segment(seed, epoch, entry, stop, drawn, planned[i], self.added))
            drawn = handed_on(plan[-1])
        self.plans = {epoch: plan}
        return plan

    def _can_extend(self, epoch: int, position: int) -> bool:
        """Whether a change appended at ``position`` can extend the cached plan in O(1)."""
        plan = self.plans.get(epoch)
        if plan is None or position < plan[0].start:
            return False
        if position >= self.config.epoch_length:
            return True  # past this epoch's end: its plan is unchanged
        index = self.governing(epoch, position)
        before, online = self.schedule[index - 1], self.schedule[index]["kind"] == "online"
        frozen = before["plan_end"] is not None and before["epoch"] == epoch
        return (online or frozen) and plan[-1].start < position

    def _extend(self, epoch: int, entry: dict[str, Any]) -> None:
        """Cut the cached plan's last segment at ``entry`` and append ``entry``'s segment."""
        plan, length = self.plans[epoch], self.config.epoch_length
        if entry["position"] >= length:
            return
        plan[-1].stop = entry["position"]
        drawn = handed_on(plan[-1])
        seed, added = self.config.seed, self.added
        plan.append(make_segment(seed, epoch, entry, length, drawn, length, added))

    def counts(self, epoch: int, consumed: int) -> NDArray[np.int64]:
        """Draws of each source in positions ``[0, consumed)`` of ``epoch``: one segment's."""
        plan = self.segments(epoch, consumed)
        index = max(0, bisect.bisect_right(plan, consumed, key=lambda s: s.start) - 1)
        segment = plan[index]
        upto = max(0, min(consumed, segment.stop) - segment.start)
        return segment.drawn + segment.arrangement.counts_before(upto)

    def anchor_state(self, epoch: int, consumed: int) -> dict[str, Any] | None:
        """The state's ``"segment"``: where a resume at ``consumed`` plans from (``None``: 0)."""
        segment: Segment | None = None
        if 0 < consumed < self.config.epoch_length:  # where a resume's plan starts (Anchor)
            plan = self.segments(epoch, consumed)
            segment = plan[bisect.bisect_right(plan, consumed, key=lambda s: s.start) - 1]
        if segment is not None and segment.start > 0:
            return {"start": segment.start, "drawn": segment.drawn.tolist()}
        return None

    def load(
        self,
        schedule: list[dict[str, Any]],
        state: dict[str, Any],
        kind: str,
        load_position: Callable[[dict[str, Any]], None],
    ) -> None:
        """Install a loaded (checked) ``schedule`` and the state's anchor, then the position.

        ``load_position`` loads the rest of ``state``; if it or the anchor is refused, the
        schedule in force before is restored.
        """
        previous, self.schedule = (self.schedule, self.added), schedule
        try:
            self.added = check_added(state, len(self.config.mixture.names), kind)
            anchor = self.load_anchor(state, kind)  # builds the plan from the anchor on
            load_position(state)
        except BaseException:
            self.schedule, self.added = previous
            self.plans.clear()
            raise
        self.anchor = anchor
        if anchor is None:
            self.plans.clear()

    def load_anchor(self, state: Mapping[str, Any], kind: str) -> Anchor | None:
        """The saved segment of the resume point, checked against the saved counts.

        ``None`` (plan the epoch from its start) for a state without one. The check costs
        one segment: its counts up to the resume point must give the saved
        ``source_counts``, and its draws must cover its samples. The plan built from it
        stays cached.
        """
        saved, epoch, consumed = state.get("segment"), state["epoch"], state["consumed"]
        if saved is None:
            return None
        prefix = f"Cannot load this state into {kind}: its 'segment'"
        names, length = self.config.mixture.names, self.config.epoch_length
        try:
            start = check_non_negative_int("start", saved["start"])
            drawn = np.array([check_non_negative_int("drawn", v) for v in saved["drawn"]])
            counts = np.array([state["source_counts"][n] for n in names], dtype=np.int64)
        except (KeyError, TypeError, ValueError, OverflowError) as error:  # int64 overflow
            raise StateMismatchError(f"{prefix} is invalid ({error}).") from None
        shapes_ok = len(drawn) == len(names)
        if not (shapes_ok and 0 < start <= consumed < length):
            raise StateMismatchError(
                f"{prefix} (start {start}, {len(drawn)} sources) does not fit the resume "
                f"point {consumed} of {length} and {len(names)} sources; the "
                "state is corrupted."
            )
        anchor = Anchor(epoch, start, drawn.astype(np.int64))
        previous, self.anchor = self.anchor, anchor
        self.plans.clear()
        try:
            segment = self.segments(epoch, consumed)[0]
            upto = min(consumed, segment.stop) - segment.start
            counted = segment.drawn + segment.arrangement.counts_before(upto)
        finally:
            self.anchor = previous
        valid = (
            segment.start == start and int(drawn.sum()) == start and np.array_equal(counted, counts)
        )
        if not valid:
            raise StateMismatchError(
                f"{prefix} (start {start}, drawn {drawn.tolist()}) "
                f"does not agree with its schedule and source_counts {counts.tolist()}; the "
                "state is corrupted."
            )
        return anchor
