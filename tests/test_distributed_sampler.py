import itertools
import json
import warnings
from typing import Any

import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st
from resume_helpers import assert_resumes

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    ResumeWarning,
    SampleKey,
    StateMismatchError,
)
from lightning_resumable_data.index import PermutationAlgorithm, samples_per_rank
from lightning_resumable_data.randomness import KeyedBatch

ALGORITHMS: list[PermutationAlgorithm] = ["randperm", "feistel"]


@given(
    n=st.integers(1, 300),
    world=st.integers(1, 9),
    data=st.data(),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 100),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
@settings(max_examples=300)
def test_equals_torch_distributed_sampler(
    n: int, world: int, data: st.DataObject, seed: int, epoch: int, shuffle: bool, drop_last: bool
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    theirs: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        range(n),  # type: ignore[arg-type]
        world,
        rank,
        shuffle,
        seed,
        drop_last,
    )
    ours = DistributedSampler(range(n), world, rank, shuffle, seed, drop_last)
    theirs.set_epoch(epoch)
    ours.set_epoch(epoch)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs) == ours.num_samples == theirs.num_samples
    assert ours.total_size == theirs.total_size


def test_large_epoch_equals_torch_across_chunks() -> None:
    n = 200_003  # several internal chunks, odd length
    theirs: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        range(n),  # type: ignore[arg-type]
        3,
        2,
        seed=11,
    )
    ours = DistributedSampler(range(n), 3, 2, seed=11)
    assert list(ours) == list(theirs)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(
    n=st.integers(1, 200),
    world=st.integers(1, 6),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_ranks_are_disjoint_and_cover_the_epoch(
    algorithm: PermutationAlgorithm, n: int, world: int, shuffle: bool, drop_last: bool
) -> None:
    shards = [
        list(DistributedSampler(range(n), world, r, shuffle, 3, drop_last, algorithm=algorithm))
        for r in range(world)
    ]
    per_rank = samples_per_rank(n, world, drop_last)
    assert all(len(s) == per_rank for s in shards)
    seen = list(itertools.chain.from_iterable(shards))
    if drop_last:
        assert len(set(seen)) == len(seen) == per_rank * world  # disjoint
    else:
        assert set(seen) == set(range(n))  # covered; duplicates are only the < world pads
        assert len(seen) - n in range(world)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(
    n=st.integers(1, 120),
    world=st.integers(1, 4),
    data=st.data(),
    drop_last=st.booleans(),
)
@settings(max_examples=60)
def test_save_anywhere_and_resume_exactly(
    algorithm: PermutationAlgorithm, n: int, world: int, data: st.DataObject, drop_last: bool
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    k = data.draw(st.integers(0, samples_per_rank(n, world, drop_last)))
    epoch = data.draw(st.integers(0, 5))

    def make() -> DistributedSampler:
        return DistributedSampler(
            range(n),
            world,
            rank,
            seed=5,
            drop_last=drop_last,
            algorithm=algorithm,
        )

    assert_resumes(make, epoch, k)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(
    n=st.integers(1, 150),
    world=st.integers(1, 5),
    new_world=st.integers(1, 5),
    data=st.data(),
    drop_last=st.booleans(),
)
@settings(max_examples=80)
def test_elastic_resume_sees_every_sample_once(
    algorithm: PermutationAlgorithm,
    n: int,
    world: int,
    new_world: int,
    data: st.DataObject,
    drop_last: bool,
) -> None:
    steps = data.draw(st.integers(0, samples_per_rank(n, world, drop_last)))
    consumed: list[int] = []
    state: dict[str, Any] = {}
    for rank in range(world):  # every rank trains `steps` samples, then the job dies
        sampler = DistributedSampler(
            range(n), world, rank, drop_last=drop_last, algorithm=algorithm
        )
        sampler.set_epoch(2)
        iterator = iter(sampler)
        consumed += itertools.islice(iterator, steps)
        if rank == 0:
            state = sampler.state_dict()  # rank 0 writes the checkpoint
    assert state["consumed"] == steps * world
    rest: list[int] = []
    for rank in range(new_world):  # every new rank loads rank 0's state
        sampler = DistributedSampler(
            range(n), new_world, rank, drop_last=drop_last, algorithm=algorithm
        )
        sampler.load_state_dict(state)
        sampler.set_epoch(2)
        rest += list(sampler)
    everything = consumed + rest
    if drop_last:
        assert len(everything) == len(set(everything))  # nothing twice
        assert n - len(everything) < max(world, new_world)  # only a ragged tail dropped
    else:
        assert set(everything) == set(range(n))  # nothing lost
        assert len(everything) - n < max(world, new_world)  # only pads repeat


def test_consumed_counts_global_samples_and_skip_is_one_shot() -> None:
    sampler = DistributedSampler(range(20), num_replicas=2, rank=1, shuffle=False)
    sampler.set_skip(3)
    assert sampler.consumed == 6
    assert list(sampler) == [7, 9, 11, 13, 15, 17, 19]
    assert sampler.state_dict()["consumed"] == 20
    assert list(sampler) == list(range(1, 20, 2))  # the skip applied once


def test_set_epoch_keeps_or_discards_a_restored_position() -> None:
    saved = DistributedSampler(range(10), 1, 0, shuffle=False)
    iterator = iter(saved)
    next(iterator)
    state = saved.state_dict()
    fresh = DistributedSampler(range(10), 1, 0, shuffle=False)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)  # same epoch: position kept
    assert fresh.consumed == 1
    with pytest.warns(ResumeWarning, match=r"set_epoch\(1\) discards the restored position"):
        fresh.set_epoch(1)
    assert list(fresh) == list(range(10))


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(
    "supersede",
    [
        lambda s: s.set_epoch(1),
        lambda s: s.load_state_dict(s.state_at(1, 4)),
        lambda s: s.set_skip(2),
    ],
    ids=["set_epoch", "load_state_dict", "set_skip"],
)
def test_an_iterator_claimed_before_a_set_epoch_no_longer_moves_the_position(
    batched: bool, supersede: Any
) -> None:
    """An iterator taken before ``set_epoch``/a load/a skip yields its epoch (as torch's) but
    the state is the new start's: what the next ``iter`` reads, never the old iterator's count.
    """
    sampler = DistributedSampler(range(20), 2, 0, seed=3)
    expected_next = DistributedSampler(range(20), 2, 0, seed=3)
    supersede(expected_next)
    state = expected_next.state_dict()
    old_order = list(DistributedSampler(range(20), 2, 0, seed=3))
    if batched:  # claimed, not read yet
        batches = sampler.iter_batches(2)
        supersede(sampler)
        read = [i for batch in itertools.islice(batches, 3) for i in batch]
    else:
        samples = iter(sampler)
        supersede(sampler)
        read = list(itertools.islice(samples, 6))
    assert read == old_order[:6]  # the order the iterator was taken for
    assert sampler.state_dict() == state  # not (new epoch, 6 old samples consumed)
    assert list(sampler) == list(expected_next)


def test_feistel_handles_ten_billion_samples_lazily() -> None:
    sampler = DistributedSampler(range(10**10), 8, 3, seed=1, algorithm="feistel")
    first = list(itertools.islice(iter(sampler), 1000))
    assert len(set(first)) == 1000
    assert max(first) < 10**10
    assert sampler.state_dict()["consumed"] == 8000


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_replicas": 0, "rank": 0}, ValueError, "num_replicas=0 must be >= 1"),
        ({"num_replicas": 2, "rank": 2}, ValueError, r"^Invalid rank 2, rank should be in the"),
        ({"num_replicas": 2, "rank": -1}, ValueError, r"^Invalid rank -1, .* interval \[0, 1\]"),
        (
            {"num_replicas": 2, "rank": 0, "seed": -(2**63) - 1},
            ValueError,
            r"\[-2\*\*63, 2\*\*64\)",
        ),
        ({"num_replicas": 2, "rank": 0, "seed": 1.5}, TypeError, "seed=1.5 must be an int"),
        ({"num_replicas": 1, "rank": 0, "algorithm": "x"}, ValueError, "expected one of"),
    ],
)
def test_bad_construction_is_explained(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DistributedSampler(range(10), **kwargs)


def test_empty_dataset_yields_nothing_as_torch_and_unsized_is_refused() -> None:
    for world in (1, 3):
        ours = DistributedSampler([], world, 0)
        theirs = torch.utils.data.DistributedSampler([], world, 0)  # type: ignore[var-annotated,arg-type]
        assert list(ours) == list(theirs) == []
        assert len(ours) == len(theirs) == 0
        assert list(ours.iter_batches(2)) == []
        assert ours.state_dict()["consumed"] == 0
    with pytest.raises(TypeError, match="map-style dataset with __len__"):
        DistributedSampler(iter(range(3)), 1, 0)  # type: ignore[arg-type]


def test_none_world_without_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    sampler = DistributedSampler(range(4))
    assert (sampler.num_replicas, sampler.rank) == (1, 0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(RuntimeError, match="not initialised although WORLD_SIZE=4"):
        DistributedSampler(range(4))


def test_negative_skip_and_epoch_are_refused() -> None:
    sampler = DistributedSampler(range(4), 1, 0)
    with pytest.raises(ValueError, match="samples=-1 must be >= 0"):
        sampler.set_skip(-1)
    with pytest.raises(ValueError, match="epoch=-2 must be >= 0"):
        sampler.set_epoch(-2)


def _state(**changes: Any) -> dict[str, Any]:
    sampler = DistributedSampler(range(10), 2, 0, seed=1)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    for key, value in changes.items():
        if key in state["fingerprint"]:
            state["fingerprint"][key] = value
        elif value is None:
            del state[key]
        else:
            state[key] = value
    return state


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"version": 99}, "version=99, this library reads version=2"),
        (
            {"version": 1},
            "version=1, this library reads version=2: .*'feistel' order.*"
            "'randperm' order is unchanged.*Finish that run with version 0.1, which wrote it",
        ),
        ({"kind": "MixtureSampler"}, "written by kind='MixtureSampler'"),
        ({"epoch": None}, "key 'epoch' is missing"),
        ({"consumed": "2"}, "key 'consumed' is '2'; expected int"),
        ({"consumed": -4}, "key 'consumed'=-4 must be >= 0"),
        ({"consumed": 12}, "consumed=12 is past the end of an epoch of 10 samples"),
        ({"num_replicas": 0}, "num_replicas=0; a state is saved by at least one rank"),
        (
            {"consumed": 2**63, "num_replicas": 3},
            r"consumed=9223372036854775808 is past the end .* over num_replicas=3 ranks "
            r"\(at most 12\)",
        ),
        ({"dataset_length": 11}, "dataset_length: saved 11, now 10"),
        ({"seed": 2}, "seed: saved 2, now 1"),
        ({"algorithm": "feistel"}, "algorithm: saved 'feistel', now 'randperm'"),
        ({"fingerprint": None}, "key 'fingerprint' is missing|no 'fingerprint' dict"),
    ],
)
def test_bad_state_is_refused_and_changes_nothing(changes: dict[str, Any], match: str) -> None:
    sampler = DistributedSampler(range(10), 2, 0, seed=1)
    sampler.set_epoch(3)
    before = sampler.state_dict()
    with pytest.raises(StateMismatchError, match=match):
        sampler.load_state_dict(_state(**changes))
    assert sampler.state_dict() == before
    untouched = DistributedSampler(range(10), 2, 0, seed=1)
    untouched.set_epoch(3)
    assert list(sampler) == list(untouched)


