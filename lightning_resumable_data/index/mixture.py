"""Mixture index math: probabilities, exact target counts, and the interleaved order.

A segment of a mixture epoch (the stretch between two weight changes) of length ``L`` draws
exactly ``counts[j]`` samples from source ``j`` (:func:`target_counts`). Its order is a
uniformly random arrangement of that multiset, built so that any stretch of it can be
computed directly, without generating what comes before:

* a binary tree over the segment splits each node's counts between its halves with a
  multivariate hypergeometric draw keyed on ``(seed, epoch, segment, node)`` — exactly the
  distribution of a uniform shuffle's left-half counts;
* a leaf (at most ``LEAF_SIZE`` positions) shuffles its multiset with its own key.

So the counts before any position are known from ``log2(L / LEAF_SIZE)`` draws (O(log L) to
resume, never O(L)), and each source's occurrences come in time order: the ``d``-th sample
drawn from a source is its draw number ``d``. A source of ``n`` samples serves draw ``d``
from pass ``d // n`` of its own stream, a fresh keyed permutation per pass, so no source
repeats a sample before it has used all of them (oversampling reshuffles).

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

import functools
import math
import numbers
from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.index.permutation import feistel_permute

Counts = Sequence[int] | NDArray[np.integer]

__all__ = [
    "LEAF_SIZE",
    "Counts",
    "check_weights",
    "counts_before",
    "mixture_probabilities",
    "segment_slice",
    "source_samples",
    "target_counts",
]

LEAF_SIZE: Final = 1 << 16
_SPLIT_STREAM: Final = 0x53504C54  # "SPLT"
_LEAF_STREAM: Final = 0x4C454146  # "LEAF"
_SOURCE_STREAM: Final = 0x53524345  # "SRCE"


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
    with np.errstate(divide="ignore"):
        logits = np.log(w) / float(temperature)
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


def _rng(seed: int, key: tuple[int, ...], stream: int, *node: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *key, *node, stream]))


def _split(
    counts: NDArray[np.int64], seed: int, key: tuple[int, ...], start: int, length: int
) -> tuple[NDArray[np.int64], int]:
    """Split a node's counts between its halves; return the left counts and the midpoint."""
    half = length // 2
    rng = _rng(seed, key, _SPLIT_STREAM, start, length)
    left = rng.multivariate_hypergeometric(counts, half, method="marginals")
    return left.astype(np.int64), start + half


def counts_before(
    counts: Counts, seed: int, key: tuple[int, ...], position: int
) -> NDArray[np.int64]:
    """Samples of each source in the segment's first ``position`` places, in O(log L).

    Example:
        >>> counts_before([8, 2], seed=0, key=(0, 0), position=10).tolist()
        [8, 2]
    """
    node = np.asarray(counts, dtype=np.int64)
    start, length = 0, int(node.sum())
    if not 0 <= position <= length:
        raise ValueError(f"position={position} must be in [0, {length}].")
    before = np.zeros_like(node)
    while length > LEAF_SIZE:
        left, mid = _split(node, seed, key, start, length)
        if position < mid:
            node, length = left, mid - start
        else:
            before += left
            node, start, length = node - left, mid, start + length - mid
    if position > start:
        labels = _leaf_labels(node, seed, key, start, length)
        before += np.bincount(labels[: position - start], minlength=len(node))
    return before


def _leaf_labels(
    counts: NDArray[np.int64], seed: int, key: tuple[int, ...], start: int, length: int
) -> NDArray[np.int16]:
    return _cached_leaf(tuple(counts.tolist()), seed, key, start, length)


@functools.lru_cache(maxsize=4)
def _cached_leaf(
    counts: tuple[int, ...], seed: int, key: tuple[int, ...], start: int, length: int
) -> NDArray[np.int16]:
    """A leaf's shuffled labels; cached because consecutive chunks share boundary leaves."""
    labels = np.repeat(np.arange(len(counts), dtype=np.int16), counts)
    shuffled: NDArray[np.int16] = _rng(seed, key, _LEAF_STREAM, start, length).permutation(labels)
    shuffled.flags.writeable = False  # shared by the cache
    return shuffled


def _leaves(
    counts: NDArray[np.int64], seed: int, key: tuple[int, ...], start: int, stop: int
) -> Iterator[tuple[int, NDArray[np.int16], NDArray[np.int64]]]:
    """Yield ``(leaf_start, leaf_labels, counts_before_leaf)`` for leaves meeting [start, stop)."""
    stack = [(0, int(counts.sum()), counts, np.zeros_like(counts))]
    while stack:
        node_start, length, node, before = stack.pop()
        if node_start >= stop or node_start + length <= start:
            continue
        if length <= LEAF_SIZE:
            yield node_start, _leaf_labels(node, seed, key, node_start, length), before
            continue
        left, mid = _split(node, seed, key, node_start, length)
        # Right child first on the stack, so leaves come out in order.
        stack.append((mid, node_start + length - mid, node - left, before + left))
        stack.append((node_start, mid - node_start, left, before))


def segment_slice(
    counts: Counts, seed: int, key: tuple[int, ...], start: int, stop: int
) -> tuple[NDArray[np.int16], NDArray[np.int64]]:
    """Sources and draw numbers at positions ``[start, stop)`` of a segment.

    Args:
        counts: Samples per source in the whole segment.
        seed: The run's seed.
        key: What identifies the segment (e.g. ``(epoch, segment index)``).
        start: First position, relative to the segment.
        stop: One past the last position.

    Returns:
        ``labels[i]``: the source at position ``start + i``; ``draws[i]``: how many samples
        that source drew in this segment before it.
    """
    node = np.asarray(counts, dtype=np.int64)
    labels, draws = [], []
    for leaf_start, leaf, before in _leaves(node, seed, key, start, stop):
        occurrence = np.empty(len(leaf), dtype=np.int64)
        order = np.argsort(leaf, kind="stable")
        group_start = np.concatenate(([0], np.cumsum(np.bincount(leaf, minlength=len(node)))))
        occurrence[order] = np.arange(len(leaf)) - group_start[leaf[order]]
        lo, hi = max(start - leaf_start, 0), min(stop - leaf_start, len(leaf))
        labels.append(leaf[lo:hi])
        draws.append(occurrence[lo:hi] + before[leaf[lo:hi]])
    if not labels:
        return np.empty(0, dtype=np.int16), np.empty(0, dtype=np.int64)
    return np.concatenate(labels), np.concatenate(draws)


def source_samples(
    draws: NDArray[np.int64], size: int, seed: int, key: tuple[int, ...]
) -> NDArray[np.int64]:
    """Map a source's draw numbers to its sample indices (a fresh permutation per pass).

    Example:
        >>> first_pass = source_samples(np.arange(5), 5, seed=0, key=(0, 1))
        >>> sorted(first_pass.tolist())
        [0, 1, 2, 3, 4]
    """
    out = np.empty(len(draws), dtype=np.int64)
    passes = draws // size
    for pass_ in np.unique(passes).tolist():
        where = passes == pass_
        keys = np.random.SeedSequence([seed, *key, pass_, _SOURCE_STREAM]).generate_state(
            6, np.uint64
        )
        out[where] = feistel_permute(draws[where] % size, size, keys.astype(np.uint64))
    return out
