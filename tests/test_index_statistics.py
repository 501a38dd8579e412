"""Fast statistical tests of the ``"feistel"`` shuffle, each with NumPy as the control.

Every test draws a batch of permutations from fixed keys (so the result is deterministic)
and requires the same bound of the shuffle under test and of NumPy's
``Generator.permutation``: a bound NumPy passes is a calibrated one. The exact laws are in
``tests/statistics/laws.py``; the long battery is ``tests/statistics/battery.py``.

``feistel`` is the public path (the exact keyed shuffle at these sizes); ``network`` forces
the Feistel network (the path above ``EXACT_THRESHOLD``) down to small ``n``, where a
network's flaws show first: before 0.2 it never made an odd permutation at n = 9 or 25 and
made 3-4% too many neighbours differing by one at n = 100.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lightning_resumable_data.index import feistel_slice
from lightning_resumable_data.index.permutation import _network_permute

sys.path.insert(0, str(Path(__file__).parent / "statistics"))
import laws

Z_BOUND = 4.0  # |z| < 4: about 6e-5 false alarms per test under the uniform law
Draw = Callable[[int, int], np.ndarray]


def feistel(n: int, m: int) -> np.ndarray:
    return np.stack([feistel_slice(n, seed, 0, 0, n) for seed in range(m)])


def network(n: int, m: int) -> np.ndarray:
    return np.stack([_network_permute(np.arange(n), n, (seed, 7)) for seed in range(m)])


def numpy(n: int, m: int) -> np.ndarray:
    rng = np.random.default_rng(20_260_101 + n)
    return rng.permuted(np.tile(np.arange(n), (m, 1)), axis=1)


@pytest.mark.parametrize("n", [4, 5])
@pytest.mark.parametrize("draw", [feistel, numpy])
def test_full_permutation_law(n: int, draw: Draw) -> None:
    score = laws.full_law(draw(n, 20_000))
    assert score.z < Z_BOUND, f"chi2={score.statistic:.0f} on {score.df} df (z={score.z:.1f})"


@pytest.mark.parametrize("n", [9, 25])
@pytest.mark.parametrize(("draw", "m"), [(feistel, 20_000), (network, 4_000), (numpy, 20_000)])
def test_odd_and_even_permutations_are_equally_likely(n: int, draw: Draw, m: int) -> None:
    perms = draw(n, m)
    score = laws.parity(perms)
    assert abs(score.z) < Z_BOUND, f"odd fraction {score.statistic:.3f} (z={score.z:.1f})"


@pytest.mark.parametrize(("draw", "m"), [(feistel, 20_000), (network, 4_000), (numpy, 20_000)])
def test_neighbours_and_fixed_points_at_n_100(draw: Draw, m: int) -> None:
    perms = draw(100, m)
    for test in (laws.adjacency, laws.fixed_points_mean, laws.fixed_points_variance):
        score = test(perms)
        assert abs(score.z) < Z_BOUND, f"{test.__name__}: {score.statistic:.3f} (z={score.z:.1f})"


def _streamed(draw_one: Callable[[int], np.ndarray], n: int, m: int) -> tuple[float, float]:
    """z-scores of the mean fixed points (law: mean 1, variance 1) and of the mean count of
    neighbours differing by one (mean and variance 2(n-1)/n), over ``m`` permutations."""
    fixed, adjacent = np.empty(m), np.empty(m)
    identity = np.arange(n)
    for i in range(m):
        perm = draw_one(i)
        fixed[i] = np.count_nonzero(perm == identity)
        adjacent[i] = np.count_nonzero(np.abs(np.diff(perm)) == 1)
    pairs = 2 * (n - 1) / n
    return (
        float((fixed.mean() - 1) / np.sqrt(1 / m)),
        float((adjacent.mean() - pairs) / np.sqrt(pairs / m)),
    )


@pytest.mark.parametrize(("n", "m"), [(2**16 + 1, 300), (2**20 + 7, 100)])
@pytest.mark.parametrize("source", ["feistel", "numpy"])
def test_the_network_above_the_exact_threshold(n: int, m: int, source: str) -> None:
    # The public path at these sizes is the Feistel network itself (not a materialised
    # NumPy shuffle): its fixed points and neighbours follow the uniform law, as NumPy's do.
    rng = np.random.default_rng(n)

    def draw_one(i: int) -> np.ndarray:
        if source == "numpy":
            return rng.permutation(n)
        return feistel_slice(n, seed=i, epoch=3, start=0, stop=n)

    fixed_z, adjacent_z = _streamed(draw_one, n, m)
    assert abs(fixed_z) < Z_BOUND, f"fixed points z={fixed_z:.1f}"
    assert abs(adjacent_z) < Z_BOUND, f"neighbours differing by one z={adjacent_z:.1f}"