@pytest.mark.parametrize(("saved_world", "drop_last"), [(16, False), (2**63 + 3, False), (5, True)])
def test_finished_epoch_from_a_wider_world_saves_a_state_that_loads(
    saved_world: int, drop_last: bool
) -> None:
    # 16 ranks pad an epoch of 10 samples to 16; resumed on 2 ranks, nothing is left to read,
    # and the state saved before the next epoch must load again on those 2 ranks.
    state = DistributedSampler(range(10), 2, 0, seed=1, drop_last=drop_last).state_dict()
    total = 10 if drop_last else saved_world
    state.update(consumed=total, num_replicas=saved_world)
    sampler = DistributedSampler(range(10), 2, 0, seed=1, drop_last=drop_last)
    sampler.load_state_dict(state)
    again = sampler.state_dict()
    assert (again["consumed"], again["num_replicas"]) == (10, 2)
    fresh = DistributedSampler(range(10), 2, 0, seed=1, drop_last=drop_last)
    fresh.load_state_dict(again)
    assert list(sampler) == list(fresh) == []


def test_non_dict_state_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected a dict"):
        DistributedSampler(range(10), 1, 0).load_state_dict([1, 2])  # type: ignore[arg-type]


def test_iteration_is_lazy() -> None:
    sampler = DistributedSampler(range(10**8), 8, 0, algorithm="feistel")
    iterator = iter(sampler)
    assert isinstance(next(iterator), int)
    assert sampler.state_dict()["consumed"] == 8  # one sample on each of 8 ranks


