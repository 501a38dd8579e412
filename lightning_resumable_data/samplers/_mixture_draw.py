"""What a mixture position draws: its segment's arrangement, the source, the sample (pure).

An epoch of a :class:`MixtureSampler` is cut into segments at its weight changes
(:class:`Segment`: exact per-source counts, a keyed arrangement); a global position draws
from the source its segment's arrangement puts there, and its draw number picks the sample
from the source's passes. :func:`locate` finds sources and draw numbers,
:func:`mixture_order` turns them into dataset indices.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.mixture import (
    Arrangement,
    arrangement,
    mixture_probabilities,
    source_samples,
    target_counts,
)
from lightning_resumable_data.samplers._mixture_added import Added, sources_at

if TYPE_CHECKING:
    from lightning_resumable_data.datasets.mixture import MixtureDataset

__all__ = [
    "RANK_CHUNK",
    "Locate",
    "Segment",
    "handed_on",
    "locate",
    "make_segment",
    "mixture_order",
]

RANK_CHUNK: Final = 1 << 15  # positions of this rank computed ahead at a time, any world

Locate = Callable[[int, NDArray[np.int64]], tuple[NDArray[np.int16], NDArray[np.int64]]]


@dataclass(slots=True)
class Segment:
    """The stretch of an epoch between two weight changes, and how it draws."""

    start: int
    stop: int
    counts: NDArray[np.int64]  # samples per source over the planned length
    key: tuple[int, int, int]
    arrangement: Arrangement | _Prefix
    drawn: NDArray[np.int64]  # draws of each source in the epoch's positions [0, start)


class _Prefix:
    """An arrangement of the first sources of a mixture that got more sources later.

    The positions keep the arrangement they had over the sources of their time; the
    counts list a 0 for each source appended since.
    """

    def __init__(self, inner: Arrangement, sources: int) -> None:
        self.inner, self.sources = inner, sources

    def locate(self, positions: NDArray[np.integer]) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
        """The inner arrangement's sources and draw numbers."""
        return self.inner.locate(positions)

    def counts_before(self, position: int) -> NDArray[np.int64]:
        """Each source's count before ``position``, 0 for the sources appended since."""
        counts = np.zeros(self.sources, dtype=np.int64)
        counts[: len(self.inner.counts)] = self.inner.counts_before(position)
        return counts


def make_segment(
    seed: int,
    epoch: int,
    entry: dict[str, Any],
    stop: int,
    drawn: NDArray[np.int64],
    planned_end: int,
    added: Added = (),
) -> Segment:
    """The segment of schedule ``entry`` in ``epoch``, read up to ``stop``.

    It is planned up to ``planned_end`` (the next declared change) unless its entry
    pinned another end (``plan_end``). It is arranged over the sources that existed where
    it starts: fewer than all where ``added`` records sources appended later.
    """
    start = entry["position"] if entry["epoch"] == epoch else 0
    frozen = entry["plan_end"] is not None and entry["epoch"] == epoch
    end = entry["plan_end"] if frozen else planned_end
    probs = mixture_probabilities(entry["weights"], entry["temperature"])
    counts = target_counts(probs, end - start)
    sources = sources_at(added, epoch, start, len(counts))
    if counts[sources:].any():
        raise ValueError(f"sources appended at a resume weigh > 0 before it: {counts}")
    kept = arrangement(counts[:sources], seed, (epoch, start, end))
    layout = kept if sources == len(counts) else _Prefix(kept, len(counts))
    return Segment(start, stop, counts, (epoch, start, end), layout, drawn)


def handed_on(segment: Segment) -> NDArray[np.int64]:
    """The draws per source after ``segment`` (cut or not), for the next one."""
    return segment.drawn + segment.arrangement.counts_before(segment.stop - segment.start)


def locate(
    plan: Sequence[Segment], positions: NDArray[np.int64]
) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
    """Sources and per-epoch draw numbers at global ``positions`` (only those) of a plan."""
    if len(plan) == 1:
        labels, draws = plan[0].arrangement.locate(positions - plan[0].start)
        return labels, draws + plan[0].drawn[labels]
    labels = np.empty(len(positions), dtype=np.int16)
    draws = np.empty(len(positions), dtype=np.int64)
    if len(positions):  # only the segments the positions fall in: O(log) in the changes
        first = bisect.bisect_right(plan, int(positions.min()), key=_start) - 1
        plan = plan[max(first, 0) : bisect.bisect_right(plan, int(positions.max()), key=_start)]
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


def _start(segment: Segment) -> int:
    return segment.start


def mixture_order(
    mixture: MixtureDataset, seed: int, epoch: int, find: Locate
) -> Callable[[NDArray[np.int64]], NDArray[np.int64]]:
    """The global order of ``epoch`` as a lookup from positions to dataset indices.

    ``find`` gives the sources and draw numbers at positions of an epoch (:func:`locate`
    over the epoch's plan).
    """
    sizes = np.asarray(mixture.sizes, dtype=np.int64)
    offsets = np.asarray(list(mixture.offsets.values()), dtype=np.int64)

    def lookup(positions: NDArray[np.int64]) -> NDArray[np.int64]:
        labels, draws = find(epoch, positions)
        order = np.argsort(labels, kind="stable")  # radix sort: groups by source
        bounds = np.cumsum(np.bincount(labels, minlength=len(sizes)))
        out = np.empty(len(positions), dtype=np.int64)
        for source, (lo, hi) in enumerate(itertools.pairwise([0, *bounds.tolist()])):
            if lo < hi:
                where = order[lo:hi]
                local = source_samples(draws[where], int(sizes[source]), seed, (epoch, source))
                out[where] = offsets[source] + local
        return out

    return lookup
