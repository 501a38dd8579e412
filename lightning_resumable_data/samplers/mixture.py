"""Weighted sampling over the sources of a :class:`MixtureDataset`, with exact phase changes.

The sampler holds a configuration (``_mixture_config``), a schedule of weight changes with
the plan of segments it gives (``_mixture_plan``), and what a change recomputes of the
order computed ahead (``_mixture_recompute``); ``_mixture_draw`` computes the draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.datasets.mixture import MixtureDataset, check_mixture
from lightning_resumable_data.samplers._arguments import check_key_seed, check_non_negative_int
from lightning_resumable_data.samplers._chunks import BatchCount, ChunkStream
from lightning_resumable_data.samplers._mixture_added import with_added_sources
from lightning_resumable_data.samplers._mixture_changes import changes_state, reweighted
from lightning_resumable_data.samplers._mixture_config import (
    ORDER,
    MixtureConfig,
    Weights,
    check_mixture_state,
    check_not_handed_out,
    epoch_budget,
)
from lightning_resumable_data.samplers._mixture_draw import RANK_CHUNK, locate, mixture_order
from lightning_resumable_data.samplers._mixture_plan import MixturePlan
from lightning_resumable_data.samplers._mixture_recompute import Recompute
from lightning_resumable_data.samplers._schedule_merge import reconcile_schedule
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.schedule import (
    MixturePhase,
    check_phases,
    check_schedule,
    compact_schedule,
)

__all__ = ["ORDER", "RANK_CHUNK", "MixturePhase", "MixtureSampler", "check_phases"]


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
    (epoch, position) a change starts at (made before reading, as the DataModule does for
    its phases, it gives exact per-phase counts); a resume reproduces the run exactly.

    State keys: those of :class:`DistributedSampler` (fingerprint: ``sources``, ``sizes``,
    ``seed``, ``samples_per_epoch``, ``drop_last``, ``initial``, ``order``: the arrangement
    law, :data:`ORDER`), plus ``schedule``: the list of changes, each ``{"epoch",
    "position", "weights", "temperature", "plan_end", "kind"}``, ``source_counts``, and
    ``segment``: the start and per-source draws before the segment holding the position
    (absent in its epoch's first segment), so a resume plans the epoch from there, not 0;
    after changes at resumes, ``configured`` (the weights asked for) and ``sources_added``.

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
    CUTS: ClassVar[str] = "its weight changes sit at positions a cut would move"

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
        super().__init__(
            check_mixture(dataset),
            num_replicas,
            rank,
            True,
            check_key_seed(seed),  # no torch order to match: keys only
            drop_last,
            sample_keys=sample_keys,
        )
        self.mixture = dataset
        self.epoch_length = epoch_budget(dataset, samples_per_epoch)
        self.num_samples = len(self)
        self.total_size = self.num_samples * self.num_replicas
        config = MixtureConfig(dataset, self.seed, self.epoch_length)
        first = config.entry(0, 0, weights, temperature)
        self._initial = {"weights": first["weights"], "temperature": first["temperature"]}
        self.built_initial = dict(self._initial)  # a resume under a policy starts these
        self._plan = MixturePlan(config, first)  # the schedule of changes, each epoch's plan
        self._entry = config.entry  # a checked schedule entry (schedule.py calls it too)
        self._recompute = Recompute(self.epoch_length, self.num_replicas, self.rank, self.drop_last)
        self.allow_schedule_change = False
        self.last_reweight: dict[str, Any] | None = None  # what a resume's reweight did

    @property
    def _schedule(self) -> list[dict[str, Any]]:
        """The schedule's entries (the load checks of ``schedule.py`` read and replace them)."""
        return self._plan.schedule

    @_schedule.setter
    def _schedule(self, schedule: list[dict[str, Any]]) -> None:
        self._plan.schedule = schedule

    @property
    def schedule(self) -> list[dict[str, Any]]:
        """The weight changes so far, in order (a copy)."""
        return [dict(e, weights=list(e["weights"])) for e in self._schedule]

    def weights_at(self, epoch: int, position: int = 0) -> dict[str, float]:
        """The probabilities (after temperature) in force at a position of an epoch."""
        probs = self._plan.weights_at(epoch, position)
        return dict(zip(self.mixture.names, probs, strict=True))

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
        entry = self._plan.change(epoch, position, weights, temperature, kind)
        if self._plan.scheduled(entry):
            return epoch, position  # already scheduled (e.g. restored from a checkpoint)
        check_not_handed_out(epoch, position, self.epoch, self.consumed)
        self._plan.add(entry, started=epoch == self.epoch and self._position.engaged)
        if epoch == self.epoch and position < self.frontier:  # computed, not handed out
            keys = (self.seed, self.epoch) if self.sample_keys else None
            self._recompute.rewrite(self._position, position, self._order(self.epoch), keys)
        return epoch, position

    def _chunks(
        self, epoch: int, start: int, stream: Callable[[], ChunkStream]
    ) -> Iterator[list[Any]]:
        """The base class's chunks; the current one is kept to be rewritten after a change."""
        return self._recompute.chunks(super()._chunks(epoch, start, stream))

    def _batches(
        self,
        epoch: int,
        start: int,
        count: BatchCount,
        batch_size: int,
        drop_last: bool,
        limit: int | None,
    ) -> Iterator[list[int]]:
        """The base class's batches; after a change inside the computed order, restarted."""
        base = super()._batches

        def batches(begin: int, most: int | None) -> Iterator[list[int]]:
            return base(epoch, begin, count, batch_size, drop_last, most)

        return self._recompute.batches(batches, start, limit, count)

    def _chunk_size(self) -> int:
        return RANK_CHUNK

    def _order(self, epoch: int) -> Any:
        return mixture_order(self.mixture, self.seed, epoch, self._locate)

    def _locate(
        self, epoch: int, positions: NDArray[np.int64]
    ) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
        """Sources and per-epoch draw numbers at global ``positions`` (only those)."""
        at = int(positions.min()) if len(positions) else self.epoch_length
        return locate(self._plan.segments(epoch, at), positions)

    def source_counts(
        self, consumed: int | None = None, epoch: int | None = None
    ) -> dict[str, int]:
        """Samples drawn from each source in the first ``consumed`` positions of an epoch.

        Defaults: the current epoch, up to what this sampler has yielded. Cost: one segment's
        count, however many weight changes the epoch has.
        """
        consumed = min(self.consumed if consumed is None else consumed, self.epoch_length)
        totals = self._plan.counts(self.epoch if epoch is None else epoch, consumed)
        return dict(zip(self.mixture.names, totals.tolist(), strict=True))

    def __len__(self) -> int:
        """Samples this rank reads in a full epoch."""
        per_rank = self.epoch_length / self.num_replicas
        return math.floor(per_rank) if self.drop_last else math.ceil(per_rank)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the order depends on besides the epoch and the schedule's changes."""
        return self._plan.config.fingerprint(self.drop_last, self._initial)

    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]:
        """The position, the schedule of weight changes and the per-source counts there."""
        state = super().state_at(epoch, consumed)
        state["schedule"] = compact_schedule(self._schedule, epoch)
        state["source_counts"] = self.source_counts(consumed, epoch)
        segment = self._plan.anchor_state(epoch, consumed)
        if segment is not None:
            state["segment"] = segment
        state.update(changes_state(self))  # weights and sources changed at resumes
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the position and the schedule.

        Raises:
            StateMismatchError: Another version, kind, malformed state, other sources or
                sizes, seed, epoch budget or initial weights, or a mixture order of an
                earlier release (the error says how to finish that run).
        """
        # All is checked before anything changes: version, kind, schedule, then the position
        # (base class); other weights or appended sources load as saved, then change.
        with reweighted(self, with_added_sources(self, state_dict)) as state:
            check_mixture_state(state, self.KIND, self.fingerprint)
            checked = check_schedule(self, state.get("schedule"))
            schedule = reconcile_schedule(self, checked, state["epoch"], state["consumed"])
            self._plan.load(schedule, state, self.KIND, super().load_state_dict)
