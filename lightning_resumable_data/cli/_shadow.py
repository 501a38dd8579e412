"""Torch-free stand-ins of rank 0's sampler and loader, restored as the real ones restore.

``lrd inspect`` answers by loading the saved state into the package's own loader and
sampler over ``range(size)`` stand-ins (:mod:`._dryrun`). Those are torch objects (the
samplers subclass ``torch.utils.data.DistributedSampler``, the loader torchdata's), and
importing torch and Lightning takes seconds. What the restore checks and what the report
reads are index math, so a *shadow* holds the same configuration, runs the same checks and
loads in the same order, by calling the functions the real objects call:
``check_state``, ``loaded_cuts`` and ``loaded_position`` (a ``DistributedSampler``),
``check_mixture_state``, ``check_schedule``, ``reconcile_schedule`` and
``MixturePlan.load`` (a ``MixtureSampler``), and the loader's ``_check`` and
``PositionResume.restore`` steps. The numbers the report reads (``samples_left``,
``epoch_size``, a mixture's ``source_counts``) come from the same ``CutOrder`` and
``MixturePlan``.

A shadow is trusted only when it accepts a state: :mod:`._shadow_run` falls back to the
real dry run on any error, so a refusal is always the package's own, in its own words.
``tests/test_inspect_without_torch.py`` holds shadows and real objects equal over
generated states and layouts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from lightning_resumable_data.index.changes import DataChange
from lightning_resumable_data.index.partition import check_rank, samples_per_rank
from lightning_resumable_data.index.permutation import PermutationAlgorithm, check_algorithm
from lightning_resumable_data.samplers._arguments import (
    check_epoch_seed,
    check_key_seed,
    check_non_negative_int,
    check_rank_as_torch,
    check_seed,
)
from lightning_resumable_data.samplers._changed_order import ChangedOrder
from lightning_resumable_data.samplers._cuts import Quarantine
from lightning_resumable_data.samplers._distributed_state import (
    loaded_cuts,
    loaded_position,
    order_fingerprint,
)
from lightning_resumable_data.samplers._mixture_config import (
    MixtureConfig,
    SourceSizes,
    Weights,
    check_mixture_state,
    check_not_handed_out,
    epoch_budget,
)
from lightning_resumable_data.samplers._mixture_plan import MixturePlan
from lightning_resumable_data.samplers._rank_position import RankPosition
from lightning_resumable_data.samplers._schedule_merge import reconcile_schedule
from lightning_resumable_data.samplers.data_changes import loaded_changes
from lightning_resumable_data.samplers.schedule import check_schedule
from lightning_resumable_data.state import StateMismatchError, check_state

__all__ = ["LOADER_KIND", "ShadowLoader", "ShadowMixture", "ShadowSampler", "restore_loader"]

LOADER_KIND = "StatefulDataLoader"  # StatefulDataLoader.KIND


class ShadowSampler(ChangedOrder):
    """``DistributedSampler(range(length), num_replicas, 0, ...)`` as far as a restore goes.

    Example:
        >>> sampler = ShadowSampler(10, 3, shuffle=False)
        >>> len(sampler), sampler.samples_left(4)
        (4, 2)
    """

    KIND: ClassVar[str] = "DistributedSampler"

    def __init__(
        self,
        length: int,
        num_replicas: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        algorithm: PermutationAlgorithm = "randperm",
    ) -> None:
        check_rank_as_torch(num_replicas, 0)  # DistributedSampler's checks, in its order
        check_rank(num_replicas, 0)
        self.seed = check_seed(seed)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.algorithm: PermutationAlgorithm = check_algorithm(algorithm)
        self.num_replicas, self.rank = int(num_replicas), 0
        self.dataset_length = self.epoch_length = length
        self.pins: dict[str, str] = {}  # a range reads no pinned file
        self.epoch = 0
        self.skips: dict[int, list[tuple[int, int]]] = {}
        self.quarantined: list[Quarantine] = []
        self._cuts: dict[int, list[tuple[int, int]]] = {}
        self._position = RankPosition()
        self.changes: list[DataChange] = []  # the data changes the state records
        self.data_changes = None  # the dry run is over the saved length: no new change
        self.last_change = None

    @property
    def fingerprint(self) -> dict[str, Any]:
        """``DistributedSampler.fingerprint``."""
        return order_fingerprint(self)

    @property
    def consumed(self) -> int:
        """Global samples of the epoch consumed (nothing is read: the restored position)."""
        return self._position.consumed(self.num_replicas)

    @property
    def frontier(self) -> int:
        """Global position the order is computed up to (nothing is read: ``consumed``)."""
        return self._position.frontier(self.num_replicas)

    def _restart(self, consumed: int) -> None:
        self._position.restart(consumed)

    def samples_left(self, consumed: int) -> int:
        """``DistributedSampler.samples_left``."""
        return samples_per_rank(self.epoch_size() - consumed, self.num_replicas, self.drop_last)

    def __len__(self) -> int:
        return samples_per_rank(self.epoch_size(), self.num_replicas, self.drop_last)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``DistributedSampler.load_state_dict`` (no rollback: a refused shadow is dropped)."""
        self.changes = loaded_changes(state_dict, self.KIND)
        lengths = [self.epoch_length, *(c.old_length for c in self.changes)]
        bound = max(lengths) + sum(c.added for c in self.changes)
        self.skips, self.quarantined = loaded_cuts(state_dict, bound, self.KIND)
        self._cuts = {}
        self.epoch, consumed = loaded_position(self, state_dict)
        self._position.restart(consumed)


