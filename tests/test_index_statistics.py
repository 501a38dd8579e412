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
