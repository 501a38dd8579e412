"""Skipped positions (``DistributedSampler.skip_positions``): the order that remains, exactly.

A skip cuts positions out of an epoch's order; every other sample is read once, in order,
on any layout, and a saved state carries the skip to a resume on another world size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import DistributedSampler, ShardedSampler, StateMismatchError
from lightning_resumable_data.index.skips import add_skip, to_base


def _epoch(sampler_factory: Callable[[int], DistributedSampler], world: int) -> list[int]:
    """The epoch's global order as the ranks read it, interleaved back."""
    per_rank = [list(sampler_factory(rank)) for rank in range(world)]
    order: list[int] = []
    for step in range(max(map(len, per_rank))):
        order += [r[step] for r in per_rank if step < len(r)]
    return order


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 60),
    cuts=st.lists(st.tuples(st.integers(0, 59), st.integers(1, 20)), max_size=4),
)
def test_add_skip_removes_exactly_the_positions_of_the_remaining_order(
    n: int, cuts: list[tuple[int, int]]
) -> None:
    remaining = list(range(n))
    ranges: list[tuple[int, int]] = []
    for start, width in cuts:
        if start >= len(remaining):
            continue
        stop = min(len(remaining), start + width)
        del remaining[start:stop]  # the model: cut the list as it stands
        ranges = add_skip(ranges, start, stop)
    assert to_base(np.arange(len(remaining)), ranges).tolist() == remaining
    assert all(a < b for a, b in ranges)
    assert all(ranges[i][1] < ranges[i + 1][0] for i in range(len(ranges) - 1))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(4, 50),
    world=st.integers(1, 4),
    new_world=st.integers(1, 4),
    algorithm=st.sampled_from(["randperm", "feistel"]),
    data=st.data(),
)
def test_a_skip_reads_every_other_sample_once_and_survives_an_elastic_resume(
    n: int,
    world: int,
    new_world: int,
    algorithm: Literal["randperm", "feistel"],
    data: st.DataObject,
) -> None:
    start = data.draw(st.integers(0, n - 2))
    stop = data.draw(st.integers(start + 1, n))
    base = list(DistributedSampler(range(n), num_replicas=1, rank=0, seed=3, algorithm=algorithm))
    expected = base[:start] + base[stop:]

    def make(rank: int, replicas: int = world) -> DistributedSampler:
        s = DistributedSampler(
            range(n), replicas, rank, seed=3, algorithm=algorithm, drop_last=True
        )
        s.skip_positions(0, start, stop)
        return s

    read = _epoch(make, world)
    assert read == expected[: len(read)]  # drop_last: the ragged tail of what remains
    assert len(make(0)) == (n - (stop - start)) // world

    # save after k steps of `world` ranks, resume on `new_world`: the rest, once each
    k = data.draw(st.integers(0, len(make(0))))
    saver = make(0)
    it = iter(saver)
    for _ in range(k):
        next(it)
    state = saver.state_dict()
    assert state["skips"] == [[0, *to_range] for to_range in saver.skips[0]]

    def resumed(rank: int) -> DistributedSampler:
        s = DistributedSampler(
            range(n), new_world, rank, seed=3, algorithm=algorithm, drop_last=True
        )
        s.load_state_dict(state)
        return s

    rest = _epoch(resumed, new_world)
    assert read[: k * world] + rest == expected[: k * world + len(rest)]


def test_skips_of_later_epochs_wait_for_their_epoch_and_are_forgotten_after() -> None:
    sampler = DistributedSampler(range(6), num_replicas=1, rank=0, shuffle=False)
    sampler.skip_positions(1, 0, 2)
    assert list(sampler) == [0, 1, 2, 3, 4, 5]
    sampler.set_epoch(1)
    assert list(sampler) == [2, 3, 4, 5]
    assert len(sampler) == 4
    assert sampler.state_at(1, 0)["skips"] == [[1, 0, 2]]
    assert "skips" not in sampler.state_at(2, 0)


def test_a_skip_cannot_reach_back_into_what_was_read() -> None:
    sampler = DistributedSampler(range(10), num_replicas=1, rank=0, shuffle=False)
    it = sampler.iter_batches(2)
    next(it)
    with pytest.raises(ValueError, match=r"already computed epoch 0 up to position \d+"):
        sampler.skip_positions(0, 1, 3)
    with pytest.raises(ValueError, match=r"start < stop <= 10"):
        sampler.skip_positions(1, 4, 11)


def test_a_state_with_malformed_skips_is_refused() -> None:
    sampler = DistributedSampler(range(10), num_replicas=1, rank=0)
    state = sampler.state_dict()
    for bad in ([[0, 5, 3]], [[0, 1, 4], [0, 2, 6]], [[0, 1, 11]], [[-1, 0, 1]], "x"):
        with pytest.raises(StateMismatchError, match="its 'skips' must be"):
            DistributedSampler(range(10), num_replicas=1, rank=0).load_state_dict(
                {**state, "skips": bad}
            )


def test_a_sharded_sampler_skips_and_seeks_with_its_skips() -> None:
    full = list(ShardedSampler([4, 4], num_replicas=1, rank=0, seed=1))
    sampler = ShardedSampler([4, 4], num_replicas=1, rank=0, seed=1)
    sampler.skip_positions(0, 1, 3)
    assert list(sampler) == full[:1] + full[3:]
    sampler.seek(0, 2)
    assert list(sampler) == full[4:]