@pytest.mark.parametrize("seed", [-1, -5, -(2**32), -(2**63)])
@pytest.mark.parametrize("algorithm", ["randperm", "feistel"])
def test_negative_seeds_wrap_as_torchs_do(seed: int, algorithm: PermutationAlgorithm) -> None:
    # torch's generator takes seeds in [-2**63, 2**64) and wraps a negative one modulo 2**64.
    data: Any = range(50)
    for epoch, rank in itertools.product(range(3), range(3)):
        ours = DistributedSampler(data, 3, rank, seed=seed, algorithm=algorithm)
        ours.set_epoch(epoch)
        if seed % 2**64 + epoch < 2**64:  # else torch refuses the wrapped seed's epoch
            wrapped = DistributedSampler(data, 3, rank, seed=seed % 2**64, algorithm=algorithm)
            wrapped.set_epoch(epoch)
            assert list(ours) == list(wrapped)
        if algorithm == "randperm":
            theirs = torch.utils.data.DistributedSampler[int](data, 3, rank, seed=seed)
            theirs.set_epoch(epoch)
            assert list(ours) == list(theirs)
    keyed = DistributedSampler(data, 1, 0, seed=seed, algorithm=algorithm, sample_keys=True)
    iterator = iter(keyed)
    first = next(iterator)
    assert isinstance(first, SampleKey)
    assert first.seed == seed % 2**64  # keys are 64-bit words
    state = json.loads(json.dumps(keyed.state_dict()))
    assert state["fingerprint"]["seed"] == seed
    again = DistributedSampler(data, 1, 0, seed=seed, algorithm=algorithm, sample_keys=True)
    again.load_state_dict(state)
    rest: list[Any] = list(iterator)
    resumed: list[Any] = list(again)
    assert [(int(k), k.position) for k in resumed] == [(int(k), k.position) for k in rest]


