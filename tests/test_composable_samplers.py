"""Determined-style composable samplers: semantics, lengths, exact save/restore."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import (
    DistributedSampler,
    RepeatBatchSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableSequentialSampler,
    ShardBatchSampler,
    ShardSampler,
    SkipBatchSampler,
    SkipSampler,
    StateMismatchError,
)
from lightning_resumable_data.index.keys import key_rng
from lightning_resumable_data.samplers.composable import SHUFFLE_STREAM

AnySampler = Any  # the samplers are generic over their items; tests mix them freely


def take(iterable: Iterable[Any], count: int) -> list[Any]:
    return list(itertools.islice(iterable, count))


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint does to a state: it must be plain JSON data."""
    loaded: dict[str, Any] = json.loads(json.dumps(state))
    return loaded


def shuffled(n: int, seed: int, epoch: int) -> list[int]:
    """The documented shuffle: ``key_rng(SHUFFLE_STREAM, seed, epoch)`` (fixed-width keys)."""
    indices = np.arange(n)
    key_rng(SHUFFLE_STREAM, seed, epoch).shuffle(indices)
    return [int(i) for i in indices]


def repeated_shuffles(n: int, seed: int, epoch: int = 0) -> Iterator[int]:
    """The stream of a repeat over a shuffle: pass ``p`` is the shuffle of epoch ``epoch + p``."""
    for p in itertools.count():
        yield from shuffled(n, seed, epoch + p)


def determined_chain(n: int, seed: int, world: int, rank: int, skip: int) -> AnySampler:
    """Shuffle, repeat, shard, skip: Determined's recommended training chain."""
    shuffle = ReproducibleShuffleSampler(ResumableSequentialSampler(range(n)), seed)
    return SkipSampler(ShardSampler(RepeatSampler(shuffle), world, rank), skip)


