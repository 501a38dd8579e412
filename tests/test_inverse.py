"""The inverse of the epoch orders: exact against the forward order, O(1) for Feistel.

``lrd find`` and quarantine ask where dataset indices sit in an epoch's order; for a
Feistel order the answer is computed index by index (its rounds and cycle walk run
backwards), so a dataset of 10**10 samples is searched in microseconds.
"""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import DistributedSampler
from lightning_resumable_data.index.inverse import feistel_inverse, order_positions
from lightning_resumable_data.index.permutation import feistel_keys, feistel_permute
from lightning_resumable_data.lightning.find import find_sample
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.trace import trace_step


@settings(max_examples=150, deadline=None)
@given(
    n=st.one_of(st.integers(1, 70_000), st.integers(70_000, 2**63)),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 1000),
    data=st.data(),
)
def test_the_feistel_inverse_undoes_the_permutation(
    n: int, seed: int, epoch: int, data: st.DataObject
) -> None:
    keys = feistel_keys(seed, epoch)
    positions = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    values = feistel_permute(positions, n, keys)
    assert feistel_inverse(values, n, keys).tolist() == positions.tolist()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    shuffle=st.booleans(),
    algorithm=st.sampled_from(["randperm", "feistel"]),
    seed=st.integers(-(2**63), 2**63),
    epoch=st.integers(0, 5),
)
def test_order_positions_is_the_inverse_of_the_samplers_order(
    n: int, shuffle: bool, algorithm: str, seed: int, epoch: int
) -> None:
    sampler = DistributedSampler(
        range(n),
        1,
        0,
        shuffle=shuffle,
        seed=seed,
        algorithm=algorithm,  # type: ignore[arg-type]
    )
    sampler.set_epoch(epoch)
    order = np.array(list(sampler))
    found = order_positions(shuffle, algorithm, n, seed, epoch, order)  # type: ignore[arg-type]
    assert found.tolist() == list(range(n))


def test_find_in_a_feistel_order_of_ten_billion_samples_is_instant() -> None:
    n = 10**10
    sampler = DistributedSampler(range(n), 8, 0, seed=5, algorithm="feistel")
    # 3 epochs of 1,000 steps each (8 ranks x 4 samples), somewhere in each epoch
    history = DataHistory([[e * 1000, e, 10**9 * (e + 1), 8, 4, 1, 1000, 0] for e in range(3)])
    (batch,) = trace_step(sampler, history, 1500)
    sample = int(batch.ranks[3].indices[2])
    started = time.perf_counter()
    hits = find_sample(sampler, history, sample)
    took = time.perf_counter() - started
    assert [(h.epoch, h.step, h.rank) for h in hits] == [(1, 1500, 3)]
    assert took < 0.1, took  # the target: under 100 ms per epoch
