"""The orders are pinned: the index functions give, bit for bit, what they gave when pinned.

Statistics and properties accept any good permutation; a resume needs *this* one. A change
to a mixing constant, a key stream or a rounding rule that keeps every property (a shift of
31 bits made 32, a seed dropped from a key, a tie broken the other way) moves every sample
of a saved run's next batches, and an old checkpoint would silently read another order.
Mutation testing of ``index/`` found such changes surviving every other test. Each case
here hashes the output of a public function on fixed inputs; a digest that changes means
the order changed: that needs a new state version or order name, never a silent update.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pytest

from lightning_resumable_data.index.arrangement import Arrangement
from lightning_resumable_data.index.bisection import Bisection
from lightning_resumable_data.index.keys import key_words
from lightning_resumable_data.index.mixture import target_counts
from lightning_resumable_data.index.passes import pass_samples
from lightning_resumable_data.index.permutation import (
    feistel_keys,
    feistel_permute,
    feistel_slice,
)
from lightning_resumable_data.index.sharding import in_shard_keys, shard_order, sharded_order


def digest(array: object) -> str:
    values = np.ascontiguousarray(np.asarray(array).astype(np.int64))
    return hashlib.sha256(values.tobytes()).hexdigest()[:16]


def _bisection(length: int, ones: int) -> object:
    bits, before = Bisection(length, ones, (7, length)).locate(np.arange(length))
    return np.concatenate([bits.astype(np.int64), before])


def _arrangement(counts: list[int]) -> object:
    labels, draws = Arrangement(counts, 11, (3,)).locate(np.arange(sum(counts)))
    return np.concatenate([labels.astype(np.int64), draws])


CASES: dict[str, Callable[[], object]] = {
    "feistel_keys": lambda: feistel_keys(12345, 3).view(np.int64),
    "feistel 17": lambda: feistel_permute(np.arange(17), 17, feistel_keys(1, 0)),
    "feistel 1000": lambda: feistel_permute(np.arange(1000), 1000, feistel_keys(2, 4)),
    "feistel 2**16+1": lambda: feistel_permute(np.arange(65537), 65537, feistel_keys(3, 1)),
    "feistel_slice 2**40": lambda: feistel_slice(2**40 + 3, 9, 2, 10**9, 10**9 + 4096),
    "passes 16": lambda: pass_samples(np.arange(64), 16, 5, (0, 1)),
    "passes 17": lambda: pass_samples(np.arange(68), 17, 5, (0, 1)),
    "passes 5000": lambda: pass_samples(np.arange(0, 20000, 3), 5000, 6, (2, 0)),
    "bisection 1000/333": lambda: _bisection(1000, 333),
    "bisection 70000/30001": lambda: _bisection(70000, 30001),
    "arrangement 3 sources": lambda: _arrangement([500, 300, 201]),
    "arrangement 7 sources": lambda: _arrangement([90, 1, 0, 45, 300, 2, 77]),
    "shard_order": lambda: shard_order(50, 8, 3),
    "in_shard_keys": lambda: in_shard_keys(8, 3, 17).view(np.int64),
    "sharded_order default": lambda: sharded_order([5, 0, 7, 30, 1], 4, 2)(np.arange(43)),
    "key_words": lambda: key_words(3, 2**64 - 1, 0, 7),
}

PINNED = {
    "feistel_keys": "419d07b21825b345",
    "feistel 17": "5ff8df87b498f8bf",
    "feistel 1000": "d870f61d3455fef1",
    "feistel 2**16+1": "60878ac8e7f27353",
    "feistel_slice 2**40": "05c3c0f95bbb07bd",
    "passes 16": "66e0552d96e740fd",
    "passes 17": "9991fdbcee542b12",
    "passes 5000": "c7a1526745616317",
    "bisection 1000/333": "b5285078a91607bc",
    "bisection 70000/30001": "6ebde5bc5e05970a",
    "arrangement 3 sources": "94a7b1ebad9fd7c1",
    "arrangement 7 sources": "c11e25a336fb4d7d",
    "shard_order": "d4259f1a862ac03d",
    "in_shard_keys": "451679d8b2980803",
    "sharded_order default": "abf290ae86df1ab9",
    "key_words": "9ea7c36bc0247edc",
}  # torch's randperm is not pinned: it is compared with torch itself (test_index_permutation)


@pytest.mark.parametrize("case", list(CASES))
def test_the_order_is_the_pinned_one(case: str) -> None:
    assert digest(CASES[case]()) == PINNED[case]


def test_rounding_ties_go_to_the_larger_fraction_then_the_more_probable_then_the_first() -> None:
    """target_counts' docstring: largest remainder, ties to the more probable source."""
    assert target_counts(np.array([1 / 3] * 3), 10).tolist() == [4, 3, 3]  # index breaks it
    assert target_counts(np.array([0.1, 0.3, 0.6]), 5).tolist() == [0, 2, 3]  # probability
    assert target_counts(np.array([0.25, 0.5, 0.25]), 3).tolist() == [1, 1, 1]
    assert target_counts(np.array([0.0, 0.5, 0.5]), 3).tolist() == [0, 2, 1]  # 0 stays 0


@pytest.mark.parametrize("budget", [2**53 - 1, 2**53 + 2, 2**60 + 3, 2**62 - 1])
def test_counts_near_and_past_2_53_still_sum_to_the_budget(budget: int) -> None:
    """The rounding's float error goes both ways at these budgets; the fix-up keeps counts
    exact and never takes from a zero-probability source or below zero."""
    for p in ([0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3], [0.0, 0.999, 0.001], [0.5, 0.0, 0.5]):
        probabilities = np.array(p)
        counts = target_counts(probabilities, budget)
        assert sum(int(c) for c in counts) == budget
        assert (counts >= 0).all()
        assert (counts[probabilities == 0] == 0).all()
        exact = [pi * budget for pi in p]
        assert all(
            abs(int(c) - e) <= 1 + budget * 2**-50 for c, e in zip(counts, exact, strict=True)
        )


def test_keys_take_values_below_2_64_only() -> None:
    from lightning_resumable_data.index.keys import key_bytes

    assert len(key_bytes(1, 2**64 - 1)) > 0
    assert in_shard_keys(0, 0, 2**64 - 1).size > 0
    with pytest.raises(ValueError, match=r"must be in \[0, 2\*\*64\)"):
        key_bytes(1, 2**64)
    with pytest.raises(ValueError, match=r"shard=18446744073709551616 must be in"):
        in_shard_keys(0, 0, 2**64)
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 must be in"):
        sharded_order([3], 2**64, 0)


def test_an_empty_shard_is_a_valid_shard() -> None:
    lookup = sharded_order([3, 0, 2], 1, 0)
    assert sorted(lookup(np.arange(5)).tolist()) == [0, 1, 2, 3, 4]