class Offset(torch.utils.data.Dataset[int]):
    """Sample ``i`` is ``100 + i``: shows which indices a loader read."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __getitem__(self, index: int) -> int:
        return 100 + index

    def __len__(self) -> int:
        return self.length


# --- shuffle -----------------------------------------------------------------------------


def test_shuffle_is_a_pure_function_of_seed_and_epoch() -> None:
    def build(seed: int) -> ReproducibleShuffleSampler:
        return ReproducibleShuffleSampler(ResumableSequentialSampler(range(50)), seed)

    sampler = build(7)
    first = list(sampler)
    assert sorted(first) == list(range(50))
    assert first == shuffled(50, 7, 0)
    assert list(sampler) == first
    assert list(build(7)) == first
    assert list(build(8)) != first
    sampler.set_epoch(1)
    assert list(sampler) == shuffled(50, 7, 1) != first
    assert len(sampler) == 50


def test_seed_and_epoch_do_not_alias() -> None:
    # seed + epoch would make (seed=1, epoch=0) equal (seed=0, epoch=1).
    assert shuffled(30, 1, 0) != shuffled(30, 0, 1)
    one = ReproducibleShuffleSampler(range(30), seed=1)
    zero = ReproducibleShuffleSampler(range(30), seed=0)
    zero.set_epoch(1)
    assert list(one) != list(zero)


def test_shuffle_forwards_set_epoch_to_the_inner_sampler() -> None:
    inner = ResumableSequentialSampler(range(5))
    sampler = ReproducibleShuffleSampler(inner, seed=0)
    sampler.set_epoch(4)
    assert inner.epoch == 4


def test_batch_shuffle_permutes_whole_batches() -> None:
    batches = torch.utils.data.BatchSampler(
        ResumableSequentialSampler(range(10)), batch_size=3, drop_last=False
    )
    sampler = ReproducibleShuffleBatchSampler(batches, seed=3)
    first = list(sampler)
    assert sorted(first) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert [first[i] for i in np.argsort(shuffled(4, 3, 0))] == sorted(first)
    assert list(sampler) == first
    assert len(sampler) == 4
    orders = set()
    for epoch in range(6):
        sampler.set_epoch(epoch)
        orders.add(tuple(tuple(b) for b in sampler))
    assert len(orders) > 1


def test_shuffle_refuses_an_infinite_inner_sampler() -> None:
    with pytest.raises(ValueError, match=r"never ends.*Shuffle first, then repeat"):
        ReproducibleShuffleSampler(RepeatSampler(range(3)), seed=0)
    with pytest.raises(ValueError, match=r"never ends"):
        ReproducibleShuffleSampler(ShardSampler(RepeatSampler(range(3)), 2, 0), seed=0)


# --- repeat ------------------------------------------------------------------------------


def test_repeat_reshuffles_each_pass() -> None:
    repeat = RepeatSampler(ReproducibleShuffleSampler(ResumableSequentialSampler(range(8)), 5))
    assert len(repeat) == 8
    stream = take(repeat, 8 * 4)
    passes = [stream[i : i + 8] for i in range(0, 32, 8)]
    assert passes == [shuffled(8, 5, p) for p in range(4)]
    assert len({tuple(p) for p in passes}) == 4


def test_repeat_starts_at_its_epoch() -> None:
    repeat = RepeatSampler(ReproducibleShuffleSampler(range(8), 5))
    repeat.set_epoch(10)
    assert take(repeat, 20) == take(repeated_shuffles(8, 5, epoch=10), 20)


def test_repeat_of_a_plain_sampler_and_of_batches() -> None:
    assert take(RepeatSampler(range(3)), 8) == [0, 1, 2, 0, 1, 2, 0, 1]
    batches = torch.utils.data.BatchSampler(range(5), batch_size=2, drop_last=True)
    assert take(RepeatBatchSampler(batches), 5) == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]]


def test_repeat_batch_reshuffles_each_pass_through_a_torch_batch_sampler() -> None:
    shuffle = ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), seed=1)
    batches = torch.utils.data.BatchSampler(shuffle, batch_size=3, drop_last=False)
    stream = take(RepeatBatchSampler(batches), 6)
    for p in range(3):
        assert stream[2 * p] + stream[2 * p + 1] == shuffled(6, 1, p)


def test_repeat_of_a_distributed_sampler_reshuffles_each_pass() -> None:
    repeat = RepeatSampler(DistributedSampler(range(9), num_replicas=2, rank=1, seed=3))
    stream = take(repeat, 15)
    for p in range(3):
        alone = DistributedSampler(range(9), num_replicas=2, rank=1, seed=3)
        alone.set_epoch(p)
        assert stream[5 * p : 5 * p + 5] == list(alone)
    assert stream[:5] != stream[5:10]


def test_repeat_of_an_empty_sampler_raises_instead_of_hanging() -> None:
    with pytest.raises(ValueError, match=r"yielded nothing; repeating an empty sampler"):
        next(iter(RepeatSampler([])))


def test_repeat_state_is_pass_and_offset() -> None:
    repeat = RepeatSampler(ResumableSequentialSampler(range(4)))
    iterator = iter(repeat)
    take(iterator, 10)
    state = repeat.state_dict()
    assert (state["pass"], state["offset"]) == (2, 2)
    assert state["inner"]["epoch"] == 2


# --- shard -------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 60), world=st.integers(1, 7))
def test_shards_are_disjoint_and_cover_the_inner_stream(n: int, world: int) -> None:
    inner = shuffled(n, 0, 0)
    shards = [list(ShardSampler(inner, world, rank)) for rank in range(world)]
    for rank, shard in enumerate(shards):
        assert shard == inner[rank::world]
        assert len(ShardSampler(inner, world, rank)) == len(shard)
    merged = sorted(itertools.chain.from_iterable(shards))
    assert merged == sorted(inner)
    assert sum(len(s) for s in shards) == n


def test_shard_batch_sampler() -> None:
    batches = [[0], [1], [2], [3], [4]]
    assert list(ShardBatchSampler(batches, 2, 1)) == [[1], [3]]
    assert len(ShardBatchSampler(batches, 2, 0)) == 3
    assert len(ShardBatchSampler(batches, 2, 1)) == 2


def test_shards_of_a_repeat_interleave_into_the_repeat() -> None:
    world = 3
    streams = [
        take(ShardSampler(RepeatSampler(ReproducibleShuffleSampler(range(7), 2)), world, r), 10)
        for r in range(world)
    ]
    interleaved = [streams[i % world][i // world] for i in range(10 * world)]
    assert interleaved == take(repeated_shuffles(7, 2), 10 * world)


def test_shard_skip_maps_to_the_inner_in_constant_time() -> None:
    n = 10**12  # far too many to skip item by item
    shard = ShardSampler(ResumableSequentialSampler(range(n)), 4, 1)
    shard.set_skip(n // 4 - 2)
    assert list(iter(shard)) == [n - 7, n - 3]


@pytest.mark.parametrize(
    ("world", "rank", "error", "match"),
    [
        (2, 2, ValueError, r"rank=2 must be in \[0, num_replicas\) = \[0, 2\)"),
        (2, -1, ValueError, r"rank=-1 must be in"),
        (0, 0, ValueError, r"num_replicas=0 must be >= 1"),
        (2, True, TypeError, r"rank=True must be an int"),
    ],
)
def test_shard_rejects_bad_ranks(world: Any, rank: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ShardSampler(range(4), world, rank)


# --- skip --------------------------------------------------------------------------------


def test_skip_applies_to_the_first_iteration_only() -> None:
    skip = SkipSampler(ResumableSequentialSampler(range(5)), 3)
    assert len(skip) == 5
    assert list(skip) == [3, 4]
    assert list(skip) == [0, 1, 2, 3, 4]
    batches = SkipBatchSampler([[0, 1], [2, 3], [4]], 2)
    assert list(batches) == [[4]]
    assert list(batches) == [[0, 1], [2, 3], [4]]
    assert len(batches) == 3


def test_skip_survives_a_discarded_iterator() -> None:
    # torch's multi-worker DataLoader calls iter() on its batch sampler twice.
    skip = SkipBatchSampler([[0], [1], [2]], 2)
    iter(skip)
    assert list(skip) == [[2]]


def test_skip_over_a_repeat_skips_once() -> None:
    skip = SkipSampler(RepeatSampler(range(4)), 6)
    assert take(skip, 6) == [2, 3, 0, 1, 2, 3]


def test_skip_uses_the_inner_set_skip() -> None:
    n = 10**12
    skip = SkipSampler(ResumableSequentialSampler(range(n)), n - 2)
    assert list(iter(skip)) == [n - 2, n - 1]


def test_set_skip_counts_own_items_and_is_one_shot() -> None:
    shard = ShardSampler(ResumableSequentialSampler(range(20)), 3, 2)
    shard.set_skip(2)
    assert list(shard) == [8, 11, 14, 17]
    assert list(shard) == [2, 5, 8, 11, 14, 17]
    shuffle = ReproducibleShuffleSampler(range(10), seed=4)
    shuffle.set_skip(7)
    assert list(shuffle) == shuffled(10, 4, 0)[7:]


@pytest.mark.parametrize(
    ("build", "args", "error", "match"),
    [
        (SkipSampler, (range(3), -1), ValueError, r"SkipSampler: skip=-1 must be >= 0"),
        (SkipSampler, (range(3), 1.0), TypeError, r"skip=1.0 must be an int"),
        (ReproducibleShuffleSampler, (range(3), -5), ValueError, r"seed=-5 must be >= 0"),
        (SkipSampler, (7, 1), TypeError, r"wraps a sampler .* got int"),
        (
            ShardSampler,
            (torch.utils.data.TensorDataset(torch.zeros(3)), 1, 0),
            TypeError,
            r"got TensorDataset. For a dataset, wrap ResumableSequentialSampler\(dataset\)",
        ),
        (RepeatSampler, ("abc",), TypeError, r"wraps a sampler"),
    ],
)
def test_bad_input_raises_a_clear_error(
    build: Callable[..., object], args: tuple[Any, ...], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        build(*args)


def test_bad_set_skip_raises_and_changes_nothing() -> None:
    skip = SkipSampler(range(3), 1)
    with pytest.raises(ValueError, match=r"SkipSampler: samples=-1 must be >= 0"):
        skip.set_skip(-1)
    assert list(skip) == [1, 2]


def test_len_of_an_unsized_inner_raises() -> None:
    with pytest.raises(TypeError, match=r"has no length: its inner sampler generator"):
        len(SkipSampler((i for i in range(3)), 1))


# --- the Determined chain ----------------------------------------------------------------


def test_the_determined_chain_yields_shard_of_repeated_shuffles_after_a_skip() -> None:
    n, seed, world, skip = 11, 3, 3, 4
    expected_all = take(repeated_shuffles(n, seed), 200)
    for rank in range(world):
        chain = determined_chain(n, seed, world, rank, skip)
        assert take(chain, 40) == expected_all[rank::world][skip : skip + 40]


def test_set_epoch_is_forwarded_down_a_chain() -> None:
    sequential = ResumableSequentialSampler(range(9))
    shuffle = ReproducibleShuffleSampler(sequential, seed=0)
    chain = SkipSampler(ShardSampler(shuffle, 2, 0), 0)
    chain.set_epoch(3)
    assert (chain.epoch, shuffle.epoch, sequential.epoch) == (3, 3, 3)
    assert list(chain) == shuffled(9, 0, 3)[0::2]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 25),
    seed=st.integers(0, 2**32),
    world=st.integers(1, 4),
    data=st.data(),
)
def test_restore_the_determined_chain_after_any_number_of_items(
    n: int, seed: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1), label="rank")
    skip = data.draw(st.integers(0, 3 * n), label="skip")
    consumed = data.draw(st.integers(0, 4 * n), label="consumed")

    chain = determined_chain(n, seed, world, rank, skip)
    iterator = iter(chain)
    take(iterator, consumed)
    state = roundtrip(chain.state_dict())
    expected = take(iterator, 2 * n + 5)

    resumed = determined_chain(n, seed, world, rank, skip)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert take(resumed, 2 * n + 5) == expected


@pytest.mark.parametrize("consumed", [0, 1, 5, 9, 10, 11, 23, 40])
def test_rank_0_state_restores_every_rank(consumed: int) -> None:
    # Lightning gives every rank the state that rank 0 saved.
    n, seed, world = 10, 9, 3
    chain = determined_chain(n, seed, world, 0, 2)
    take(chain, consumed)
    state = roundtrip(chain.state_dict())
    for rank in range(world):
        uninterrupted = determined_chain(n, seed, world, rank, 2)
        expected = take(uninterrupted, consumed + 12)[consumed:]
        resumed = determined_chain(n, seed, world, rank, 2)
        resumed.load_state_dict(state)
        assert take(resumed, 12) == expected


BUILDERS: dict[str, Callable[[], AnySampler]] = {
    "shuffle": lambda: ReproducibleShuffleSampler(ResumableSequentialSampler(range(13)), 1),
    "shuffle batches": lambda: ReproducibleShuffleBatchSampler(
        torch.utils.data.BatchSampler(range(13), 2, False), 1
    ),
    "repeat of plain": lambda: RepeatSampler(range(5)),
    "repeat of batches": lambda: RepeatBatchSampler(
        torch.utils.data.BatchSampler(ReproducibleShuffleSampler(range(7), 2), 3, False)
    ),
    "shard of repeat": lambda: ShardBatchSampler(
        RepeatBatchSampler(ReproducibleShuffleBatchSampler([[0], [1, 2], [3]], 4)), 2, 1
    ),
    "skip of plain": lambda: SkipSampler(list(range(20)), 3),
    "skip of repeat batches": lambda: SkipBatchSampler(RepeatBatchSampler([[0], [1], [2]]), 4),
    "repeat of distributed": lambda: RepeatSampler(DistributedSampler(range(9), 2, 1, seed=3)),
    "repeat of sequential with start": lambda: RepeatSampler(
        ResumableSequentialSampler(range(6), start_index=4)
    ),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("consumed", [0, 1, 2, 3, 6, 7, 12, 13, 14, 30])
def test_round_trip_every_sampler(name: str, consumed: int) -> None:
    build = BUILDERS[name]
    sampler = build()
    iterator = iter(sampler)
    take(iterator, consumed)
    state = roundtrip(sampler.state_dict())
    expected = take(itertools.chain(iterator, sampler), 30)  # the rest, then the next epoch

    resumed = build()
    resumed.load_state_dict(state)
    assert take(itertools.chain(iter(resumed), resumed), 30) == expected


def test_state_nests_the_inner_state_and_fingerprints_what_matters() -> None:
    chain = determined_chain(10, 5, 4, 3, 2)
    take(chain, 3)
    state = chain.state_dict()
    assert state["kind"] == "SkipSampler"
    assert state["position"] == 5
    shard = state["inner"]
    assert shard["kind"] == "ShardSampler"
    assert shard["fingerprint"] == {"num_replicas": 4}  # no rank
    repeat = shard["inner"]
    assert repeat["kind"] == "RepeatSampler"
    shuffle = repeat["inner"]
    assert (shuffle["kind"], shuffle["fingerprint"]) == ("ReproducibleShuffleSampler", {"seed": 5})
    assert shuffle["inner"]["kind"] == "ResumableSequentialSampler"
    assert "inner" not in RepeatSampler(range(3)).state_dict()


def test_restore_skips_in_constant_time_down_the_chain() -> None:
    n = 10**5
    state = determined_chain(n, 0, 2, 0, 0).state_dict()
    state["position"] = 10**9  # a billion items into the run: 20,000 passes
    resumed = determined_chain(n, 0, 2, 0, 0)
    resumed.load_state_dict(state)
    global_position = 2 * 10**9
    expected = shuffled(n, 0, global_position // n)[global_position % n :: 2][:3]
    assert take(resumed, 3) == expected


# --- refused states ----------------------------------------------------------------------


def corrupt(state: dict[str, Any], path: tuple[str, ...], key: str, value: Any) -> dict[str, Any]:
    state = roundtrip(state)
    target = state
    for step in path:
        target = target[step]
    target[key] = value
    return state


def saved_chain_state() -> dict[str, Any]:
    chain = determined_chain(12, 1, 2, 0, 3)
    take(chain, 5)
    return roundtrip(chain.state_dict())


@pytest.mark.parametrize(
    ("path", "key", "value", "match"),
    [
        ((), "position", -1, r"'position'=-1 must be >= 0"),
        ((), "kind", "ShardSampler", r"written by kind='ShardSampler'"),
        (("inner",), "fingerprint", {"num_replicas": 3}, r"num_replicas: saved 3, now 2"),
        (("inner", "inner"), "pass", "x", r"key 'pass' is 'x'"),
        (("inner", "inner", "inner"), "fingerprint", {"seed": 2}, r"seed: saved 2, now 1"),
        (
            ("inner", "inner", "inner", "inner"),
            "fingerprint",
            {"dataset_length": 13},
            r"dataset_length: saved 13, now 12",
        ),
        (("inner", "inner", "inner", "inner"), "index", 13, r"index=13 is past the end"),
        (("inner", "inner"), "inner", None, r"holds no 'inner' state"),
    ],
)
def test_a_refused_state_changes_nothing_in_the_chain(
    path: tuple[str, ...], key: str, value: Any, match: str
) -> None:
    bad = corrupt(saved_chain_state(), path, key, value)
    chain = determined_chain(12, 1, 2, 0, 3)
    iterator = iter(chain)
    take(iterator, 2)
    before = chain.state_dict()
    with pytest.raises(StateMismatchError, match=match):
        chain.load_state_dict(bad)
    assert chain.state_dict() == before
    uninterrupted = determined_chain(12, 1, 2, 0, 3)
    assert take(iterator, 10) == take(uninterrupted, 12)[2:]


def test_a_state_with_an_inner_state_is_refused_by_a_stateless_inner() -> None:
    state = SkipSampler(ResumableSequentialSampler(range(4)), 1).state_dict()
    plain = SkipSampler(range(4), 1)
    with pytest.raises(StateMismatchError, match=r"holds an 'inner' state"):
        plain.load_state_dict(state)
    assert list(plain) == [1, 2, 3]


def test_set_epoch_to_another_epoch_starts_it_from_the_beginning() -> None:
    shuffle = ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), seed=0)
    take(shuffle, 4)
    state = shuffle.state_dict()
    resumed = ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), seed=0)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)  # the same epoch keeps the restored position
    assert list(resumed) == shuffled(6, 0, 0)[4:]
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert list(resumed) == shuffled(6, 0, 1)


def test_a_multi_worker_data_loader_resumes_a_batch_chain() -> None:
    def build() -> SkipBatchSampler:
        shuffle = ReproducibleShuffleSampler(ResumableSequentialSampler(range(10)), seed=0)
        batches = torch.utils.data.BatchSampler(shuffle, batch_size=4, drop_last=False)
        return SkipBatchSampler(ShardBatchSampler(RepeatBatchSampler(batches), 1, 0), 1)

    def load(batch_sampler: SkipBatchSampler) -> list[list[int]]:
        loader = torch.utils.data.DataLoader(Offset(10), batch_sampler=batch_sampler, num_workers=2)
        return [batch.tolist() for batch in take(loader, 5)]

    passes = [shuffled(10, 0, p) for p in range(4)]
    reference = [[100 + i for i in s[a : a + 4]] for s in passes for a in (0, 4, 8)]
    assert load(build()) == reference[1:6]

    saved = build()
    take(iter(saved), 3)
    resumed = build()
    resumed.load_state_dict(roundtrip(saved.state_dict()))
    assert load(resumed) == reference[4:9]