@pytest.mark.parametrize(("seed", "epoch"), [(2**63 - 1, 1), (2**64 - 2, 1), (2**64 - 1, 0)])
def test_seeds_torch_accepts_are_accepted_with_torchs_order(seed: int, epoch: int) -> None:
    # torch seeds the epoch with seed + epoch, anything up to 2**64 - 1.
    ours = DistributedSampler(range(50), num_replicas=2, rank=1, seed=seed)
    theirs: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        range(50),  # type: ignore[arg-type]
        num_replicas=2,
        rank=1,
        seed=seed,
    )
    ours.set_epoch(epoch)
    theirs.set_epoch(epoch)
    assert list(ours) == list(theirs)
    feistel = DistributedSampler(range(50), num_replicas=1, rank=0, seed=seed, algorithm="feistel")
    feistel.set_epoch(epoch)
    assert sorted(feistel) == list(range(50))


def test_seed_plus_epoch_past_torchs_range_is_explained() -> None:
    sampler = DistributedSampler(range(5), num_replicas=1, rank=0, seed=2**64 - 1)
    with pytest.raises(ValueError, match=r"seed \+ epoch < 2\*\*64"):
        sampler.set_epoch(1)
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 must be in \[-2\*\*63, 2"):
        DistributedSampler(range(5), num_replicas=1, rank=0, seed=2**64)


# Found by mutation testing of samplers/ (tests/MUTATION.md): drop_last=True in the
# position arithmetic, the end-of-epoch boundary and the seed range of a loaded state.


def test_samples_left_drops_the_ragged_tail_with_drop_last() -> None:
    def left(drop_last: bool, consumed: int) -> int:
        sampler = DistributedSampler(range(10), 3, 0, shuffle=False, drop_last=drop_last)
        return sampler.samples_left(consumed)

    assert [left(True, c) for c in (0, 3, 9)] == [3, 2, 0]
    assert [left(False, c) for c in (0, 3, 9)] == [4, 3, 1]


def test_a_state_past_the_drop_last_end_of_its_epoch_is_refused() -> None:
    sampler = DistributedSampler(range(10), 3, 0, drop_last=True)  # 9 samples an epoch
    state = sampler.state_at(0, 9)
    DistributedSampler(range(10), 3, 0, drop_last=True).load_state_dict(state)
    state["consumed"] = 10
    with pytest.raises(StateMismatchError, match=r"consumed=10 is past the end .*at most 9"):
        DistributedSampler(range(10), 3, 0, drop_last=True).load_state_dict(state)


def test_the_end_of_an_epoch_is_restated_in_a_narrower_drop_last_layout() -> None:
    """10 samples, drop_last: 2 ranks end at 10, 3 ranks at 9; a state saved at the end on
    2 ranks resumes on 3 at their end (9), so the state they save loads again."""
    saved = DistributedSampler(range(10), 2, 0, drop_last=True).state_at(0, 10)
    resumed = DistributedSampler(range(10), 3, 0, drop_last=True)
    resumed.load_state_dict(saved)
    assert resumed.state_dict()["consumed"] == 9
    assert list(resumed) == []


def test_a_state_whose_epoch_takes_the_seed_past_2_64_is_refused() -> None:
    seed = 2**64 - 3
    state = DistributedSampler(range(8), 1, 0, seed=seed).state_at(2, 0)  # seed + 2 is fine
    DistributedSampler(range(8), 1, 0, seed=seed).load_state_dict(state)
    state["epoch"] = 3  # seed + 3 == 2**64: past torch's seed range
    with pytest.raises(StateMismatchError, match=r"epoch=3 with seed=.* exceeds 2\*\*64 - 1"):
        DistributedSampler(range(8), 1, 0, seed=seed).load_state_dict(state)


# Found by mutation testing of samplers/ (tests/MUTATION.md, the rows left open or unverified
# by the first run): the batched pass's counts and keyed positions, its default drop_last,
# the frontier, set_skip's sum, a recomputed pass after set_epoch, pins, the epoch lock.


def test_keyed_batches_carry_the_global_positions_of_their_samples() -> None:
    """A KeyedBatch holds rank r's positions r, r + W, ... (the pad's too), batch after batch."""
    plain = DistributedSampler(range(10), 3, 1, shuffle=False, sample_keys=True)
    batches = [batch for batch in plain.iter_batches(2) if isinstance(batch, KeyedBatch)]
    assert batches == [[1, 4], [7, 0]]  # position 10 is the pad: 10 % 10
    assert [batch.positions.tolist() for batch in batches] == [[1, 4], [7, 10]]
    keys = [[key for key in batch if isinstance(key, SampleKey)] for batch in batches]
    assert [[key.position for key in batch] for batch in keys] == [[1, 4], [7, 10]]

    shuffled = DistributedSampler(range(10), 3, 2, seed=4, sample_keys=True)
    theirs: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
        range(10),  # type: ignore[arg-type]
        3,
        2,
        seed=4,
    )
    shuffled.load_state_dict(shuffled.state_at(0, 3))  # rank 2 reads positions 5, 8, 11
    resumed = [batch for batch in shuffled.iter_batches(2) if isinstance(batch, KeyedBatch)]
    assert [index for batch in resumed for index in batch[:]] == list(theirs)[1:]
    assert [batch.positions.tolist() for batch in resumed] == [[5, 8], [11]]