class ShadowMixture(ShadowSampler):
    """``MixtureSampler(MixtureDataset({n: range(s)}), weights, num_replicas, 0, ...)``.

    Example:
        >>> mix = ShadowMixture({"web": 60, "code": 40}, [1.0, 1.0], 2, samples_per_epoch=10)
        >>> len(mix), mix.source_counts(10, 0)
        (5, {'web': 5, 'code': 5})
    """

    KIND: ClassVar[str] = "MixtureSampler"

    def __init__(
        self,
        sources: Mapping[str, int],
        weights: Weights,
        num_replicas: int,
        *,
        seed: int = 0,
        temperature: float = 1.0,
        drop_last: bool = True,
        samples_per_epoch: int | None = None,
    ) -> None:
        mixture = _sources(sources)
        seed = check_key_seed(seed)
        super().__init__(sum(mixture.sizes), num_replicas, seed=seed, drop_last=drop_last)
        self.mixture = mixture
        self.epoch_length = epoch_budget(mixture, samples_per_epoch)
        config = MixtureConfig(mixture, self.seed, self.epoch_length)
        first = config.entry(0, 0, weights, temperature)
        self._initial = {"weights": first["weights"], "temperature": first["temperature"]}
        self._plan = MixturePlan(config, first)
        self._entry = config.entry  # what check_schedule checks entries with
        self.allow_schedule_change = False

    @property
    def _schedule(self) -> list[dict[str, Any]]:
        return self._plan.schedule

    @_schedule.setter
    def _schedule(self, schedule: list[dict[str, Any]]) -> None:
        self._plan.schedule = schedule

    @property
    def fingerprint(self) -> dict[str, Any]:
        """``MixtureSampler.fingerprint``."""
        return self._plan.config.fingerprint(self.drop_last, self._initial)

    def __len__(self) -> int:
        per_rank = self.epoch_length / self.num_replicas
        return math.floor(per_rank) if self.drop_last else math.ceil(per_rank)

    def update_weights(
        self, weights: Weights, temperature: float | None, *, epoch: int, position: int
    ) -> None:
        """``MixtureSampler.update_weights`` of a declared change, before anything is read."""
        epoch = check_non_negative_int("epoch", epoch)
        position = check_non_negative_int("position", position)
        entry = self._plan.change(epoch, position, weights, temperature, "declared")
        if self._plan.scheduled(entry):
            return
        check_not_handed_out(epoch, position, self.epoch, self.consumed)
        self._plan.add(entry, started=epoch == self.epoch and self._position.engaged)

    def source_counts(self, consumed: int, epoch: int) -> dict[str, int]:
        """``MixtureSampler.source_counts``."""
        totals = self._plan.counts(epoch, min(consumed, self.epoch_length))
        return dict(zip(self.mixture.names, totals.tolist(), strict=True))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``MixtureSampler.load_state_dict``: the same checks, in the same order."""
        check_mixture_state(state_dict, self.KIND, self.fingerprint)
        checked = check_schedule(self, state_dict.get("schedule"))
        schedule = reconcile_schedule(self, checked, state_dict["epoch"], state_dict["consumed"])
        self._plan.load(schedule, state_dict, self.KIND, super().load_state_dict)


def _sources(sources: Mapping[str, int]) -> SourceSizes:
    """The names and sizes of ``MixtureDataset({n: range(s) for ...})``, checked as it checks."""
    stand_in = {name: range(size) for name, size in sources.items()}
    if not stand_in:
        raise ValueError("MixtureDataset needs at least one source; got none.")
    if not all(isinstance(name, str) for name in stand_in):
        raise TypeError("source names must be str")
    return SourceSizes(tuple(stand_in), tuple(len(r) for r in stand_in.values()))


@dataclass(frozen=True)
class ShadowLoader:
    """What ``lrd inspect`` reads of a restored loader: its sampler, ``drop_last``, batches."""

    position_sampler: ShadowSampler
    drop_last: bool
    batches_yielded: int


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "epoch": int,
    "batches_yielded": int,
    "batch_size": int,
    "num_replicas": int,
    "consumed": int,  # PositionResume.required
    "sampler": dict,
}


def restore_loader(
    sampler: ShadowSampler,
    dataset_length: int,
    state: Mapping[str, Any],
    batch_size: int,
    drop_last: bool = False,
) -> ShadowLoader:
    """``StatefulDataLoader(dataset, batch_size, sampler=sampler, drop_last=...)``, restored.

    Strict (``strict_resume=True``), without ``max_epochs``, as ``lrd``'s dry runs build it.

    Raises:
        ValueError: What the loader or the sampler refuses (messages not promised: the
            caller falls back to the real loader for them).
    """
    if drop_last and batch_size > len(sampler):
        raise ValueError("batch_size larger than the rank's share and drop_last")
    if not isinstance(state, dict) or "kind" not in state:
        raise ValueError("not this package's loader state (torchdata's, or empty)")
    fingerprint = {"mode": "position", "dataset_length": dataset_length}
    check_state(state, LOADER_KIND, fingerprint, _REQUIRED)
    epoch, consumed, saved = state["epoch"], state["consumed"], state["sampler"]
    if saved.get("consumed") != consumed or saved.get("epoch") != epoch:
        raise StateMismatchError("the position and the sampler's disagree")
    sampler.load_state_dict(saved)
    check_epoch_seed(check_non_negative_int("epoch", epoch), sampler.seed)  # lock_epoch
    batches = state["batches_yielded"]
    if (state["batch_size"], state["num_replicas"]) != (batch_size, sampler.num_replicas):
        batches = consumed // (batch_size * sampler.num_replicas)  # restated in this layout
    return ShadowLoader(sampler, bool(drop_last), batches)
