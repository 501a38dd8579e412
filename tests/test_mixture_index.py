import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lightning_resumable_data.index.mixture as mixture
from lightning_resumable_data.index.mixture import (
    counts_before,
    mixture_probabilities,
    segment_slice,
    source_samples,
    target_counts,
)


@pytest.fixture
def small_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mixture, "LEAF_SIZE", 8)  # deep trees with small inputs


weights = st.lists(st.floats(0, 100, allow_nan=False), min_size=1, max_size=6).filter(
    lambda w: sum(w) > 0
)


@given(w=weights, budget=st.integers(0, 10**9), temperature=st.floats(0.05, 20))
def test_target_counts_sum_to_budget_within_one_of_exact(
    w: list[float], budget: int, temperature: float
) -> None:
    p = mixture_probabilities(w, temperature)
    counts = target_counts(p, budget)
    assert counts.sum() == budget
    assert (np.abs(counts - p * budget) < 1 + 1e-6 * budget).all()
    assert (counts[p == 0] == 0).all()


def test_temperature_limits() -> None:
    w = [1.0, 2.0, 7.0]
    np.testing.assert_allclose(mixture_probabilities(w, 1.0), [0.1, 0.2, 0.7])
    assert mixture_probabilities(w, 1e-3).argmax() == 2
    assert mixture_probabilities(w, 1e-3)[2] > 0.999  # T -> 0: the argmax
    np.testing.assert_allclose(mixture_probabilities(w, 1e6), [1 / 3] * 3, atol=1e-5)
    assert mixture_probabilities([0.0, 1.0], 50.0)[0] == 0  # zero weight stays zero


@pytest.mark.usefixtures("small_leaves")
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=4), data=st.data())
@settings(max_examples=150)
def test_segment_is_an_exact_arrangement_with_draws_in_time_order(
    counts: list[int], data: st.DataObject
) -> None:
    total = sum(counts)
    labels, draws = segment_slice(counts, 3, (1, 2, 3), 0, total)
    assert np.bincount(labels, minlength=len(counts)).tolist() == counts
    for j, c in enumerate(counts):
        assert draws[labels == j].tolist() == list(range(c))  # d-th draw comes d-th
    start = data.draw(st.integers(0, total))
    stop = data.draw(st.integers(start, total))
    part_labels, part_draws = segment_slice(counts, 3, (1, 2, 3), start, stop)
    np.testing.assert_array_equal(part_labels, labels[start:stop])  # random access
    np.testing.assert_array_equal(part_draws, draws[start:stop])
    before = counts_before(counts, 3, (1, 2, 3), start)
    assert before.tolist() == np.bincount(labels[:start], minlength=len(counts)).tolist()


def test_arrangement_is_shuffled_and_keyed() -> None:
    counts = [5000, 5000]
    a, _ = segment_slice(counts, 0, (0,), 0, 10000)
    b, _ = segment_slice(counts, 0, (1,), 0, 10000)
    assert not np.array_equal(a, b)
    runs = int((np.diff(a) != 0).sum()) + 1
    assert 4500 < runs < 5500  # a random arrangement has about n/2 runs, not 2


@given(size=st.integers(1, 300), passes=st.integers(1, 4))
def test_source_streams_use_every_sample_before_repeating(size: int, passes: int) -> None:
    local = source_samples(np.arange(size * passes), size, 9, (0, 1))
    for p in range(passes):
        assert sorted(local[p * size : (p + 1) * size].tolist()) == list(range(size))
    if size > 20 and passes > 1:
        assert local[:size].tolist() != local[size : 2 * size].tolist()  # reshuffled


@pytest.mark.parametrize(
    ("w", "match"),
    [
        ([-1.0, 1.0], "must be >= 0"),
        ([float("nan"), 1.0], "must be finite"),
        ([float("inf"), 1.0], "must be finite"),
        ([0.0, 0.0], "all zero"),
    ],
)
def test_bad_weights(w: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mixture.check_weights(w, ["a", "b"])


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature(temperature: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        mixture_probabilities([1.0], temperature)