def test_consumed_advances_with_every_batch_handed_out() -> None:
    """iter_batches: after each batch the position counts every batch so far, on every rank."""
    sampler = DistributedSampler(range(20), 2, 1, seed=3)
    batches = sampler.iter_batches(3)  # rank 1 reads 10 samples: 3, 3, 3, 1
    read: list[int] = []
    states: list[dict[str, Any]] = []
    for expected in (6, 12, 18, 20):
        read += next(batches)
        assert sampler.consumed == expected
        states.append(sampler.state_dict())
    assert read == list(DistributedSampler(range(20), 2, 1, seed=3))
    resumed = DistributedSampler(range(20), 2, 1, seed=3)
    resumed.load_state_dict(states[1])  # after 2 batches
    assert [i for batch in resumed.iter_batches(3) for i in batch] == read[6:]


def test_iter_batches_keeps_a_short_last_batch_by_default() -> None:
    """iter_batches(batch_size) yields what BatchSampler(sampler, batch_size, False) yields."""
    sampler = DistributedSampler(range(10), 2, 1, seed=3)  # rank 1 reads 5 samples
    expected = list(torch.utils.data.BatchSampler(sampler, 4, drop_last=False))
    assert [len(batch) for batch in expected] == [4, 1]
    assert list(sampler.iter_batches(4)) == expected
    assert sampler.consumed == 10


