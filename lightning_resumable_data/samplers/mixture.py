"""Weighted sampling over the sources of a :class:`MixtureDataset`, with exact phase changes."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.datasets.mixture import MixtureDataset
from lightning_resumable_data.index.mixture import (
    MAX_SEGMENT,
    Arrangement,
    arrangement,
    check_weights,
    mixture_probabilities,
    source_samples,
    target_counts,
)
from lightning_resumable_data.index.partition import rank_span, span_positions
from lightning_resumable_data.randomness import make_sample_keys
from lightning_resumable_data.samplers._chunks import ChunkStream
from lightning_resumable_data.samplers.distributed import DistributedSampler, check_non_negative_int
from lightning_resumable_data.samplers.schedule import (
    MixturePhase,
    check_phases,
    check_schedule,
    compact_schedule,
    entry_key,
    reconcile_schedule,
)
from lightning_resumable_data.state import StateMismatchError, check_state

__all__ = ["MixturePhase", "MixtureSampler", "check_phases"]

Weights = Mapping[str, float] | Sequence[float]

RANK_CHUNK: Final = 1 << 15  # positions of this rank computed ahead at a time, any world
ORDER: Final = "bisection-passes/3"  # the law (index.arrangement, index.passes), in the state
# Laws of earlier releases, refused with how to finish such a run.
_RETIRED_ORDERS: Final = {
    "blocks-leaves-feistel/2": (
        "its mixture order ('blocks-leaves-feistel/2') skipped the unread draws of a leaf at "
        "every online weight change and shuffled up to 2**20 positions of draws together; "
        "this release reads each source strictly in passes ('bisection-passes/3'), so "
        "resuming here would continue a different order. Finish that run with the release "
        "that wrote it (pip install 'lightning-resumable-data<0.3'), or start a fresh run "
        "(the model weights of the checkpoint can be loaded into it without the data state)"
    ),
}


@dataclass(slots=True)
class _Segment:
    start: int
    stop: int
    counts: NDArray[np.int64]  # samples per source over the planned length
    key: tuple[int, int, int]
    arrangement: Arrangement
    drawn: NDArray[np.int64]  # draws of each source in the epoch's positions [0, start)


@dataclass(frozen=True, slots=True)
class _Anchor:
    """Where a loaded epoch's plan may start: a segment's start and its ``_Segment`` counts.

    Saved with the state (``"segment"``), so that a resume builds the segments from the
    resume point on, not every segment of the epoch (10**4 online changes: 10**4 segments).
    """

    epoch: int
    start: int
    drawn: NDArray[np.int64]


class MixtureSampler(DistributedSampler):
    """Draw from weighted sources in a global order that resumes exactly, phases included.

    Each epoch has ``samples_per_epoch`` global samples (default: the mixture's size). The
    weights in force (``p ~ w ** (1 / temperature)``) set exact per-source counts (rounded to
    sum to the budget) for each segment between two weight changes. The mixture decides only
    which source each global position draws from (a keyed arrangement with exact totals,
    spread evenly at every scale: :mod:`~lightning_resumable_data.index.arrangement`); each
    source is read as a sequence of passes, each pass a fresh keyed permutation of the
    source, and the ``k``-th draw of a source in the epoch is element ``k`` of that sequence
    (:mod:`~lightning_resumable_data.index.passes`). So a weight change, declared or online,
    only changes which source later positions draw from: no draw is skipped or repeated
    within a pass, at any source size. Ranks stride over the global order like
    :class:`DistributedSampler`, so the same elastic resume applies; a rank computes only
    its own positions (cost ``N / W`` per epoch), at most ``RANK_CHUNK`` (32,768) of them
    ahead of what it has yielded.

    The schedule of weight changes is part of the state: :meth:`update_weights` records the
    (epoch, position) a change starts at (schedule changes before reading, as
    :class:`~lightning_resumable_data.ResumableDataModule` does for its phases, to get exact
    per-phase counts), and a resume before, at or after it reproduces the uninterrupted run
    exactly.

    State keys: those of :class:`DistributedSampler` (fingerprint: ``sources``, ``sizes``,
    ``seed``, ``samples_per_epoch``, ``drop_last``, ``initial``, ``order``: the arrangement
    law, :data:`ORDER`), plus ``schedule``: the list of changes, each ``{"epoch",
    "position", "weights", "temperature", "plan_end", "kind"}``, ``source_counts``, and
    ``segment``: the start and per-source draws before the segment holding the position
    (absent in its epoch's first segment), so a resume plans the epoch from there, not 0.

    Args:
        dataset: The :class:`MixtureDataset`.
        weights: A weight per source: a mapping naming every source, or a sequence.
        num_replicas: Data-parallel world size; ``None`` reads the process group.
        rank: Data-parallel rank; ``None`` reads the process group.
        seed: Seed of the order.
        temperature: Temperature applied to the weights, > 0.
        drop_last: Drop the ragged tail of an epoch instead of padding it.
        samples_per_epoch: Global samples in an epoch, at most ``2**53``.
        sample_keys: Yield :class:`~lightning_resumable_data.SampleKey` indices.

    Example:
        >>> mix = MixtureDataset({"web": range(100), "code": range(10)})
        >>> sampler = MixtureSampler(mix, {"web": 1.0, "code": 1.0}, 1, 0, seed=0,
        ...                          samples_per_epoch=40)
        >>> drawn = list(sampler)
        >>> sampler.source_counts(sampler.consumed)
        {'web': 20, 'code': 20}
    """

    KIND: ClassVar[str] = "MixtureSampler"

    def __init__(
        self,
        dataset: MixtureDataset,
        weights: Weights,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        temperature: float = 1.0,
        drop_last: bool = True,
        *,
        samples_per_epoch: int | None = None,
        sample_keys: bool = False,
    ) -> None:
        if not isinstance(dataset, MixtureDataset):
            raise TypeError(
                f"MixtureSampler samples a MixtureDataset, got {type(dataset).__name__}. Wrap "
                "the sources: MixtureDataset({'web': web, 'code': code})."
            )
        super().__init__(
            dataset,
            num_replicas,
            rank,
            True,
            check_non_negative_int("seed", seed),  # no torch order to match: keys only
            drop_last,
            sample_keys=sample_keys,
        )
        self.mixture = dataset
        if len(dataset) == 0:
            raise ValueError(
                f"every source of the mixture is empty (sources {list(dataset.names)}); there "
                "is nothing to draw. Give at least one source samples."
            )
        budget = len(dataset) if samples_per_epoch is None else samples_per_epoch
        self.epoch_length = check_non_negative_int("samples_per_epoch", budget)
        if not 0 < self.epoch_length <= MAX_SEGMENT:
            raise ValueError(
                f"samples_per_epoch={self.epoch_length:,} must be in [1, 2**53 = "
                f"{MAX_SEGMENT:,}]: float64 weights give exact per-source counts only below "
                "2**53. Use a smaller epoch (e.g. 10**12) and more epochs."
            )
        self.num_samples = len(self)
        self.total_size = self.num_samples * self.num_replicas
        first = self._entry(0, 0, weights, temperature)
        self._initial = {"weights": first["weights"], "temperature": first["temperature"]}
        self._schedule: list[dict[str, Any]] = [first]
        self._plans: dict[int, list[_Segment]] = {}
        self._anchor: _Anchor | None = None  # a loaded epoch's plan starts here (see _plan)
        self._computed: list[Any] | None = None  # the chunk being read (see _chunks)
        self._restart = False  # a batched iteration recomputes from its next batch
        self.allow_schedule_change = False

    # -- weights and schedule ---------------------------------------------------------------

    def _weights_list(self, weights: Weights) -> list[float]:
        names = self.mixture.names
        if isinstance(weights, Mapping):
            unknown = sorted(set(weights) - set(names))
            missing = [n for n in names if n not in weights]
            if unknown or missing:
                raise ValueError(
                    f"weights must name every source of the mixture {list(names)} and no "
                    f"other; unknown: {unknown}, missing: {missing}. Give 0 to leave a source "
                    "out."
                )
            values = [weights[n] for n in names]
        elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
            values = list(weights)
        else:
            raise TypeError(
                f"weights={weights!r} must be a mapping naming every source {list(names)} "
                "(e.g. {'web': 0.7, 'code': 0.3}) or one number per source, in order."
            )
        array = check_weights(values, names)
        empty = [
            n for n, w, s in zip(names, array, self.mixture.sizes, strict=True) if w > 0 and s == 0
        ]
        if empty:
            raise ValueError(
                f"sources {empty} are empty but have weight > 0; give them weight 0 or "
                "add samples to them."
            )
        return [float(w) for w in array]

    def _entry(
        self,
        epoch: int,
        position: int,
        weights: Weights,
        temperature: float,
        kind: str = "declared",
    ) -> dict[str, Any]:
        values = self._weights_list(weights)
        mixture_probabilities(values, temperature)  # validates the temperature
        return {
            "epoch": epoch,
            "position": position,
            "weights": values,
            "temperature": float(temperature),
            "plan_end": None,
            "kind": kind,
        }

    @property
    def schedule(self) -> list[dict[str, Any]]:
        """The weight changes so far, in order (a copy)."""
        return [dict(e, weights=list(e["weights"])) for e in self._schedule]

    def weights_at(self, epoch: int, position: int = 0) -> dict[str, float]:
        """The probabilities (after temperature) in force at a position of an epoch."""
        entry = self._schedule[self._governing(epoch, position)]
        probs = mixture_probabilities(entry["weights"], entry["temperature"])
        return dict(zip(self.mixture.names, probs.tolist(), strict=True))

    def _governing(self, epoch: int, position: int) -> int:
        return bisect.bisect_right(self._schedule, (epoch, position), key=entry_key) - 1

    def update_weights(
        self,
        weights: Weights,
        temperature: float | None = None,
        *,
        epoch: int | None = None,
        position: int | None = None,
        kind: str = "declared",
    ) -> tuple[int, int]:
        """Change the weights from global ``position`` of ``epoch`` on; return where.

        By default the change starts at the earliest position this rank has not handed out
        (yielded to the loader) yet: :attr:`consumed`. Any position from there on is
        accepted; positions already computed but not handed out (at most ``RANK_CHUNK`` of
        this rank's) are recomputed. A position already handed out is refused, and the
        error names the earliest allowed one. With several ranks, pass the same position
        on every rank, one no rank has handed out (the Lightning callback does).

        An ``"online"`` change only cuts: every segment is planned up to the next declared
        change (or the epoch's end), whatever online changes follow, so an online change
        never changes the positions before it, and the order depends only on the set of
        changes, never on when or in which order they were made. A ``"declared"`` change (a
        phase) made before its epoch is read ends the plan of the segment before it, so that
        each draws exactly its counts; made while reading, it leaves the positions before it
        as they were planned.

        Args:
            weights: A weight per source (a mapping naming every source, or a sequence).
            temperature: The temperature; ``None`` takes the one in force at ``position``
                when the call is made (pass it explicitly when changes may be made out of
                order).
            epoch: The epoch; ``None`` is the current one.
            position: The global position; ``None`` is the earliest not handed out.
            kind: ``"declared"`` (a phase: checked against the schedule on resume) or
                ``"online"`` (decided during training: replayed from the state).

        Raises:
            ValueError: Bad weights or temperature, or a position already handed out.

        Example:
            >>> mix = MixtureDataset({"web": range(100), "code": range(10)})
            >>> sampler = MixtureSampler(mix, [1.0, 1.0], 1, 0, samples_per_epoch=10**6)
            >>> it = iter(sampler)
            >>> first = [next(it) for _ in range(3)]
            >>> sampler.update_weights([1.0, 3.0])  # the 4th position on
            (0, 3)
            >>> sampler.weights_at(0, 3)
            {'web': 0.25, 'code': 0.75}
        """
        epoch = self.epoch if epoch is None else check_non_negative_int("epoch", epoch)
        earliest = self.consumed if epoch == self.epoch else 0
        position = earliest if position is None else check_non_negative_int("position", position)
        if kind not in ("declared", "online"):
            raise ValueError(f"kind={kind!r} must be 'declared' or 'online'.")
        governing = self._schedule[max(0, self._governing(epoch, position))]
        temperature = governing["temperature"] if temperature is None else temperature
        entry = self._entry(epoch, position, weights, temperature, kind)
        index = self._governing(epoch, position)
        same = (
            index >= 0
            and entry_key(self._schedule[index]) == (epoch, position)
            and (self._schedule[index]["kind"] == "online") == (kind == "online")
        )  # an online change at a declared entry's position goes after it, not over it
        if same and (governing["weights"], governing["temperature"]) == (
            entry["weights"],
            entry["temperature"],
        ):
            return epoch, position  # already scheduled (e.g. restored from a checkpoint)
        self._check_not_handed_out(epoch, position)
        last = self._schedule[-1]
        if kind == "declared" and (epoch, position) < entry_key(last):
            raise ValueError(
                f"update_weights(epoch={epoch}, position={position}) comes before the last "
                f"change (epoch {last['epoch']}, position {last['position']}); add changes in "
                "order (online changes, kind='online', may come before declared phases)."
            )
        if not same and kind != "online" and self._started(epoch):
            self._freeze_segment_at(epoch, position)  # the positions read keep their plan
            index = self._governing(epoch, position)
        tail = index == len(self._schedule) - 1
        if same:
            self._schedule[index] = entry
        else:
            self._schedule.insert(index + 1, entry)
        if tail and self._can_extend(epoch, position):
            self._extend_plan(epoch, entry)
        else:
            self._plans.clear()
        if epoch == self.epoch and position < self.frontier:
            self._rewrite_computed(position)
        return epoch, position

    def _check_not_handed_out(self, epoch: int, position: int) -> None:
        earliest = self.consumed
        where = f"update_weights(epoch={epoch}, position={position})"
        if (epoch, position) < (self.epoch, earliest):
            raise ValueError(
                f"{where} is too late: this rank has handed positions up to {earliest} of "
                f"epoch {self.epoch} to its loader already. The earliest allowed position is "
                f"{earliest} of epoch {self.epoch}: pass position >= {earliest}, or "
                "position=None for the earliest."
            )

    def _started(self, epoch: int) -> bool:
        """Whether part of ``epoch``'s order may already have been computed."""
        return epoch == self.epoch and (
            self._stream is not None or self._resume_at > 0 or self._pending is not None
        )

    def _freeze_segment_at(self, epoch: int, position: int) -> None:
        """Pin the plan of the segment a change interrupts, so its prefix stays as planned."""
        if position == 0 or position >= self.epoch_length:
            return
        index = self._governing(epoch, position)
        governing = self._schedule[index]
        if governing["epoch"] != epoch:  # the epoch starts with inherited weights
            governing = dict(governing, epoch=epoch, position=0, plan_end=None, kind="carry")
            self._schedule.insert(index + 1, governing)
        if governing["plan_end"] is None:
            plan = self._plan(epoch, governing["position"])
            found = bisect.bisect_left(plan, governing["position"], key=lambda s: s.start)
            governing["plan_end"] = plan[found].key[2]

    # -- the order --------------------------------------------------------------------------

    def _segment(
        self,
        epoch: int,
        entry: dict[str, Any],
        stop: int,
        drawn: NDArray[np.int64],
        planned_end: int,
    ) -> _Segment:
        """The segment of ``entry``, read up to ``stop``.

        It is planned up to ``planned_end`` (the next declared change) unless its entry
        pinned another end (``plan_end``).
        """
        start = entry["position"] if entry["epoch"] == epoch else 0
        frozen = entry["plan_end"] is not None and entry["epoch"] == epoch
        end = entry["plan_end"] if frozen else planned_end
        probs = mixture_probabilities(entry["weights"], entry["temperature"])
        counts = target_counts(probs, end - start)
        layout = arrangement(counts, self.seed, (epoch, start, end))
        return _Segment(start, stop, counts, (epoch, start, end), layout, drawn)

    @staticmethod
    def _handed_on(segment: _Segment) -> NDArray[np.int64]:
        """The draws per source after ``segment`` (cut or not), for the next one."""
        return segment.drawn + segment.arrangement.counts_before(segment.stop - segment.start)

    def _plan(self, epoch: int, at: int) -> list[_Segment]:
        """The segments of ``epoch`` from the one holding position ``at`` (or earlier) on.

        A plan starts at the epoch's beginning, or at a loaded state's anchor (the segment
        of the resume point) when ``at`` is not before it: a resume after many changes
        builds only the segments from there on.
        """
        plan = self._plans.get(epoch)
        if plan is not None and plan[0].start <= at:
            return plan
        first = self._governing(epoch, 0)
        drawn = np.zeros(len(self.mixture.names), dtype=np.int64)
        anchor = self._anchor
        if anchor is not None and anchor.epoch == epoch and 0 < anchor.start <= at:
            first = self._governing(epoch, anchor.start)
            drawn = anchor.drawn
        last = bisect.bisect_left(self._schedule, (epoch, self.epoch_length), key=entry_key)
        entries = [self._schedule[first], *self._schedule[first + 1 : last]]
        # Online changes only cut segments: each is planned up to the next declared change.
        planned, following = [], self.epoch_length
        for entry in reversed(entries):
            planned.append(following)
            if entry["kind"] == "declared" and entry["epoch"] == epoch:
                following = entry["position"]
        planned.reverse()
        plan = []
        for i, entry in enumerate(entries):
            stop = entries[i + 1]["position"] if i + 1 < len(entries) else self.epoch_length
            plan.append(self._segment(epoch, entry, stop, drawn, planned[i]))
            drawn = self._handed_on(plan[-1])
        self._plans = {epoch: plan}
        return plan

    def _can_extend(self, epoch: int, position: int) -> bool:
        """Whether a change appended at ``position`` can extend the cached plan in O(1)."""
        plan = self._plans.get(epoch)
        if plan is None or position < plan[0].start:
            return False
        if position >= self.epoch_length:
            return True  # past this epoch's end: its plan is unchanged
        index = self._governing(epoch, position)
        before, online = self._schedule[index - 1], self._schedule[index]["kind"] == "online"
        frozen = before["plan_end"] is not None and before["epoch"] == epoch
        return (online or frozen) and plan[-1].start < position

    def _extend_plan(self, epoch: int, entry: dict[str, Any]) -> None:
        """Cut the cached plan's last segment at ``entry`` and append ``entry``'s segment."""
        plan = self._plans[epoch]
        if entry["position"] >= self.epoch_length:
            return
        plan[-1].stop = entry["position"]
        drawn = self._handed_on(plan[-1])
        plan.append(self._segment(epoch, entry, self.epoch_length, drawn, self.epoch_length))

    def _chunks(
        self, epoch: int, start: int, stream: Callable[[], ChunkStream]
    ) -> Iterator[list[Any]]:
        """The base class's chunks; the current one is kept for :meth:`_rewrite_computed`."""
        for chunk in super()._chunks(epoch, start, stream):
            self._computed = chunk
            yield chunk
        self._computed = None

    def _batches(
        self,
        epoch: int,
        start: int,
        count: Any,
        batch_size: int,
        drop_last: bool,
        limit: int | None,
    ) -> Iterator[list[int]]:
        """The base class's batches; after a change inside the computed order, restarted.

        A restart computes this rank's order again from the first sample not handed out:
        one check per batch, no work per index.
        """
        batches = super()._batches(epoch, start, count, batch_size, drop_last, limit)
        self._restart = False
        while True:
            if self._restart:
                self._restart = False
                handed, start = count.yielded, self._started_at + count.yielded * self.num_replicas
                count.produced = count.yielded = 0
                limit = None if limit is None else limit - handed
                batches = super()._batches(epoch, start, count, batch_size, drop_last, limit)
            batch = next(batches, None)
            if batch is None:
                return
            yield batch

    def _rewrite_computed(self, position: int) -> None:
        """Recompute the positions from ``position`` on in the chunk computed but unread."""
        chunk, stream = self._computed, self._stream
        if not isinstance(stream, ChunkStream):
            self._restart = stream is not None  # batched: restart at the next batch
            return
        if chunk is None:
            return
        produced, first = stream.produced, stream.produced - len(chunk)
        span = rank_span(
            self.epoch_length,
            self.num_replicas,
            self.rank,
            self.drop_last,
            consumed=self._started_at,
        )
        positions = span_positions(span, max(stream.yielded, first), produced)
        positions = positions[np.searchsorted(positions, position) :]
        if not len(positions):
            return
        indices = self._order(self.epoch)(positions % self.epoch_length)
        values = (
            make_sample_keys(indices, positions, self.seed, self.epoch)
            if self.sample_keys
            else indices.tolist()
        )
        chunk[len(chunk) - len(values) :] = values  # same length: the list iterator goes on

    def _chunk_size(self) -> int:
        return RANK_CHUNK

    def _order(self, epoch: int) -> Any:
        sizes = np.asarray(self.mixture.sizes, dtype=np.int64)
        offsets = np.asarray(list(self.mixture.offsets.values()), dtype=np.int64)

        def lookup(positions: NDArray[np.int64]) -> NDArray[np.int64]:
            labels, draws = self._locate(epoch, positions)
            order = np.argsort(labels, kind="stable")  # radix sort: groups by source
            bounds = np.cumsum(np.bincount(labels, minlength=len(sizes)))
            out = np.empty(len(positions), dtype=np.int64)
            for source, (lo, hi) in enumerate(itertools.pairwise([0, *bounds.tolist()])):
                if lo < hi:
                    where = order[lo:hi]
                    local = source_samples(
                        draws[where], int(sizes[source]), self.seed, (epoch, source)
                    )
                    out[where] = offsets[source] + local
            return out

        return lookup

    def _locate(
        self, epoch: int, positions: NDArray[np.int64]
    ) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
        """Sources and per-epoch draw numbers at global ``positions`` (only those)."""
        plan = self._plan(epoch, int(positions.min()) if len(positions) else self.epoch_length)
        if len(plan) == 1:
            labels, draws = plan[0].arrangement.locate(positions - plan[0].start)
            return labels, draws + plan[0].drawn[labels]
        labels = np.empty(len(positions), dtype=np.int16)
        draws = np.empty(len(positions), dtype=np.int64)
        starts = np.array([segment.start for segment in plan], dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        ordered = bool(np.all(which[1:] >= which[:-1]))  # a rank's chunk, unless it wraps
        bounds = np.searchsorted(which, np.arange(len(plan) + 1)) if ordered else None
        touched = np.unique(which).tolist() if len(which) else []  # only these segments
        for i in touched:
            segment = plan[i]
            if bounds is not None:
                where: slice | NDArray[np.intp] = slice(int(bounds[i]), int(bounds[i + 1]))
            else:
                where = np.flatnonzero(which == i)
            found = positions[where] - segment.start
            seg_labels, seg_draws = segment.arrangement.locate(found)
            labels[where], draws[where] = seg_labels, seg_draws + segment.drawn[seg_labels]
        return labels, draws

    def source_counts(
        self, consumed: int | None = None, epoch: int | None = None
    ) -> dict[str, int]:
        """Samples drawn from each source in the first ``consumed`` positions of an epoch.

        Defaults: the current epoch, up to what this sampler has yielded. Cost: one segment's
        count, however many weight changes the epoch has.
        """
        consumed = self.consumed if consumed is None else consumed
        consumed = min(consumed, self.epoch_length)
        epoch = self.epoch if epoch is None else epoch
        plan = self._plan(epoch, consumed)
        index = max(0, bisect.bisect_right(plan, consumed, key=lambda s: s.start) - 1)
        segment = plan[index]
        upto = max(0, min(consumed, segment.stop) - segment.start)
        totals = segment.drawn + segment.arrangement.counts_before(upto)
        return dict(zip(self.mixture.names, totals.tolist(), strict=True))

    def __len__(self) -> int:
        """Samples this rank reads in a full epoch."""
        per_rank = self.epoch_length / self.num_replicas
        return math.floor(per_rank) if self.drop_last else math.ceil(per_rank)

    # -- state -----------------------------------------------------------------------------

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the order depends on besides the epoch and the schedule's changes."""
        return {
            "sources": list(self.mixture.names),
            "sizes": list(self.mixture.sizes),
            "seed": self.seed,
            "samples_per_epoch": self.epoch_length,
            "drop_last": self.drop_last,
            "initial": self._initial,
            "order": ORDER,
        }

    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]:
        """The position, the schedule of weight changes and the per-source counts there."""
        state = super().state_at(epoch, consumed)
        state["schedule"] = compact_schedule(self._schedule, epoch)
        state["source_counts"] = self.source_counts(consumed, epoch)
        segment: _Segment | None = None
        if 0 < consumed < self.epoch_length:  # where a resume's plan starts (see _Anchor)
            plan = self._plan(epoch, consumed)
            segment = plan[bisect.bisect_right(plan, consumed, key=lambda s: s.start) - 1]
        if segment is not None and segment.start > 0:
            state["segment"] = {
                "start": segment.start,
                "drawn": segment.drawn.tolist(),
            }
        return state

    def _load_anchor(self, state: Mapping[str, Any]) -> _Anchor | None:
        """The saved segment of the resume point, checked against the saved counts.

        ``None`` (plan the epoch from its start) for a state without one. The check costs
        one segment: its counts up to the resume point must give the saved
        ``source_counts``, and its draws must cover its samples.
        """
        saved, epoch, consumed = state.get("segment"), state["epoch"], state["consumed"]
        if saved is None:
            return None
        prefix = f"Cannot load this state into {self.KIND}: its 'segment'"
        names = self.mixture.names
        try:
            start = check_non_negative_int("start", saved["start"])
            drawn = np.array([check_non_negative_int("drawn", v) for v in saved["drawn"]])
            counts = np.array([state["source_counts"][n] for n in names], dtype=np.int64)
        except (KeyError, TypeError, ValueError, OverflowError) as error:  # int64 overflow
            raise StateMismatchError(f"{prefix} is invalid ({error}).") from None
        shapes_ok = len(drawn) == len(names)
        if not (shapes_ok and 0 < start <= consumed < self.epoch_length):
            raise StateMismatchError(
                f"{prefix} (start {start}, {len(drawn)} sources) does not fit the resume "
                f"point {consumed} of {self.epoch_length} and {len(names)} sources; the "
                "state is corrupted."
            )
        anchor = _Anchor(epoch, start, drawn.astype(np.int64))
        previous, self._anchor = self._anchor, anchor
        self._plans.clear()
        try:
            segment = self._plan(epoch, consumed)[0]
            upto = min(consumed, segment.stop) - segment.start
            counted = segment.drawn + segment.arrangement.counts_before(upto)
        finally:
            self._anchor = previous
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

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the position and the schedule.

        Raises:
            StateMismatchError: Another version, kind, malformed state, other sources or
                sizes, seed, epoch budget or initial weights, or a mixture order of an
                earlier release (the error says how to finish that run).
        """
        # Everything is checked before anything changes: version and kind first, then the
        # schedule, then the position (by the base class, which validates before it sets).
        saved = state_dict.get("fingerprint") if isinstance(state_dict, Mapping) else None
        order = saved.get("order") if isinstance(saved, Mapping) else None
        if isinstance(order, str) and order in _RETIRED_ORDERS:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: {_RETIRED_ORDERS[order]}."
            )
        check_state(
            state_dict,
            self.KIND,
            self.fingerprint,
            {"epoch": int, "consumed": int, "num_replicas": int},
        )
        checked = check_schedule(self, state_dict.get("schedule"))
        schedule = reconcile_schedule(self, checked, state_dict["epoch"], state_dict["consumed"])
        previous = self._schedule
        self._schedule = schedule
        try:
            anchor = self._load_anchor(state_dict)  # builds the plan from the anchor on
            super().load_state_dict(state_dict)
        except BaseException:
            self._schedule = previous
            self._plans.clear()
            raise
        self._anchor = anchor
        if anchor is None:
            self._plans.clear()
