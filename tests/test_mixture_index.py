import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lightning_resumable_data.index.arrangement as arrangement_module
import lightning_resumable_data.index.mixture as mixture
from lightning_resumable_data.index.arrangement import MAX_SEGMENT, Arrangement
from lightning_resumable_data.index.mixture import (
    counts_before,
    mixture_probabilities,
    segment_slice,
    source_samples,
    target_counts,
)

LEAF, BLOCK = 4, 16  # deep trees and several stratified blocks with small inputs


@pytest.fixture
def small_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrangement_module, "LEAF_SIZE", LEAF)
    monkeypatch.setattr(arrangement_module, "BLOCK_SIZE", BLOCK)


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


def assert_draws_in_leaf_order(labels: np.ndarray, draws: np.ndarray, counts: list[int]) -> None:
    """The relaxed time order: a source's draws in a leaf are a permutation of a contiguous
    range, and the ranges follow each other leaf after leaf (so all draws are 0..count-1)."""
    leaves = np.arange(len(labels)) // LEAF
    for j, c in enumerate(counts):
        mine, leaf = draws[labels == j], leaves[labels == j]
        assert sorted(mine.tolist()) == list(range(c))
        for k in np.unique(leaf).tolist():
            inside = np.sort(mine[leaf == k])
            assert inside.tolist() == list(range(int(inside[0]), int(inside[0]) + len(inside)))
        if len(mine):  # the last draw of a leaf comes before the first of the next leaf
            ends = np.maximum.accumulate(mine)
            later = np.flatnonzero(mine < ends)  # a draw smaller than one before it
            assert (leaf[later] == leaf[np.searchsorted(ends, mine[later], side="right")]).all()


@pytest.mark.usefixtures("small_leaves")
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=4), data=st.data())
@settings(max_examples=150, deadline=None)
def test_segment_is_an_exact_arrangement_with_random_access(
    counts: list[int], data: st.DataObject
) -> None:
    total = sum(counts)
    labels, draws = segment_slice(counts, 3, (1, 2, 3), 0, total)
    assert np.bincount(labels, minlength=len(counts)).tolist() == counts  # exact counts
    assert_draws_in_leaf_order(labels, draws, counts)
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
    reserved = fresh.reserved(start)  # the leaves meeting [0, start) reserve their draws
    upto = min(total, -(-start // LEAF) * LEAF)
    assert reserved.tolist() == np.bincount(labels[:upto], minlength=len(counts)).tolist()


@pytest.mark.usefixtures("small_leaves")
@given(counts=st.lists(st.integers(0, 300), min_size=2, max_size=4))
@settings(max_examples=50, deadline=None)
def test_blocks_are_stratified(counts: list[int]) -> None:
    total = sum(counts)
    labels, _ = segment_slice(counts, 5, (0,), 0, total)
    depth = max(1, (-(-total // BLOCK) - 1).bit_length())
    for start in range(0, total, BLOCK):  # each block: its proportional share, +- the depth
        got = np.bincount(labels[start : start + BLOCK], minlength=len(counts))
        share = np.array(counts) * (min(total, start + BLOCK) - start) / total
        assert (np.abs(got - share) <= depth).all()


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
        leaf = arrangement_module.LEAF_SIZE
        aligned = start // leaf * leaf  # counts before are exact and additive
        before = layout.counts_before(aligned)
        assert before.sum() == aligned
        assert (before <= counts).all()
    tail = layout.locate(np.arange(total - 3000, total, dtype=np.int64))[0]
    np.testing.assert_array_equal(
        layout.counts_before(total - 3000) + np.bincount(tail, minlength=4), counts
    )
    assert layout.counts_before(total).tolist() == counts.tolist()


def test_segments_past_the_limit_are_refused() -> None:
    with pytest.raises(ValueError, match=r"longer than the limit of 2\*\*53"):
        Arrangement([MAX_SEGMENT, 1], 0, (0,))


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


@pytest.mark.usefixtures("small_leaves")
def test_leaf_counts_and_slots_follow_a_uniform_shuffle() -> None:
    # Counts [6, 10] over 16 positions in leaves of 4: a uniform shuffle puts HG(6, 10, 4)
    # samples of source 0 in the first leaf (mean 1.5, variance 0.75), and source 0 at any
    # position with probability 6 / 16.
    firsts, starts = [], []
    for key in range(1500):
        labels, _ = Arrangement([6, 10], 11, (key,)).locate(np.arange(16))
        firsts.append(int((labels[:LEAF] == 0).sum()))
        starts.append(int(labels[5] == 0))
    assert abs(np.mean(firsts) - 1.5) < 0.08
    assert abs(np.var(firsts) - 0.75) < 0.1
    assert abs(np.mean(starts) - 6 / 16) < 0.045
