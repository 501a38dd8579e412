"""Mixture index math: probabilities, exact target counts, and the interleaved order.

A segment of a mixture epoch (the stretch between two weight changes) of length ``L`` draws
exactly ``counts[j]`` samples from source ``j`` (:func:`target_counts`). Which source each
position draws from is the random-access arrangement of
:mod:`~lightning_resumable_data.index.arrangement` (exact totals, spread evenly at every
scale, any position in O(log L)). The ``d``-th draw of a source in an epoch (its draw number,
the count of the source before the position) is element ``d`` of the source's pass
sequence (:mod:`~lightning_resumable_data.index.passes`): pass ``d // n`` is a fresh keyed
permutation of its ``n`` samples. So a source repeats a sample only after a whole pass,
whatever the weights and however often they change.

Example:
    >>> probs = mixture_probabilities([3.0, 1.0], temperature=1.0)
    >>> probs.tolist()
    [0.75, 0.25]
    >>> target_counts(probs, 10).tolist()
    [8, 2]
    >>> labels, draws = segment_slice([8, 2], seed=0, key=(0, 0), start=0, stop=10)
    >>> int((labels == 0).sum()), sorted(draws[labels == 1].tolist())
    (8, [0, 1])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.arrangement import MAX_SEGMENT, Arrangement, arrangement
from lightning_resumable_data.index.passes import pass_samples

Counts = Sequence[int] | NDArray[np.integer]

__all__ = [
    "MAX_SEGMENT",
    "Arrangement",
    "Counts",
    "arrangement",
    "check_weights",
    "counts_before",
    "mixture_probabilities",
    "segment_slice",
    "source_samples",
    "target_counts",
]


def check_weights(weights: Sequence[float], names: Sequence[str]) -> NDArray[np.float64]:
    """Return ``weights`` as an array after checking they are finite, >= 0 and not all zero.

    Example:
        >>> check_weights([1, 0], ["web", "code"]).tolist()
        [1.0, 0.0]
    """
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(
            f"weights={weights!r} must be one number per source {list(names)} (or, where "
            "accepted, a mapping of source names to numbers)."
        )
    for name, weight in zip(names, weights, strict=False):
        if isinstance(weight, bool) or not isinstance(
            weight, (int, float, np.integer, np.floating)
        ):
            raise TypeError(
                f"the weight of source {name!r} is {weight!r}; give a number (e.g. 0.5) for "
                "each source."
            )
    values = np.asarray(weights, dtype=np.float64)
    if values.shape != (len(names),):
        raise ValueError(
            f"got {len(values)} weights for {len(names)} sources {list(names)}; give one "
            "weight per source, in the sources' order, or a mapping {name: weight}."
        )
    shown = dict(zip(names, (float(w) for w in values), strict=True))
    if not np.isfinite(values).all():
        raise ValueError(f"weights {shown} must be finite numbers (no NaN or inf).")
    if (values < 0).any():
        raise ValueError(f"weights {shown} must be >= 0.")
    if not values.any():
        raise ValueError(f"weights {shown} are all zero; give at least one source weight > 0.")
    return values


def mixture_probabilities(weights: Sequence[float], temperature: float) -> NDArray[np.float64]:
    """Normalise ``weights`` with temperature: ``p ~ w ** (1 / temperature)``.

    ``temperature -> 0`` approaches the argmax, ``1`` keeps the weights, large values
    approach uniform over the sources with non-zero weight. Computed in log space, so tiny
    temperatures do not overflow.

    Example:
        >>> mixture_probabilities([1.0, 4.0], temperature=2.0).tolist()
        [0.3333333333333333, 0.6666666666666666]
    """
    if isinstance(temperature, bool) or not (
        isinstance(temperature, numbers.Real) and math.isfinite(temperature)
    ):
        raise ValueError(f"temperature={temperature!r} must be a finite number > 0.")
    if temperature <= 0:
        raise ValueError(f"temperature={temperature} must be > 0 (1.0 keeps the weights).")
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        logs = np.log(w)
        logits = logs / float(temperature)
        if not np.array_equal(np.isfinite(logits), np.isfinite(logs)):
            # a tiny temperature overflowed a finite log weight: shift first, then divide
            logits = (logs - logs.max()) / float(temperature)
    logits -= logits.max()
    p = np.exp(logits)
    normalised: NDArray[np.float64] = p / p.sum()
    return normalised


def target_counts(probabilities: NDArray[np.float64], budget: int) -> NDArray[np.int64]:
    """Round ``probabilities * budget`` to integers that sum exactly to ``budget``.

    The rounding fix, by largest remainder: every source gets the floor of its exact share,
    and the samples left over go one each to the sources with the largest fractional parts
    (ties to the more probable source). Each count is within 1 of its exact share and
    zero-probability sources stay at zero. (KempnerForge rounds and then adds or removes one
    in probability order, which can miss the share by 1.5.)

    Example:
        >>> target_counts(np.array([1 / 3, 1 / 3, 1 / 3]), 10).tolist()
        [4, 3, 3]
    """
    if not (np.all(np.isfinite(probabilities)) and np.any(probabilities > 0)):
        raise ValueError(f"probabilities {probabilities.tolist()} must be finite, some > 0.")
    exact = probabilities * budget
    counts = np.floor(exact).astype(np.int64)
    left = budget - int(counts.sum())
    candidates = np.flatnonzero(probabilities > 0)
    # Largest fractional part first; ties to the larger probability, then the lower index.
    order = candidates[
        np.lexsort((candidates, -probabilities[candidates], -(exact - counts)[candidates]))
    ]
    while left > 0:  # more than one round only if float error shaved the floors
        take = order[:left]
        counts[take] += 1
        left -= len(take)
    while left < 0:  # float error the other way (budgets near 2**53)
        take = order[::-1][counts[order[::-1]] > 0][:-left]
        counts[take] -= 1
        left += len(take)
    return counts


def counts_before(
    counts: Counts, seed: int, key: tuple[int, ...], position: int
) -> NDArray[np.int64]:
    """Samples of each source in the segment's first ``position`` places, in O(log L).

    Example:
        >>> counts_before([8, 2], seed=0, key=(0, 0), position=10).tolist()
        [8, 2]
    """
    return arrangement(counts, seed, key).counts_before(position)


def segment_slice(
    counts: Counts, seed: int, key: tuple[int, ...], start: int, stop: int
) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
    """Sources and draw numbers at positions ``[start, stop)`` of a segment.

    Args:
        counts: Samples per source in the whole segment.
        seed: The run's seed.
        key: What identifies the segment (e.g. ``(epoch, start, end)``).
        start: First position, relative to the segment.
        stop: One past the last position.

    Returns:
        ``labels[i]``: the source at position ``start + i``; ``draws[i]``: its draw number
        in the segment (see :mod:`~lightning_resumable_data.index.arrangement`).
    """
    return arrangement(counts, seed, key).locate(np.arange(start, stop, dtype=np.int64))


def source_samples(
    draws: NDArray[np.int64], size: int, seed: int, key: tuple[int, ...]
) -> NDArray[np.int64]:
    """Map a source's draw numbers to its sample indices (a fresh permutation per pass).

    Example:
        >>> first_pass = source_samples(np.arange(5), 5, seed=0, key=(0, 1))
        >>> sorted(first_pass.tolist())
        [0, 1, 2, 3, 4]
    """
    return pass_samples(draws, size, seed, key)
