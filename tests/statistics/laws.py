"""Exact laws of a uniform random permutation, as z-scores (shared by the tests and battery).

Every function takes a batch of permutations ``perms`` of shape ``(m, n)`` (one per row,
``m`` independent keys) and returns a z-score: about standard normal under the uniform law,
large when the batch deviates from it. Chi-square statistics are turned into z-scores with
the Wilson-Hilferty cube-root approximation, so every test reads the same way: ``|z| < 4``
is a pass at a false-alarm rate of about 6e-5 per test (one-sided tests use ``z < 4``).

This folder has no ``__init__.py`` on purpose: ``statistics`` is also a standard-library
module, and a package of that name on ``sys.path`` would shadow it.

Example:
    >>> rng = np.random.default_rng(0)
    >>> perms = np.array([rng.permutation(5) for _ in range(2000)])
    >>> abs(full_law(perms).z) < 4
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Perms = NDArray[np.int64]

__all__ = [
    "Score",
    "adjacency",
    "cycle_counts",
    "cycles",
    "fixed_points_mean",
    "fixed_points_variance",
    "full_law",
    "parity",
    "position_law",
    "wilson_hilferty",
]


@dataclass(frozen=True)
class Score:
    """A test's statistic, its degrees of freedom (0 when not a chi-square) and z-score."""

    statistic: float
    df: int
    z: float


def wilson_hilferty(chi2: float, df: int) -> float:
    """The z-score of a chi-square value on ``df`` degrees of freedom.

    Example:
        >>> round(wilson_hilferty(100.0, 100), 2)
        0.05
    """
    return float(((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df)))


def _chi2(counts: NDArray[np.float64], expected: float, cells: int) -> float:
    """Pearson's chi-square over ``cells`` equiprobable cells (``counts`` lists the seen ones)."""
    seen = float(((counts - expected) ** 2).sum())
    return (seen + (cells - counts.size) * expected**2) / expected


def full_law(perms: Perms) -> Score:
    """Chi-square of the ``n!`` permutations' frequencies against uniform (small ``n``)."""
    m, n = perms.shape
    codes = np.zeros(m, dtype=np.int64)
    for column in range(n):
        codes = codes * n + perms[:, column]
    _, counts = np.unique(codes, return_counts=True)
    cells = math.factorial(n)
    chi2 = _chi2(counts.astype(np.float64), m / cells, cells)
    return Score(chi2, cells - 1, wilson_hilferty(chi2, cells - 1))


def position_law(perms: Perms) -> Score:
    """Chi-square of the ``n x n`` (position, value) table: each value equally likely anywhere."""
    m, n = perms.shape
    cells = np.arange(n) * n + perms  # (m, n)
    counts = np.bincount(cells.ravel(), minlength=n * n).astype(np.float64)
    chi2 = float(((counts - m / n) ** 2).sum() / (m / n))
    df = (n - 1) ** 2
    return Score(chi2, df, wilson_hilferty(chi2, df))


def _mean_z(values: NDArray[np.float64], mean: float, variance: float | None = None) -> Score:
    """z of the sample mean against ``mean`` (sample variance unless ``variance`` is given)."""
    spread = float(values.var(ddof=1)) if variance is None else variance
    z = (float(values.mean()) - mean) / math.sqrt(spread / values.size) if spread > 0 else 0.0
    return Score(float(values.mean()), 0, z)


def cycle_counts(perms: Perms) -> NDArray[np.int64]:
    """Number of cycles of each permutation (pointer doubling: O(m n log n))."""
    m, n = perms.shape
    lowest = np.broadcast_to(np.arange(n), (m, n)).copy()  # min over the orbit seen so far
    jump = perms.copy()  # perm composed with itself 2**k times
    for _ in range(max(1, math.ceil(math.log2(n))) + 1):
        np.minimum(lowest, np.take_along_axis(lowest, jump, axis=1), out=lowest)
        jump = np.take_along_axis(jump, jump, axis=1)
    counts: NDArray[np.int64] = (lowest == np.arange(n)).sum(axis=1)
    return counts


def parity(perms: Perms) -> Score:
    """z of the fraction of odd permutations against 1/2 (``n >= 2``)."""
    n = perms.shape[1]
    odd = ((n - cycle_counts(perms)) % 2).astype(np.float64)
    return _mean_z(odd, 0.5, 0.25)


def cycles(perms: Perms) -> Score:
    """z of the mean number of cycles against the harmonic number ``H_n``."""
    n = perms.shape[1]
    harmonic = float(np.sum(1.0 / np.arange(1, n + 1)))
    return _mean_z(cycle_counts(perms).astype(np.float64), harmonic)


def adjacency(perms: Perms) -> Score:
    """z of the mean count of neighbours differing by 1 against ``2 (n - 1) / n``."""
    n = perms.shape[1]
    counts = (np.abs(np.diff(perms, axis=1)) == 1).sum(axis=1).astype(np.float64)
    return _mean_z(counts, 2 * (n - 1) / n)


def fixed_points_mean(perms: Perms) -> Score:
    """z of the mean number of fixed points against 1 (variance 1, ``n >= 2``)."""
    n = perms.shape[1]
    counts = (perms == np.arange(n)).sum(axis=1).astype(np.float64)
    return _mean_z(counts, 1.0, 1.0)


def fixed_points_variance(perms: Perms) -> Score:
    """z of the sample variance of the fixed points against 1 (``n >= 4``).

    For ``n >= 4`` the first four moments are Poisson(1)'s, so the sample variance has
    variance about ``(mu_4 - 1) / m = 3 / m``.
    """
    m, n = perms.shape
    counts = (perms == np.arange(n)).sum(axis=1).astype(np.float64)
    variance = float(counts.var(ddof=1))
    return Score(variance, 0, (variance - 1.0) / math.sqrt(3.0 / m))
