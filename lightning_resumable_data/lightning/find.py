"""When was a sample trained, and when will it be: the inverse of :func:`trace_step`.

For each epoch searched, the sample's places in the epoch's whole order (the *base*
positions) come from the order's inverse where one exists, else from one vectorised pass
over the epoch's order:

* a single dataset's Feistel or unshuffled order: O(1) an epoch
  (:func:`~lightning_resumable_data.index.inverse.order_positions`); ``randperm``: one
  vectorised pass over the epoch;
* a mixture: its source's passes inverted at the sample, each draw placed by bisection
  (:mod:`~lightning_resumable_data.lightning._mixture_inverse`: O(passes + hits x log^2 L),
  each position checked against the forward order; if one failed, :func:`scan`, one
  vectorised pass over the epoch). A source is read as passes, so a sample can be drawn
  several times in an epoch, and every draw is found.

A base position cut from its epoch (a recorded ``lrd skip`` or quarantine) was never read;
the others are mapped to the order that remains and looked up in the record's batches
(recorded steps) or in the saved layout's walk over the steps after the checkpoint
(planned ones, as :func:`trace_step` plans them). Positions are named as trace names them.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=False)
    >>> find_sample(sampler, DataHistory([[0, 0, 0, 2, 2, 1, 3, 0]]), 5)
    [Occurrence(epoch=0, step=1, rank=1, position=5, planned=False)]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

from lightning_resumable_data.lightning._mixture_inverse import mixture_positions
from lightning_resumable_data.lightning._step_ranges import epoch_batches
from lightning_resumable_data.lightning.history import DataHistory, StepBatch
from lightning_resumable_data.lightning.trace import View, _base, _count, _epoch_order
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["CHUNK", "Occurrence", "find_sample", "sample_index", "scan"]

CHUNK: Final = 1 << 20  # positions of a mixture's order computed at once by find


@dataclass(frozen=True)
class Occurrence:
    """Where a sample was (or, ``planned``, will be) trained: epoch, step, rank, position.

    ``position`` is the global position in the epoch's whole order, as ``lrd trace`` names
    it; ``planned``: a step after the checkpoint, read as its saved layout would read it.
    """

    epoch: int
    step: int
    rank: int
    position: int
    planned: bool = False


def sample_index(sampler: DistributedSampler, index: int, source: str | None = None) -> int:
    """The dataset index to find: ``index`` itself, or for a mixture's ``source`` its global one.

    Raises:
        ValueError: A source for a single dataset, an unknown source, or an index out of range.

    Example:
        >>> from lightning_resumable_data import MixtureDataset
        >>> mix = MixtureDataset({"a": range(5), "b": range(3)})
        >>> sample_index(MixtureSampler(mix, [1.0, 1.0], 1, 0), 2, "b")
        7
    """
    if source is not None:
        if not isinstance(sampler, MixtureSampler):
            raise ValueError(
                f"source {source!r} names a source of a mixture, but this run read a single "
                f"dataset ({sampler.KIND}); find its sample by its dataset index alone."
            )
        names = sampler.mixture.names
        if source not in names:
            raise ValueError(
                f"the mixture has no source {source!r}; its sources are {list(names)}."
            )
        size = sampler.mixture.sizes[names.index(source)]
        if not 0 <= index < size:
            raise ValueError(
                f"sample {index} is out of range for source {source!r} of {size} samples."
            )
        return int(sampler.mixture.offsets[source]) + index
    mixture = isinstance(sampler, MixtureSampler)
    size = len(sampler.mixture) if isinstance(sampler, MixtureSampler) else sampler.epoch_length
    if not 0 <= index < size:
        what = "mixture (a global index over its sources)" if mixture else "dataset"
        raise ValueError(f"sample {index} is out of range for a {what} of {size} samples.")
    return index


def find_sample(
    sampler: DistributedSampler,
    history: DataHistory,
    index: int,
    *,
    source: str | None = None,
    epochs: tuple[int, int | None] | None = None,
    position: tuple[int, int] | None = None,
    drop_last: bool = False,
) -> list[Occurrence]:
    """Every (epoch, step, rank, position) at which ``index`` was trained, in order.

    Args:
        sampler: A sampler with the run's configuration (a mixture's with the run's
            schedule: :func:`~lightning_resumable_data.lightning.trace.replay_changes`).
        history: The run's record of batches.
        index: The dataset index; with ``source``, the index within that mixture source
            (without, a mixture's global index, over its sources in order).
        source: A mixture's source.
        epochs: ``(A, B)``: search epochs ``A`` to ``B - 1`` only, as a slice (``B`` may be
            ``None``: no end). Default: every recorded epoch and, with ``position``, the
            rest of the checkpoint's epoch.
        position: ``(epoch, consumed)`` where the record was saved: steps after it are
            *planned* (``planned=True``), up to epoch ``B - 1`` of ``epochs`` (without
            ``B``: to the end of the checkpoint's epoch), as
            :func:`~lightning_resumable_data.lightning.trace.trace_step` plans them.
        drop_last: The loader's ``drop_last`` (how a planned epoch ends).

    Raises:
        ValueError: What :func:`sample_index` refuses, or an empty or negative ``epochs``.
    """
    target = sample_index(sampler, index, source)
    first, stop = (0, None) if epochs is None else epochs
    if first < 0 or (stop is not None and stop <= first):
        raise ValueError(f"epochs {first}:{stop} is empty; give A:B with 0 <= A < B.")
    found: list[Occurrence] = []
    finished = history.finished_steps or (0, -1)  # none: no recorded step matches
    for epoch in history.epochs:
        if first <= epoch and (stop is None or epoch < stop):
            for padded, view in _positions(sampler, history, epoch, target):
                for step, batch in history.batches_at(epoch, padded):
                    j, rank = divmod(padded - batch.consumed, batch.world)
                    if step <= finished[1] and j < _count(sampler, view[1], batch, rank):
                        where = int(_base(np.array([padded], np.int64), view)[0])
                        found.append(Occurrence(epoch, step, rank, where))
    if position is not None and history.runs and history.steps_done is not None:
        last = position[0] + 1 if stop is None else stop
        for walk in _walk(sampler, history, position, drop_last, last):
            if walk.epoch >= first:
                found += walk.find(sampler, history, target)
    return sorted(found, key=lambda hit: (hit.epoch, hit.step, hit.position))


def _positions(
    sampler: DistributedSampler, history: DataHistory, epoch: int, target: int
) -> Iterator[tuple[int, View]]:
    """Where ``target`` sits in ``epoch``'s order as read (less its cuts), padded tail too."""
    view = _epoch_order(sampler, history, epoch)
    length, cuts = view[1], view[2]
    if isinstance(sampler, MixtureSampler):
        found = mixture_positions(sampler, epoch, target)
        bases = scan(sampler, epoch, target) if found is None else found
    else:
        bases = [int(sampler._positions(epoch, np.array([target], np.int64))[0])]
    for base in bases:
        if any(start <= base < end for start, end in cuts):
            continue  # cut from this epoch: never read in it
        at = base - sum(end - start for start, end in cuts if end <= base)
        for padded in (at, at + length):  # the padded tail wraps around
            yield padded, view


def scan(sampler: DistributedSampler, epoch: int, target: int) -> list[int]:
    """Every position of ``epoch``'s whole order holding ``target``: one vectorised pass.

    In chunks of ``CHUNK`` positions (time in proportion to the epoch, memory bounded).
    """
    order, bases = sampler._order(epoch), []
    for at in range(0, sampler.epoch_length, CHUNK):
        chunk = np.arange(at, min(at + CHUNK, sampler.epoch_length), dtype=np.int64)
        bases += (np.flatnonzero(order(chunk) == target) + at).tolist()
    return bases


@dataclass(frozen=True)
class _Planned:
    """An epoch of the saved layout's walk after the checkpoint (as ``step_ranges`` walks)."""

    epoch: int
    step: int  # the step of the epoch's batch 0 (as Lightning counts its batches)
    batch: int  # the first batch after the checkpoint
    offset: int  # where batches begin, modulo their width (a resume between two batches)
    count: int  # the epoch's batches, as Lightning counts them
    layout: tuple[int, int, int, int | None]  # world, batch size, accumulate, limit

    def find(
        self, sampler: DistributedSampler, history: DataHistory, target: int
    ) -> list[Occurrence]:
        world, size, accumulate, limit = self.layout
        width, found = world * size, []
        for padded, view in _positions(sampler, history, self.epoch, target):
            m = (padded - self.offset) // width
            if padded < self.offset or not self.batch <= m < self.count:
                continue
            batch = StepBatch(self.epoch, m * width + self.offset, world, size, limit)
            j, rank = divmod(padded - batch.consumed, world)
            if j < _count(sampler, view[1], batch, rank):
                where = int(_base(np.array([padded], np.int64), view)[0])
                step = self.step + m // accumulate
                found.append(Occurrence(self.epoch, step, rank, where, planned=True))
        return found


def _walk(
    sampler: DistributedSampler,
    history: DataHistory,
    position: tuple[int, int],
    drop_last: bool,
    stop: int,
) -> Iterator[_Planned]:
    """The planned epochs before ``stop``, from the checkpoint's position and last layout."""
    _, _, _, world, size, accumulate, _, limit = history.runs[-1]
    epoch, consumed = position
    step, width = history.steps_done or 0, world * size
    batch, offset = divmod(consumed, width)  # Lightning's count, and the misalignment
    layout = (world, size, accumulate, limit or None)
    while epoch < stop:
        length = _epoch_order(sampler, history, epoch)[1]
        count = batch + epoch_batches(
            length, world=world, batch_size=size, drop_last=drop_last,
            sampler_drop_last=sampler.drop_last, limit=limit or None, consumed=consumed,
        )  # fmt: skip
        base = batch // accumulate
        yield _Planned(epoch, step - base, batch, offset, count, layout)
        step += max(-(-count // accumulate) - base, 0)
        epoch, batch, offset, consumed = epoch + 1, 0, 0, 0
        if count == 0:
            break