def test_frontier_of_a_batched_pass_ends_at_the_end_of_the_epoch() -> None:
    """The order computed (frontier) is at least what was handed out and never past the epoch."""
    for start in (0, 4):
        sampler = DistributedSampler(range(10), 2, 0, shuffle=False)
        sampler.load_state_dict(sampler.state_at(0, start))
        batches = sampler.iter_batches(2)
        next(batches)
        assert sampler.consumed <= sampler.frontier <= sampler.total_size == 10
        list(batches)
        assert sampler.frontier == sampler.consumed == 10


def test_set_skip_adds_to_earlier_skips_and_to_a_restored_position() -> None:
    """set_skip skips `samples` more: two calls add up, and both add to a loaded position."""
    sampler = DistributedSampler(range(20), 2, 1, shuffle=False)
    sampler.set_skip(1)
    sampler.set_skip(2)  # 3 of this rank's samples: 6 global
    assert sampler.consumed == 6
    assert list(sampler) == [7, 9, 11, 13, 15, 17, 19]

    resumed = DistributedSampler(range(20), 2, 1, shuffle=False)
    resumed.load_state_dict(resumed.state_at(0, 4))
    resumed.set_skip(3)  # 4 + 3 * 2 global samples
    assert resumed.consumed == 10
    assert list(resumed) == [11, 13, 15, 17, 19]


@pytest.mark.parametrize("start", [0, 10])
def test_an_iterator_keeps_its_order_through_a_weight_change_and_a_set_epoch(start: int) -> None:
    """A batched pass handed out, recomputed after a weight change, ignores a later set_epoch.

    From a restored start too: the recompute starts from the iteration's own start, not from
    the sampler's position, which ``set_epoch`` resets.
    """
    mixture = MixtureDataset({"a": range(100), "b": range(100, 200)})

    def read(change: bool, move: bool) -> list[list[int]]:
        sampler = MixtureSampler(mixture, [1.0, 1.0], 2, 0, seed=1, samples_per_epoch=60)
        sampler.load_state_dict(sampler.state_at(0, start))
        batches = sampler.iter_batches(3)
        seen = [next(batches), next(batches)]
        if change:
            sampler.update_weights([1.0, 5.0])  # from position 12: computed, not handed out
        if move:
            sampler.set_epoch(1)
        return seen + list(batches)

    uninterrupted = read(change=True, move=False)
    assert len(uninterrupted) == {0: 10, 10: 9}[start]  # rank 0's 30 or 25 samples, by 3
    assert uninterrupted[2:] != read(change=False, move=False)[2:]  # the change recomputed
    assert read(change=True, move=True) == uninterrupted


