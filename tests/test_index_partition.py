import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightning_resumable_data.index import (
    RankSpan,
    epoch_total_size,
    rank_span,
    samples_per_rank,
    span_positions,
)


@given(n=st.integers(1, 500), world=st.integers(1, 16), drop_last=st.booleans())
def test_epoch_layout_matches_torch_formula(n: int, world: int, drop_last: bool) -> None:
    if drop_last and n % world:
        torch_per_rank = math.ceil((n - world) / world)
    else:
        torch_per_rank = math.ceil(n / world)
    assert samples_per_rank(n, world, drop_last) == torch_per_rank
    assert epoch_total_size(n, world, drop_last) == torch_per_rank * world


@given(
    n=st.integers(1, 400),
    world=st.integers(1, 9),
    new_world=st.integers(1, 9),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_suffix_restride_reads_every_remaining_position_once(
    n: int, world: int, new_world: int, drop_last: bool, data: st.DataObject
) -> None:
    per_rank = samples_per_rank(n, world, drop_last)
    steps_done = data.draw(st.integers(0, per_rank))
    consumed = steps_done * world
    before = np.concatenate(
        [span_positions(rank_span(n, world, r, drop_last))[:steps_done] for r in range(world)]
    )
    after = np.concatenate(
        [span_positions(rank_span(n, new_world, r, drop_last, consumed)) for r in range(new_world)]
    )
    # What all ranks consumed is exactly the prefix [0, consumed).
    np.testing.assert_array_equal(np.sort(before), np.arange(consumed))
    # The rest is a contiguous block right after it, each position once.
    np.testing.assert_array_equal(np.sort(after), np.arange(consumed, consumed + len(after)))
    remaining = max(n - consumed, 0)
    if drop_last:
        assert remaining - len(after) in range(new_world)  # dropped tail < new_world
    else:
        assert len(after) - remaining in range(new_world)  # padded tail < new_world
    counts = {
        len(span_positions(rank_span(n, new_world, r, drop_last, consumed)))
        for r in range(new_world)
    }
    assert len(counts) == 1  # every rank reads the same number: no DDP hang


def test_span_positions_slices() -> None:
    span = RankSpan(start=2, step=3, count=4)
    assert span_positions(span).tolist() == [2, 5, 8, 11]
    assert span_positions(span, 1, 3).tolist() == [5, 8]
    assert span_positions(span, 3, 99).tolist() == [11]


def test_rank_out_of_range_is_explained() -> None:
    with pytest.raises(ValueError, match=r"rank=4 must be in \[0, num_replicas\) = \[0, 4\)"):
        rank_span(10, 4, 4, drop_last=False)
    with pytest.raises(ValueError, match="num_replicas=0 must be >= 1"):
        rank_span(10, 0, 0, drop_last=False)
    with pytest.raises(TypeError, match="rank='0' must be an int"):
        rank_span(10, 2, "0", drop_last=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="consumed=-1 must be >= 0"):
        rank_span(10, 2, 0, drop_last=False, consumed=-1)
