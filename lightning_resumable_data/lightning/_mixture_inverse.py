"""Where a mixture's sample sits in an epoch's order, without computing the order.

A mixture epoch is a source sequence over per-source pass streams: the ``d``-th draw of
source ``s`` (its draw number) is element ``d mod n`` of pass ``d // n``, a fresh keyed
permutation of its ``n`` samples (:mod:`~lightning_resumable_data.index.passes`). So a
sample ``l`` of ``s`` is drawn once per pass: at draw ``q * n + pi_q^-1(l)`` of pass ``q``
(the pass's network inverted, or a tiny source's exact shuffle tabled), for the passes
the epoch's ``D`` draws of ``s`` reach. Each draw number is then placed by bisection on the
source's count before a position (O(log L) arrangement lookups each). Cost per epoch:
O(D / n) inversions (vectorised) and O(log^2 L) per occurrence, not O(L); a sample drawn
so often that this costs more than a pass over the epoch is left to that pass.

Every position found is checked against the forward order; a mismatch returns ``None``
and the caller falls back to a vectorised pass over the epoch.
"""

from __future__ import annotations

import bisect
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.inverse import _network_inverse
from lightning_resumable_data.index.passes import (
    EXACT_SMALL,
    _round_keys,
    _source_key,
    pass_samples,
)
from lightning_resumable_data.index.permutation import _radices
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["BISECTION_COST", "mixture_positions"]

# A bisection (O(log^2 L) scalar lookups) costs about as much as this many positions of a
# vectorised pass over the order (measured: ~3 ms against ~0.25 us a position).
BISECTION_COST: Final = 16_384


def _offsets(
    local: int, size: int, seed: int, key: tuple[int, int], passes: int
) -> NDArray[np.int64]:
    """Where sample ``local`` sits in each of the first ``passes`` passes of a source."""
    q = np.arange(passes, dtype=np.int64)
    if size == 1:
        return np.zeros(passes, dtype=np.int64)
    if size <= EXACT_SMALL:  # a tiny source's exact shuffle: table each pass
        table = pass_samples(np.arange(passes * size, dtype=np.int64), size, seed, key)
        found: NDArray[np.int64] = np.argmax(table.reshape(passes, size) == local, axis=1)
        return found.astype(np.int64)
    keys = _round_keys(_source_key(seed, key), q.astype(np.uint64))
    a, b = _radices(size)
    x = _network_inverse(np.full(passes, local, dtype=np.uint64), tuple(keys), a, b)  # type: ignore[arg-type]
    outside = np.flatnonzero(x >= np.uint64(size))
    while outside.size:  # the cycle walk, backwards
        walked = _network_inverse(x[outside], tuple(k[outside] for k in keys), a, b)  # type: ignore[misc]
        x[outside] = walked
        outside = outside[walked >= np.uint64(size)]
    return x.view(np.int64)


def mixture_positions(sampler: MixtureSampler, epoch: int, target: int) -> list[int] | None:
    """Every position of ``epoch``'s whole order holding global index ``target``, in order.

    ``None``: scan the epoch instead: the sample is drawn in more than one position of
    ``BISECTION_COST`` (its bisections would cost more than a vectorised pass), or a
    position found is not the target's in the forward order (never expected).
    """
    mixture, length = sampler.mixture, sampler.epoch_length
    starts = np.cumsum([0, *mixture.sizes])
    source = int(np.searchsorted(starts, target, side="right")) - 1
    local, size = target - int(starts[source]), mixture.sizes[source]
    plan = sampler._plan.segments(epoch, 0)  # the epoch's whole plan, from its start
    begins = [segment.start for segment in plan]

    def before(position: int) -> int:
        """Draws of ``source`` in positions ``[0, position)``: one segment's count."""
        segment = plan[max(0, bisect.bisect_right(begins, position) - 1)]
        upto = max(0, min(position, segment.stop) - segment.start)
        return int(segment.drawn[source] + segment.arrangement.counts_before(upto)[source])

    total = before(length)
    passes = -(-total // size)
    if passes * BISECTION_COST > length:
        return None  # drawn so often that one pass over the epoch is cheaper
    draws = np.arange(passes, dtype=np.int64) * size
    draws += _offsets(local, size, sampler.seed, (epoch, source), passes)
    found = []
    for draw in draws[draws < total].tolist():
        lo, hi = 0, length  # the first position whose count before it passes the draw
        while lo < hi:
            mid = (lo + hi) // 2
            if before(mid + 1) > draw:
                hi = mid
            else:
                lo = mid + 1
        found.append(lo)
    if found and not np.all(sampler._order(epoch)(np.array(found, np.int64)) == target):
        return None
    return found
