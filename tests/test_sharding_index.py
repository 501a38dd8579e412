import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.index.sharding import (
    check_shard_sizes,
    in_shard_keys,
    locate_indices,
    shard_order,
    shard_starts,
    sharded_order,
    shards_digest,
    slot_bounds,
)

sizes_strategy = st.lists(st.integers(0, 60), min_size=1, max_size=12).filter(lambda s: sum(s) > 0)


def full_order(sizes: list[int], seed: int, epoch: int, **flags: bool) -> np.ndarray:
    return sharded_order(sizes, seed, epoch, **flags)(np.arange(sum(sizes)))


@given(
    sizes=sizes_strategy,
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 10**6),
    shuffle_shards=st.booleans(),
    shuffle_samples=st.booleans(),
)
@settings(max_examples=200)
def test_epoch_order_is_a_permutation_that_visits_one_shard_at_a_time(
    sizes: list[int], seed: int, epoch: int, shuffle_shards: bool, shuffle_samples: bool
) -> None:
    order = full_order(
        sizes, seed, epoch, shuffle_shards=shuffle_shards, shuffle_samples=shuffle_samples
    )
    total = sum(sizes)
    np.testing.assert_array_equal(np.sort(order), np.arange(total))
    # Shard locality: slot j's positions are exactly shard o[j]'s samples.
    starts = shard_starts(sizes)
    shards, _ = locate_indices(order, starts)
    visits = shards[np.r_[True, shards[1:] != shards[:-1]]]
    assert len(visits) == len(set(visits.tolist()))  # each shard entered once
    expected = shard_order(len(sizes), seed, epoch, shuffle_shards)
    assert visits.tolist() == [s for s in expected.tolist() if sizes[s]]


@given(sizes=sizes_strategy, seed=st.integers(0, 2**32), data=st.data())
def test_any_subset_of_positions_is_looked_up_consistently(
    sizes: list[int], seed: int, data: st.DataObject
) -> None:
    total = sum(sizes)
    whole = full_order(sizes, seed, 3)
    positions = np.array(data.draw(st.lists(st.integers(0, total - 1), max_size=40)), np.int64)
    np.testing.assert_array_equal(sharded_order(sizes, seed, 3)(positions), whole[positions])


def test_order_is_reproducible_and_changes_with_epoch_and_seed() -> None:
    sizes = [50, 30, 0, 70, 20]
    base = full_order(sizes, 7, 1)
    np.testing.assert_array_equal(base, full_order(sizes, 7, 1))
    assert not np.array_equal(base, full_order(sizes, 7, 2))
    assert not np.array_equal(base, full_order(sizes, 8, 1))
    # Keyed streams, not seed + epoch: (seed=8, epoch=0) is not (seed=7, epoch=1).
    assert not np.array_equal(full_order(sizes, 8, 0), base)


def test_keys_are_fixed_width_so_wide_seeds_and_epochs_never_collide() -> None:
    # SeedSequence([2**32, 5, tag]) == SeedSequence([0, 1 + 5 * 2**32, tag]): variable-width
    # packing made these two (seed, epoch) pairs share every stream.
    wide, narrow = (2**32, 5), (0, 1 + 5 * 2**32)
    assert shard_order(50, *wide).tolist() != shard_order(50, *narrow).tolist()
    assert not np.array_equal(in_shard_keys(*wide, 3), in_shard_keys(*narrow, 3))
    # ... and (epoch, shard) pairs: (epoch=2**32, shard=5) vs (epoch=0, shard=1 + 5 * 2**32).
    assert not np.array_equal(in_shard_keys(0, 2**32, 5), in_shard_keys(0, 0, 1 + 5 * 2**32))
    sizes = [300, 200]
    assert not np.array_equal(full_order(sizes, *wide), full_order(sizes, *narrow))


def test_shard_order_and_in_shard_order_both_change_per_epoch() -> None:
    sizes = [40] * 8
    orders = [shard_order(8, 0, epoch).tolist() for epoch in range(4)]
    assert len({tuple(o) for o in orders}) == 4
    starts = shard_starts(sizes)
    for shard in range(8):  # the same shard's samples come in another order next epoch
        per_epoch = []
        for epoch in range(2):
            order = full_order(sizes, 0, epoch)
            mine = order[(order >= starts[shard]) & (order < starts[shard + 1])]
            per_epoch.append(mine.tolist())
        assert per_epoch[0] != per_epoch[1]
        assert sorted(per_epoch[0]) == sorted(per_epoch[1])


def test_without_shuffling_the_order_is_file_order() -> None:
    sizes = [3, 0, 4]
    order = full_order(sizes, 5, 9, shuffle_shards=False, shuffle_samples=False)
    assert order.tolist() == list(range(7))
    # Shard shuffle only: each shard stays a sorted run.
    order = full_order([5, 5, 5, 5], 5, 9, shuffle_shards=True, shuffle_samples=False)
    runs = order.reshape(4, 5)
    assert (np.diff(runs, axis=1) == 1).all()


def test_in_shard_shuffle_is_well_spread() -> None:
    order = full_order([10_000], seed=0, epoch=0)
    correlation = np.corrcoef(np.arange(10_000), order)[0, 1]
    assert abs(correlation) < 0.05


def test_slot_bounds_and_locate() -> None:
    assert slot_bounds([3, 0, 2], np.array([1, 2, 0])).tolist() == [0, 0, 2, 5]
    shards, local = locate_indices([4, 0, 2], shard_starts([3, 0, 2]))
    assert shards.tolist() == [2, 0, 0]
    assert local.tolist() == [1, 0, 2]
    with pytest.raises(IndexError, match=r"sample indices must be in \[0, 5\)"):
        locate_indices([5], shard_starts([3, 0, 2]))
    with pytest.raises(IndexError, match=r"positions must be in \[0, 5\)"):
        sharded_order([3, 2], 0, 0)(np.array([5]))


def test_digest_depends_on_sizes_order_and_names() -> None:
    assert shards_digest([3, 2]) != shards_digest([2, 3])
    assert shards_digest([3, 2], ["a", "b"]) != shards_digest([3, 2], ["a", "c"])
    assert len(shards_digest([1])) == 16


@pytest.mark.parametrize(
    ("sizes", "error", "match"),
    [
        ([], ValueError, "non-empty 1-D list"),
        ([0, 0], ValueError, "all 2 shards are empty"),
        ([3, -1], ValueError, r"sizes\[1\]=-1"),
        ([1.5], TypeError, "must be integers"),
    ],
)
def test_bad_sizes_are_refused(sizes: list[float], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        check_shard_sizes(sizes)


def test_bad_seed_and_epoch_are_refused() -> None:
    with pytest.raises(ValueError, match="seed=-1"):
        shard_order(3, -1, 0)
    with pytest.raises(TypeError, match=r"epoch=1\.0"):
        shard_order(3, 0, 1.0)  # type: ignore[arg-type]
