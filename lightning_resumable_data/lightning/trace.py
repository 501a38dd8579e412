"""Which samples an optimizer step trained, on every rank: the history and the order, no replay.

The callback's :class:`~lightning_resumable_data.lightning.history.DataHistory` says where
each batch of a step began (epoch, global position, layout); the sampler's order is a pure
function of its configuration and the epoch; rank ``r`` of ``W`` reads positions
``consumed + r + W * j`` of the epoch's padded order (:mod:`~lightning_resumable_data.index.
partition`). So a step's samples cost one lookup of the order at ``world x batch_size``
positions per batch: O(1) in the step number, nothing read, nothing replayed.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> from lightning_resumable_data.lightning.history import DataHistory
    >>> history = DataHistory([[0, 0, 0, 2, 2, 1, 3, 0]])  # steps 0-2: 2 ranks x 2 samples
    >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=False)
    >>> [(r.rank, r.indices.tolist()) for r in trace_step(sampler, history, 1)[0].ranks]
    [(0, [4, 6]), (1, [5, 7])]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.partition import samples_per_rank
from lightning_resumable_data.index.skips import skipped, to_base
from lightning_resumable_data.lightning._step_ranges import epoch_batches, step_ranges
from lightning_resumable_data.lightning.history import DataHistory, StepBatch
from lightning_resumable_data.samplers._cut_order import skipping
from lightning_resumable_data.samplers._cuts import merge_ranges
from lightning_resumable_data.samplers._rank_order import Order
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler

View = tuple[Order, int, list[tuple[int, int]]]  # an epoch's order as read, length, cuts

__all__ = [
    "RankSamples",
    "TracedBatch",
    "replay_changes",
    "trace_step",
]


@dataclass(frozen=True)
class RankSamples:
    """What one rank trained in one batch.

    Attributes:
        rank: The data-parallel rank.
        positions: Positions in the epoch's (padded) global order.
        indices: Dataset indices (a mixture's: global, over its sources in order).
        sources: For a mixture, each sample's source; else ``None``.
        local: For a mixture, each sample's index within its source; else ``None``.
    """

    rank: int
    positions: NDArray[np.int64]
    indices: NDArray[np.int64]
    sources: tuple[str, ...] | None = None
    local: NDArray[np.int64] | None = None


@dataclass(frozen=True)
class TracedBatch:
    """One batch of a step: where it began, its layout and each rank's samples.

    ``start`` is where it began in the epoch's whole order; it differs from
    ``batch.consumed`` (a position of the order that remains) after skipped steps.
    """

    batch: StepBatch
    ranks: tuple[RankSamples, ...]
    start: int = -1
    planned: bool = False  # a step after the checkpoint: what its layout would read next


def trace_step(
    sampler: DistributedSampler,
    history: DataHistory,
    step: int,
    ranks: Sequence[int] | None = None,
    *,
    position: tuple[int, int] | None = None,
    drop_last: bool = False,
) -> list[TracedBatch]:
    """The samples of optimizer ``step``, batch by batch, on ``ranks`` (default: all).

    Args:
        sampler: A sampler with the run's configuration (its rank and world size do not
            matter; a mixture's must hold the run's schedule of weight changes).
        history: The run's record of batches.
        step: The optimizer step (``trainer.global_step`` while it trained).
        ranks: The ranks to report.
        position: ``(epoch, consumed)`` where the data stood when the record was saved: a
            step after it is *planned*, read as the saved layout would read it next (if
            nothing changes: no resume on another layout, no online weight change).
        drop_last: The loader's ``drop_last`` (how a planned epoch ends).

    Raises:
        ValueError: ``step`` is not in the record (before the record began, or after the
            checkpoint it came from), or a rank outside the step's world.
    """
    batches = history.step_batches(step)
    if batches and history.steps_done is not None and step >= history.steps_done:
        raise ValueError(
            f"step {step} had not finished when this checkpoint was written: it holds "
            f"{len(batches)} of its batches (a checkpoint written between the batches of an "
            "accumulated step, as ModelCheckpoint can be under accumulate_grad_batches); "
            "trace it from a later checkpoint."
        )
    planned = not batches and position is not None and step >= (history.steps_done or 0)
    if planned and position is not None:
        batches = _planned(sampler, history, step, position, drop_last)
    if not batches:
        finished = history.finished_steps
        covered = "nothing" if finished is None else "steps {} to {}".format(*finished)
        raise ValueError(
            f"step {step} is not in this checkpoint's data history, which covers {covered}; "
            "trace a step the run had trained when the checkpoint was written (a later "
            "checkpoint covers later steps)."
        )
    traced, orders = [], {}
    for batch in batches:
        wanted = range(batch.world) if ranks is None else ranks
        bad = [r for r in wanted if not 0 <= r < batch.world]
        if bad:
            raise ValueError(f"ranks {bad} are outside the world of step {step} ({batch.world}).")
        if batch.epoch not in orders:  # an epoch's order once (randperm builds the epoch)
            orders[batch.epoch] = _epoch_order(sampler, history, batch.epoch)
        view = orders[batch.epoch]
        rows = tuple(_rank(sampler, view, batch, r) for r in wanted)
        start = int(_base(np.array([batch.consumed], np.int64), view)[0])
        traced.append(TracedBatch(batch, rows, start, planned))
    return traced


def _planned(
    sampler: DistributedSampler,
    history: DataHistory,
    step: int,
    position: tuple[int, int],
    drop_last: bool,
) -> list[StepBatch]:
    """The batches of a step after the record, in the layout it was saved with."""
    if not history.runs or history.steps_done is None:
        return []
    _, _, _, world, batch_size, accumulate, _, limit = history.runs[-1]
    epoch, consumed = position
    width = world * batch_size

    def batches(e: int, at: int) -> int:
        return epoch_batches(
            _epoch_order(sampler, history, e)[1],
            world=world,
            batch_size=batch_size,
            drop_last=drop_last,
            sampler_drop_last=sampler.drop_last,
            limit=limit or None,
            consumed=at,
        )

    ranges = step_ranges(
        (step, step + 1),
        step=history.steps_done,
        epoch=epoch,
        consumed=consumed,
        accumulate=accumulate,
        batches=batches,
        step_samples=width,
    )
    return [
        StepBatch(e, at, world, batch_size, limit or None)
        for e, lo, hi in ranges
        for at in range(lo, hi, width)
    ]


def _base(positions: NDArray[np.int64], view: View) -> NDArray[np.int64]:
    """Positions of the order that remains as positions of the epoch's whole order."""
    return to_base(positions, view[2]) if view[2] else positions


