import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lightning_resumable_data.index.mixture as mixture
from lightning_resumable_data.index.arrangement import MAX_SEGMENT, Arrangement
from lightning_resumable_data.index.mixture import (
    counts_before,
    mixture_probabilities,
    segment_slice,
    source_samples,
    target_counts,
)

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


def assert_draws_in_time_order(labels: np.ndarray, draws: np.ndarray, counts: list[int]) -> None:
    """A source's k-th position in the segment is its draw k: strictly in time order."""
    for j, c in enumerate(counts):
        assert draws[labels == j].tolist() == list(range(c))


@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=5), data=st.data())
@settings(max_examples=150, deadline=None)
def test_segment_is_an_exact_arrangement_with_random_access(
    counts: list[int], data: st.DataObject
) -> None:
    total = sum(counts)
    labels, draws = segment_slice(counts, 3, (1, 2, 3), 0, total)
    assert np.bincount(labels, minlength=len(counts)).tolist() == counts  # exact counts
    assert_draws_in_time_order(labels, draws, counts)
    start = data.draw(st.integers(0, total))
    stop = data.draw(st.integers(start, total))
    part_labels, part_draws = segment_slice(counts, 3, (1, 2, 3), start, stop)
    np.testing.assert_array_equal(part_labels, labels[start:stop])  # random access
    np.testing.assert_array_equal(part_draws, draws[start:stop])
    picked = data.draw(st.lists(st.integers(0, max(total - 1, 0)), max_size=20)) if total else []
    fresh = Arrangement(counts, 3, (1, 2, 3))  # no cache: positions in any order
    any_labels, any_draws = fresh.locate(np.array(picked, dtype=np.int64))
    np.testing.assert_array_equal(any_labels, labels[picked])
    np.testing.assert_array_equal(any_draws, draws[picked])
    before = counts_before(counts, 3, (1, 2, 3), start)
    assert before.tolist() == np.bincount(labels[:start], minlength=len(counts)).tolist()


@given(ones=st.integers(0, 1024), log_length=st.integers(1, 10), key=st.integers(0, 2**64 - 1))
@settings(max_examples=60, deadline=None)
def test_two_sources_fill_every_aligned_block_with_floor_or_ceil_of_its_share(
    ones: int, log_length: int, key: int
) -> None:
    length = 1 << log_length
    ones = min(ones, length)
    labels, _ = Arrangement([length - ones, ones], 0, (key,)).locate(np.arange(length))
    for level in range(log_length + 1):
        block = length >> level
        got = labels.reshape(-1, block).sum(axis=1)
        share = ones / (1 << level)
        assert set(got.tolist()) <= {int(np.floor(share)), int(np.ceil(share))}


@given(counts=st.lists(st.integers(0, 600), min_size=2, max_size=6), key=st.integers(0, 99))
@settings(max_examples=60, deadline=None)
def test_every_window_holds_its_share_within_a_few_samples(counts: list[int], key: int) -> None:
    # An i.i.d. or uniformly shuffled order strays by about sqrt(p * (1 - p) * width).
    total = sum(counts)
    labels, _ = Arrangement(counts, 5, (key,)).locate(np.arange(total))
    onehot = np.zeros((total + 1, len(counts)))
    onehot[np.arange(1, total + 1), labels] = 1
    running = onehot.cumsum(axis=0)
    share = np.array(counts) / max(total, 1)
    levels = (len(counts) - 1).bit_length()  # splits a source's positions go through
    for width in (2, 8, 64, 512):
        if width <= total:
            got = running[width:] - running[:-width]
            bound = levels * (1 + np.log2(width))
            assert np.abs(got - share * width).max() <= bound


def test_every_position_draws_each_source_with_its_share() -> None:
    counts = [3, 7, 2]  # 12 positions: source j at any position with probability c_j / 12
    seen = np.zeros((12, 3))
    for key in range(3000):
        labels, _ = Arrangement(counts, 11, (key,)).locate(np.arange(12))
        seen[np.arange(12), labels] += 1
    expected = np.array(counts) / 12
    sd = np.sqrt(expected * (1 - expected) / 3000)
    assert (np.abs(seen / 3000 - expected) < 4.5 * sd).all()


@pytest.mark.parametrize("total", [2 * 10**9, 10**12])
def test_huge_segments_are_exact_on_slices(total: int) -> None:
    counts = target_counts(np.array([0.5, 0.3, 0.15, 0.05]), total)
    layout = Arrangement(counts, 7, (0, 0, total))
    for start in (0, total // 2 - 1000, total // 3 + 12345, total - 3000):
        positions = np.arange(start, start + 3000, dtype=np.int64)
        labels, draws = layout.locate(positions)
        assert (draws >= 0).all()
        assert (draws < counts[labels]).all()
        back_labels, back_draws = layout.locate(positions[::-1])  # random access
        np.testing.assert_array_equal(back_labels[::-1], labels)
        np.testing.assert_array_equal(back_draws[::-1], draws)
        before = layout.counts_before(start)  # counts before are exact and additive
        assert before.sum() == start
        assert (before <= counts).all()
        np.testing.assert_array_equal(
            layout.counts_before(start + 3000) - before, np.bincount(labels, minlength=4)
        )
        for j in range(4):  # each source's draws continue its count before the slice
            mine = draws[labels == j]
            assert mine.tolist() == list(range(before[j], before[j] + len(mine)))
    tail = layout.locate(np.arange(total - 3000, total, dtype=np.int64))[0]
    np.testing.assert_array_equal(
        layout.counts_before(total - 3000) + np.bincount(tail, minlength=4), counts
    )
    assert layout.counts_before(total).tolist() == counts.tolist()


def test_segments_past_the_limit_are_refused() -> None:
    with pytest.raises(ValueError, match=r"longer than the limit of 2\*\*53"):
        Arrangement([MAX_SEGMENT, 1], 0, (0,))


def test_arrangement_is_keyed_and_not_periodic() -> None:
    counts = [5000, 5000]
    a, _ = segment_slice(counts, 0, (0,), 0, 10000)
    b, _ = segment_slice(counts, 0, (1,), 0, 10000)
    assert 4500 < int((a != b).sum()) < 5500  # another key: another order
    for stride in (2, 3, 4, 64, 100):  # every residue class (a rank's positions) mixes
        for r in range(stride):
            mine = a[r::stride]  # like independent fair coins: sd 0.5 / sqrt(len)
            assert abs(mine.mean() - 0.5) < 4.5 * 0.5 / np.sqrt(len(mine))


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
