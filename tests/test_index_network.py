"""The Feistel network's cycle walk: the cached table and the walk by passes agree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data.index import network
from lightning_resumable_data.index.network import WALK_TABLE_LIMIT, _network, walk
from lightning_resumable_data.index.permutation import _radices, _round_keys


def _walked_by_passes(x: np.ndarray, n: int, keys: tuple[np.uint64, ...], a: int, b: int) -> None:
    outside = np.flatnonzero(x >= np.uint64(n))
    while outside.size:  # the walk before the table: the network again, until below n
        walked = _network(x[outside], keys, a, b)
        x[outside] = walked
        outside = outside[walked >= np.uint64(n)]


@given(
    n=st.one_of(st.integers(2, 300), st.integers(2**16, 2**28)),
    seed=st.integers(0, 2**64 - 1),
    data=st.data(),
)
@settings(max_examples=80, deadline=None)
def test_the_walk_table_walks_as_the_network_does(n: int, seed: int, data: st.DataObject) -> None:
    keys, (a, b) = _round_keys((seed, 3)), _radices(n)
    count = data.draw(st.integers(1, 3000))
    positions = np.random.default_rng(seed % 2**32).integers(0, n, count).astype(np.uint64)
    mapped = _network(positions, keys, a, b)
    expected = mapped.copy()
    _walked_by_passes(expected, n, keys, a, b)
    assert a * b - n <= WALK_TABLE_LIMIT  # the table is used at these n
    walk(mapped, n, keys, a, b)
    np.testing.assert_array_equal(mapped, expected)
    assert (mapped < np.uint64(n)).all()


@pytest.mark.parametrize("n", [2**16 + 1, 10**5, 10**7 + 3])
def test_every_value_of_the_network_walks_into_range(n: int) -> None:
    """All of [0, n) mapped and walked is [0, n): a permutation, with the table."""
    keys, (a, b) = _round_keys((n, 1)), _radices(n)
    out = _network(np.arange(n, dtype=np.uint64), keys, a, b)
    walk(out, n, keys, a, b)
    np.testing.assert_array_equal(np.sort(out), np.arange(n, dtype=np.uint64))


def test_above_the_limit_the_walk_takes_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network, "WALK_TABLE_LIMIT", 0)
    n = 10**5 + 7
    keys, (a, b) = _round_keys((5,)), _radices(n)
    out = _network(np.arange(n, dtype=np.uint64), keys, a, b)
    walk(out, n, keys, a, b)
    np.testing.assert_array_equal(np.sort(out), np.arange(n, dtype=np.uint64))


@given(
    n=st.one_of(st.integers(2, 300), st.integers(2**16, 2**30)),
    seed=st.integers(0, 2**64 - 1),
)
@settings(max_examples=60, deadline=None)
def test_the_round_tables_give_the_computed_rounds(n: int, seed: int) -> None:
    """Scalar keys look F up in the round tables; per-value keys compute it: same values."""
    keys, (a, b) = _round_keys((seed,)), _radices(n)
    x = np.random.default_rng(seed % 2**32).integers(0, a * b, 500).astype(np.uint64)
    per_value = tuple(np.full(x.size, key, dtype=np.uint64) for key in keys)
    np.testing.assert_array_equal(_network(x, keys, a, b), _network(x, per_value, a, b))  # type: ignore[arg-type]
