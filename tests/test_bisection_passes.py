"""The two building blocks of the mixture order: the bisection tree and the pass sequences."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.index.bisection import Bisection
from lightning_resumable_data.index.passes import EXACT_SMALL, pass_samples


@given(length=st.integers(1, 3000), share=st.floats(0, 1), data=st.data())
@settings(max_examples=80, deadline=None)
def test_bisection_is_exact_and_random_access(
    length: int, share: float, data: st.DataObject
) -> None:
    ones = round(share * length)
    bits, before = Bisection(length, ones, (length, ones)).locate(np.arange(length))
    assert int(bits.sum()) == ones
    np.testing.assert_array_equal(before, np.cumsum(bits) - bits)  # ones before each position
    picked = sorted(data.draw(st.lists(st.integers(0, length - 1), max_size=30)))
    fresh = Bisection(length, ones, (length, ones))  # no cache, a sparse sorted batch
    got_bits, got_before = fresh.locate(np.array(picked, dtype=np.int64))
    np.testing.assert_array_equal(got_bits, bits[picked])
    np.testing.assert_array_equal(got_before, before[picked])
    at = data.draw(st.integers(0, length))
    assert fresh.ones_before(at) == int(bits[:at].sum())


@given(start=st.integers(0, 2**53 - 5000), stride=st.sampled_from([1, 7, 4096, 2**30]))
@settings(max_examples=20, deadline=None)
def test_bisection_of_huge_lengths_agrees_with_itself(start: int, stride: int) -> None:
    length, ones = 2**53, 2**53 // 3 + 17
    tree = Bisection(length, ones, (1,))
    positions = start + stride * np.arange(64, dtype=np.int64)
    positions = positions[positions < length]
    bits, before = tree.locate(positions)
    for x, bit, b in zip(
        positions[:5].tolist(), bits[:5].tolist(), before[:5].tolist(), strict=True
    ):
        assert Bisection(length, ones, (1,)).ones_before(x) == b  # one position alone
        assert Bisection(length, ones, (1,)).ones_before(x + 1) == b + bit
    assert (np.diff(before) >= 0).all()
    assert (np.diff(before) <= np.diff(positions)).all()


@pytest.mark.parametrize("length", [2**17 + 2**16 - 1, 5 * 2**16 - 1, 3 * 2**17 - 1])
def test_a_sparse_batch_agrees_with_the_whole_sequence_past_the_pivot_levels(length: int) -> None:
    """Many scattered positions (walked from the root together) read the same bits.

    Lengths of m * 2**k - 1 above 2**17 put a ragged last node below the cached pivot
    levels; mutation testing found its split unchecked there.
    """
    ones = length // 3
    bits, before = Bisection(length, ones, (0,)).locate(np.arange(length))
    picked = np.unique(np.random.default_rng(0).integers(0, length, 3000))
    got_bits, got_before = Bisection(length, ones, (0,)).locate(picked)
    np.testing.assert_array_equal(got_bits, bits[picked])
    np.testing.assert_array_equal(got_before, before[picked])


def test_bisection_refuses_an_empty_sequence_and_more_ones_than_positions() -> None:
    for length, ones in [(0, 0), (4, 5), (4, -1)]:
        with pytest.raises(ValueError, match="need length >= 1 and 0 <= ones <= length"):
            Bisection(length, ones, (0,))


@given(size=st.integers(1, 300), passes=st.integers(1, 4), key=st.integers(0, 2**64 - 1))
@settings(max_examples=60, deadline=None)
def test_every_pass_is_a_permutation_and_any_draw_is_random_access(
    size: int, passes: int, key: int
) -> None:
    draws = np.arange(size * passes)
    samples = pass_samples(draws, size, 3, (key,))
    for p in range(passes):
        assert sorted(samples[p * size : (p + 1) * size].tolist()) == list(range(size))
    picked = draws[::-7]  # any order, any subset
    np.testing.assert_array_equal(pass_samples(picked, size, 3, (key,)), samples[picked])


def test_tiny_sources_get_every_permutation_equally_often() -> None:
    # An exact shuffle per pass: all 3! orders of a 3-sample source with frequency 1/6.
    size, passes = 3, 60_000
    samples = pass_samples(np.arange(size * passes), size, 0, (5,)).reshape(passes, size)
    codes = samples @ np.array([9, 3, 1])
    seen = np.bincount(codes, minlength=27)[
        [9 * a + 3 * b + c for a, b, c in itertools.permutations(range(3))]
    ]
    expected = passes / math.factorial(size)
    chi2 = float((((seen - expected) ** 2) / expected).sum())
    assert chi2 < 25.7  # chi-square, 5 degrees of freedom: p = 1e-4
    assert size <= EXACT_SMALL


def test_passes_are_independent_of_each_other() -> None:
    # Where sample 0 sits in pass p and pass p + 1: independent, so the pair is uniform.
    size, passes = 17, 40_000  # the network's smallest domain
    samples = pass_samples(np.arange(size * passes), size, 0, (6,)).reshape(passes, size)
    where = np.argmax(samples == 0, axis=1)
    pairs = np.bincount(where[:-1] * size + where[1:], minlength=size * size)
    expected = (passes - 1) / size**2
    chi2 = float((((pairs - expected) ** 2) / expected).sum())
    dof = size * size - 1
    assert chi2 < dof + 4.75 * math.sqrt(2 * dof)  # about p = 1e-5


def test_the_smallest_sequences() -> None:
    # Found by mutation testing: hypothesis did not reach length 1 with a one.
    for length, ones in [(1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (3, 2)]:
        bits, before = Bisection(length, ones, (9,)).locate(np.arange(length))
        assert int(bits.sum()) == ones
        np.testing.assert_array_equal(before, np.cumsum(bits) - bits)
        assert Bisection(length, ones, (9,)).ones_before(length) == ones
    with pytest.raises(ValueError, match="need length >= 1 and 0 <= ones <= length"):
        Bisection(0, 0, (9,))
    with pytest.raises(ValueError, match="need length >= 1 and 0 <= ones <= length"):
        Bisection(3, 4, (9,))
