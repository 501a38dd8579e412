"""Weighted sampling over the sources of a :class:`MixtureDataset`, with exact phase changes."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
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
from lightning_resumable_data.samplers.distributed import DistributedSampler, check_non_negative_int
from lightning_resumable_data.samplers.schedule import (
    MixturePhase,
    check_phases,
    check_schedule,
    reconcile_schedule,
)
from lightning_resumable_data.state import check_state

__all__ = ["MixturePhase", "MixtureSampler", "check_phases"]

Weights = Mapping[str, float] | Sequence[float]

RANK_CHUNK: Final = 4096  # positions of this rank computed ahead at a time, whatever the world
ORDER: Final = "blocks-leaves-feistel/2"  # the arrangement law (index.arrangement), in the state


@dataclass(slots=True)
class _Segment:
    start: int
    stop: int
    counts: NDArray[np.int64]  # samples per source over the planned length
    key: tuple[int, int, int]
    arrangement: Arrangement
    base: NDArray[np.int64]  # draws of each source in the epoch before this segment


class MixtureSampler(DistributedSampler):
    """Draw from weighted sources in a global order that resumes exactly, phases included.

    Each epoch has ``samples_per_epoch`` global samples (default: the mixture's size). The
    weights in force (``p ~ w ** (1 / temperature)``) set exact per-source counts (rounded to
    sum to the budget); the order is a random arrangement of them
    (:mod:`~lightning_resumable_data.index.arrangement`: stratified blocks of ``2**29``
    positions, uniform within a block), and each source serves its draws from its own keyed
    permutation, reshuffled on each pass, so a source repeats a sample only after it has used
    all of them, up to a window of one leaf (``2**20`` positions) where consecutive passes
    may overlap. Ranks stride over the global order like :class:`DistributedSampler`, so the
    same elastic resume applies; a rank computes only its own positions (cost ``N / W`` per
    epoch), at most ``RANK_CHUNK`` (4,096) of them ahead of what it has yielded.

    The schedule of weight changes is part of the state: :meth:`update_weights` records the
    (epoch, position) a change starts at (schedule changes before reading, as
    :class:`~lightning_resumable_data.ResumableDataModule` does for its phases, to get exact
    per-phase counts), and a resume before, at or after it reproduces the uninterrupted run
    exactly.

    State keys: those of :class:`DistributedSampler` (fingerprint: ``sources``, ``sizes``,
    ``seed``, ``samples_per_epoch``, ``drop_last``, ``initial``, ``order``: the arrangement
    law, :data:`ORDER`), plus ``schedule``: the list of changes, each ``{"epoch",
    "position", "weights", "temperature", "plan_end"}``, and ``source_counts``.

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
            dataset, num_replicas, rank, True, seed, drop_last, sample_keys=sample_keys
        )
        self.mixture = dataset
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
        self, epoch: int, position: int, weights: Weights, temperature: float
    ) -> dict[str, Any]:
        values = self._weights_list(weights)
        mixture_probabilities(values, temperature)  # validates the temperature
        return {
            "epoch": epoch,
            "position": position,
            "weights": values,
            "temperature": float(temperature),
            "plan_end": None,
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
        keys = [(e["epoch"], e["position"]) for e in self._schedule]
        return bisect.bisect_right(keys, (epoch, position)) - 1

    def update_weights(
        self,
        weights: Weights,
        temperature: float | None = None,
        *,
        epoch: int | None = None,
        position: int | None = None,
    ) -> None:
        """Change the weights from global ``position`` of ``epoch`` on.

        By default the change starts where this epoch's order has not been computed yet
        (:attr:`frontier`: at most ``RANK_CHUNK * num_replicas`` positions past what was
        yielded). For a change at an exact step on every rank, pass ``position`` (the
        Lightning callback does): any position from the frontier on is accepted. A change
        cannot start where the order has already been computed (prefetched samples would
        differ); the error names the earliest allowed position.

        The segment it interrupts keeps the arrangement it was planned with (its prefix is
        used), so the result depends only on the sequence of calls, never on timing.

        Raises:
            ValueError: Bad weights or temperature, or a position already computed.

        Example:
            >>> mix = MixtureDataset({"web": range(100), "code": range(10)})
            >>> sampler = MixtureSampler(mix, [1.0, 1.0], 1, 0, samples_per_epoch=10**6)
            >>> first = next(iter(sampler))
            >>> sampler.frontier
            4096
            >>> sampler.update_weights([1.0, 3.0], position=sampler.frontier)
            >>> sampler.weights_at(0, 4096)
            {'web': 0.25, 'code': 0.75}
        """
        epoch = self.epoch if epoch is None else check_non_negative_int("epoch", epoch)
        if position is None:
            position = self.frontier if epoch == self.epoch else 0
        position = check_non_negative_int("position", position)
        last = self._schedule[-1]
        temperature = last["temperature"] if temperature is None else temperature
        entry = self._entry(epoch, position, weights, temperature)
        same = [e for e in self._schedule if (e["epoch"], e["position"]) == (epoch, position)]
        if same and (same[0]["weights"], same[0]["temperature"]) == (
            entry["weights"],
            entry["temperature"],
        ):
            return  # already scheduled (e.g. restored from a checkpoint): nothing changes
        if (epoch, position) < (self.epoch, self.frontier):
            raise ValueError(
                f"update_weights(epoch={epoch}, position={position}) is too late: the order up "
                f"to position {self.frontier} of epoch {self.epoch} is already computed "
                f"(prefetched). The earliest allowed position is {self.frontier} of epoch "
                f"{self.epoch}; pass position >= {self.frontier}, or schedule the change "
                "before reading."
            )
        if (epoch, position) < (last["epoch"], last["position"]):
            raise ValueError(
                f"update_weights(epoch={epoch}, position={position}) comes before the last "
                f"change (epoch {last['epoch']}, position {last['position']}); add changes in "
                "order."
            )
        if not same and self._started(epoch):
            self._freeze_segment_at(epoch, position)
        if (last["epoch"], last["position"]) == (epoch, position):
            self._schedule[-1] = entry
        else:
            self._schedule.append(entry)
        self._plans.clear()

    def _started(self, epoch: int) -> bool:
        """Whether part of ``epoch``'s order may already have been computed."""
        return epoch == self.epoch and (
            self._stream is not None or self._resume_at > 0 or self._pending is not None
        )

    def _freeze_segment_at(self, epoch: int, position: int) -> None:
        """Pin the plan of the segment a change interrupts, so its prefix stays as planned."""
        if position == 0 or position >= self.epoch_length:
            return
        governing = self._schedule[self._governing(epoch, position)]
        if governing["epoch"] != epoch:  # the epoch starts with inherited weights
            governing = dict(governing, epoch=epoch, position=0, plan_end=None)
            self._schedule.insert(self._governing(epoch, position) + 1, governing)
        if governing["plan_end"] is None:
            plan = self._plan(epoch)
            governing["plan_end"] = next(s for s in plan if s.start == governing["position"]).stop

    # -- the order --------------------------------------------------------------------------

    def _plan(self, epoch: int) -> list[_Segment]:
        if epoch in self._plans:
            return self._plans[epoch]
        first = self._governing(epoch, 0)
        entries = [self._schedule[first]] + [
            e
            for e in self._schedule[first + 1 :]
            if e["epoch"] == epoch and e["position"] < self.epoch_length
        ]
        plan: list[_Segment] = []
        base = np.zeros(len(self.mixture.names), dtype=np.int64)
        for i, entry in enumerate(entries):
            start = entry["position"] if entry["epoch"] == epoch else 0
            stop = entries[i + 1]["position"] if i + 1 < len(entries) else self.epoch_length
            end = (
                entry["plan_end"]
                if entry["plan_end"] is not None and entry["epoch"] == epoch
                else stop
            )
            probs = mixture_probabilities(entry["weights"], entry["temperature"])
            counts = target_counts(probs, end - start)
            layout = arrangement(counts, self.seed, (epoch, start, end))
            plan.append(_Segment(start, stop, counts, (epoch, start, end), layout, base))
            # A cut segment (stop < end) hands on the draws after those its leaves reserved.
            base = base + (counts if stop == end else layout.reserved(stop - start))
        self._plans = {epoch: plan}
        return plan

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
        plan = self._plan(epoch)
        if len(plan) == 1:
            labels, draws = plan[0].arrangement.locate(positions)
            return labels, draws + plan[0].base[labels]
        labels = np.empty(len(positions), dtype=np.int16)
        draws = np.empty(len(positions), dtype=np.int64)
        starts = np.array([segment.start for segment in plan], dtype=np.int64)
        which = np.searchsorted(starts, positions, side="right") - 1
        ordered = bool(np.all(which[1:] >= which[:-1]))  # a rank's chunk, unless it wraps
        bounds = np.searchsorted(which, np.arange(len(plan) + 1)) if ordered else None
        for i, segment in enumerate(plan):
            if bounds is not None:
                where: slice | NDArray[np.intp] = slice(int(bounds[i]), int(bounds[i + 1]))
            else:
                where = np.flatnonzero(which == i)
            found = positions[where] - segment.start
            if len(found):
                seg_labels, seg_draws = segment.arrangement.locate(found)
                labels[where], draws[where] = seg_labels, seg_draws + segment.base[seg_labels]
        return labels, draws

    def source_counts(
        self, consumed: int | None = None, epoch: int | None = None
    ) -> dict[str, int]:
        """Samples drawn from each source in the first ``consumed`` positions of an epoch.

        Defaults: the current epoch, up to what this sampler has yielded.
        """
        consumed = self.consumed if consumed is None else consumed
        consumed = min(consumed, self.epoch_length)
        epoch = self.epoch if epoch is None else epoch
        totals = np.zeros(len(self.mixture.names), dtype=np.int64)
        for segment in self._plan(epoch):
            upto = min(consumed, segment.stop) - segment.start
            if upto <= 0:
                break
            totals += segment.arrangement.counts_before(upto)
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
        state["schedule"] = self.schedule
        state["source_counts"] = self.source_counts(consumed, epoch)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the position and the schedule.

        Raises:
            StateMismatchError: Another version, kind, malformed state, other sources or
                sizes, seed, epoch budget or initial weights.
        """
        # Everything is checked before anything changes: version and kind first, then the
        # schedule, then the position (by the base class, which validates before it sets).
        check_state(
            state_dict,
            self.KIND,
            self.fingerprint,
            {"epoch": int, "consumed": int, "num_replicas": int},
        )
        checked = check_schedule(self, state_dict.get("schedule"))
        schedule = reconcile_schedule(self, checked, state_dict["epoch"], state_dict["consumed"])
        super().load_state_dict(state_dict)
        self._schedule = schedule
        self._plans.clear()