def _epoch_order(sampler: DistributedSampler, history: DataHistory, epoch: int) -> View:
    """``epoch``'s order as it was read (less its skipped steps), its length and the cuts."""
    if history.quarantine and not sampler.quarantined:  # the run's, from its record
        sampler.quarantined, sampler._cuts = list(history.quarantine), {}
    order = sampler._order(epoch)
    ranges = merge_ranges(history.skips.get(epoch, ()), sampler.cuts(epoch))
    if not ranges:
        return order, sampler.epoch_length, []
    return skipping(order, ranges), sampler.epoch_length - skipped(ranges), ranges


def replay_changes(sampler: DistributedSampler, history: DataHistory) -> None:
    """Give a fresh mixture sampler the run's online weight changes, from the history.

    A checkpoint's schedule keeps the online changes of its own epoch only; the history
    keeps all of them, so earlier epochs' orders can be rebuilt. Online changes only cut
    the plan, so adding them in any order gives the run's order.
    """
    if not isinstance(sampler, MixtureSampler):
        return
    sources = len(sampler.mixture.names)
    for epoch, position, temperature, *weights in history.changes:
        where = {"epoch": int(epoch), "position": int(position)}
        weights += [0.0] * (sources - len(weights))  # made before sources were appended
        sampler.update_weights(weights, temperature, **where, kind="online")


def _count(sampler: DistributedSampler, length: int, batch: StepBatch, rank: int) -> int:
    """Rank ``rank``'s samples in ``batch`` of an epoch of ``length`` positions."""
    start, world = batch.consumed, batch.world
    # every rank reads the same count: the epoch's ragged tail is padded (or dropped) ...
    left = samples_per_rank(length - start, world, sampler.drop_last)
    if batch.limit is not None and batch.limit < start + left * world:
        left = max(0, -(-(batch.limit - start - rank) // world))  # ... or the trainer's limit
    return min(batch.batch_size, left)


def _rank(sampler: DistributedSampler, view: View, batch: StepBatch, rank: int) -> RankSamples:
    """Rank ``rank``'s samples of ``batch``; ``view``: its epoch's order, length and cuts."""
    order, length, _ = view
    count = _count(sampler, length, batch, rank)
    positions = batch.consumed + rank + batch.world * np.arange(count, dtype=np.int64)
    indices = np.asarray(order(positions % max(length, 1)), dtype=np.int64)
    positions = _base(positions, view)
    if isinstance(sampler, MixtureSampler):
        dataset = sampler.mixture
        starts = np.cumsum([0, *dataset.sizes], dtype=np.int64)
        source = np.searchsorted(starts, indices, side="right") - 1
        sources = tuple(dataset.names[s] for s in source.tolist())
        return RankSamples(rank, positions, indices, sources, indices - starts[source])
    return RankSamples(rank, positions, indices)