class PinnedData:
    """A dataset read from files that `pins` identifies, as a remote one declares them."""

    def __init__(self, length: int, pins: dict[str, str]) -> None:
        self.length, self.pins = length, pins

    def __len__(self) -> int:
        return self.length


def test_a_state_pins_the_datasets_files_and_a_changed_one_is_refused() -> None:
    """The state holds the dataset's pins; a file with another identity now is refused by name."""
    pins = {"a.bin": "etag=1", "b.bin": "etag=7"}
    saved = DistributedSampler(PinnedData(10, pins), 2, 0, seed=1)
    iterator = iter(saved)
    next(iterator)
    state = json.loads(json.dumps(saved.state_dict()))
    assert state["pins"] == pins
    assert "pins" not in DistributedSampler(range(10), 2, 0, seed=1).state_dict()
    same = DistributedSampler(PinnedData(10, dict(pins)), 2, 0, seed=1)
    same.load_state_dict(state)
    assert list(same) == list(iterator)
    changed = DistributedSampler(PinnedData(10, {**pins, "a.bin": "etag=2"}), 2, 0, seed=1)
    with pytest.raises(
        StateMismatchError,
        match=r"^Cannot load this state into DistributedSampler: 1 file changed since it was "
        r"saved: 'a\.bin' was etag=1, is now etag=2\.",
    ):
        changed.load_state_dict(state)
    assert changed.state_dict()["consumed"] == 0


def test_lock_epoch_keeps_its_restored_position_and_ignores_set_epoch_to_other_epochs() -> None:
    """lock_epoch (the loader's) keeps a restored position; set_epoch to another epoch is void."""

    def make() -> DistributedSampler:
        return DistributedSampler(range(20), 2, 1, seed=3)

    def order(epoch: int) -> list[int]:
        sampler = make()
        sampler.set_epoch(epoch)
        return list(sampler)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sampler = make()
        sampler.load_state_dict(sampler.state_at(1, 8))  # 4 of rank 1's samples of epoch 1
        sampler.lock_epoch(1)
        sampler.set_epoch(0)  # a trainer's epoch counter, one behind: ignored
        sampler.set_epoch(2)
        assert (sampler.epoch, sampler.consumed) == (1, 8)
        assert list(sampler) == order(1)[4:]
        sampler.load_state_dict(sampler.state_at(1, 8))
        sampler.lock_epoch(2)  # the loader moved on: the position goes, without a warning
        assert (sampler.epoch, sampler.consumed) == (2, 0)
        assert list(sampler) == order(2)
    assert [str(warning.message) for warning in caught] == []


def test_a_refused_lock_epoch_leaves_a_sampler_that_reads_its_epoch() -> None:
    """lock_epoch past the seed range raises; the sampler then reads its epoch from the start."""
    sampler = DistributedSampler(range(10), 2, 0, seed=2**64 - 1)
    with pytest.raises(ValueError, match=r"seed \+ epoch < 2\*\*64"):
        sampler.lock_epoch(1)
    assert (sampler.epoch, sampler.state_dict()["consumed"]) == (0, 0)
    assert list(sampler) == list(DistributedSampler(range(10), 2, 0, seed=2**64 - 1))


def test_a_refused_lock_epoch_keeps_a_restored_position() -> None:
    """lock_epoch refuses an epoch past the seed range before it changes anything."""
    sampler = DistributedSampler(range(10), 2, 0, seed=2**64 - 1)
    sampler.load_state_dict(sampler.state_at(0, 4))
    with pytest.raises(ValueError, match=r"seed \+ epoch < 2\*\*64"):
        sampler.lock_epoch(1)
    assert (sampler.epoch, sampler.consumed) == (0, 4)
    assert list(sampler) == list(DistributedSampler(range(10), 2, 0, seed=2**64 - 1))[2:]
