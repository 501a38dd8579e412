"""A dataset that grew, shrank or was replaced between a checkpoint and its resume (samplers).

Property tests over sizes, layouts, positions and orders: the interrupted epoch reads every
unread old sample once (the removed ones never) and the new ones once where the policy puts
them, later epochs are whole over the new dataset, a second change chains, the changes are
replayed by every later resume, and every refusal names the change and the option.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sampler_reads import read

from lightning_resumable_data import (
    DataChangePolicy,
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    StateMismatchError,
)

POLICY = DataChangePolicy()


class Pinned:
    """A dataset of ``n`` samples whose files have identities (as remote shards have)."""

    def __init__(self, n: int, pins: Mapping[str, str]) -> None:
        self.n, self.pins = n, dict(pins)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def samplers(
    dataset: Any, world: int, policy: DataChangePolicy | None = POLICY, **options: Any
) -> list[DistributedSampler]:
    made = [DistributedSampler(dataset, world, rank, seed=5, **options) for rank in range(world)]
    for sampler in made:
        sampler.data_changes = policy
    return made


def next_epoch(group: list[DistributedSampler]) -> list[int]:
    for sampler in group:
        sampler.set_epoch(sampler.epoch + 1)
    return read(group, None, None)[0]


layouts = st.tuples(
    st.integers(1, 60),  # old length
    st.integers(1, 60),  # new length
    st.integers(1, 4),  # world before
    st.integers(1, 4),  # world after
    st.integers(0, 30),  # steps before the stop
    st.sampled_from(["randperm", "feistel"]),
    st.booleans(),  # shuffle
)


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_every_unread_sample_once_new_ones_once_later_epochs_whole(case: tuple[Any, ...]) -> None:
    old, new, world, world_after, steps, algorithm, shuffle = case
    options = {"algorithm": algorithm, "shuffle": shuffle, "drop_last": True}
    before, state = read(samplers(range(old), world, **options), None, steps)
    group = samplers(range(new), world_after, **options)
    rest, _ = read(group, state, None)
    unread = Counter(range(min(old, new))) - Counter(before)
    added = Counter(range(old, new))
    expected = unread + added
    got = Counter(rest)
    assert all(i < new for i in rest)  # a removed sample is never read
    assert got <= expected  # nothing twice, nothing read before (drop_last drops a tail)
    assert sum((expected - got).values()) < world_after  # only the ragged tail is dropped
    first = min(sum(unread.values()), len(rest))
    if state["consumed"]:  # (at an epoch's start the epoch simply has the new order)
        assert all(i < old for i in rest[:first])  # the unread old samples come first,
        assert all(i >= old for i in rest[first:])  # then the new ones
    later = next_epoch(group)  # the next epoch: the new dataset's order, its tail dropped
    assert len(set(later)) == len(later) == new - new % world_after
    assert set(later) <= set(range(new))


@settings(max_examples=60, deadline=None)
@given(layouts, st.integers(1, 60), st.integers(0, 10))
def test_a_second_change_in_the_same_epoch_chains(
    case: tuple[Any, ...], newer: int, more: int
) -> None:
    old, new, world, world_after, steps, algorithm, shuffle = case
    options = {"algorithm": algorithm, "shuffle": shuffle, "drop_last": True}
    first, state = read(samplers(range(old), world, **options), None, steps)
    group = samplers(range(new), world_after, **options)
    middle, state = read(group, state, more)
    # a sampler alone does not turn an epoch's end into the next epoch's start (the loader
    # does): only changes inside the epoch are compared
    assume(state["epoch"] == 0 and group[0].samples_left(state["consumed"]) > 0)
    rest, _ = read(samplers(range(newer), 1, **options), state, None)
    read_before = first + middle
    assert len(set(rest)) == len(rest)  # nothing twice after the second change
    assert not set(rest) & {i for i in read_before if i < min(old, new, newer)}  # nor again
    assert all(i < newer for i in rest)
    survivors = set(range(min(old, new, newer))) - set(read_before)
    assert survivors <= set(rest)  # every sample that was never removed or read is read
    assert set(range(max(old, new), newer)) <= set(rest)  # samples new in the end: read


def test_the_next_epoch_option_keeps_the_interrupted_epoch_as_it_was() -> None:
    policy = DataChangePolicy(grown="next_epoch")
    before, state = read(samplers(range(40), 2), None, 5)
    group = samplers(range(60), 2, policy)
    rest, _ = read(group, state, None)
    assert sorted(before + rest) == list(range(40))
    assert sorted(next_epoch(group)) == list(range(60))


def test_the_changes_are_saved_and_replayed_on_any_layout() -> None:
    _, state = read(samplers(range(30), 2), None, 4)
    group = samplers(range(50), 3)
    _, saved = read(group, state, 2)
    assert saved["changes"] == [[0, 8, 30, 50, 30, 50, 30]]
    assert saved["fingerprint"]["dataset_length"] == 50
    tail_here, _ = read(samplers(range(50), 3), saved, None)
    tail_there, _ = read(samplers(range(50), 1), saved, None)
    assert tail_there[: len(tail_here)] == tail_here  # 1 rank reads 3 ranks' global order
    assert group[0].last_change is not None
    assert group[0].last_change.added == 20
    assert "grew 30 -> 50" in group[0].last_change.describe()


def test_a_change_at_an_epoch_start_gives_that_epoch_the_new_order() -> None:
    group = samplers(range(12), 1)
    state = group[0].state_at(1, 0)  # saved at the end of epoch 0
    resumed = samplers(range(20), 1)
    rest, _ = read(resumed, state, None)
    plain = DistributedSampler(range(20), 1, 0, seed=5)
    plain.set_epoch(1)
    assert rest == list(plain)  # exactly the order a fresh run over 20 has in epoch 1


def test_quarantine_and_sample_keys_follow_the_changed_order() -> None:
    _, state = read(samplers(range(20), 1), None, 6)
    group = samplers(range(26), 1, sample_keys=True)
    group[0].load_state_dict(state)
    group[0].quarantine([21, 3])
    keys: list[Any] = list(group[0])
    indices = [int(k) for k in keys]
    assert 21 not in indices
    assert 3 not in indices[:]  # quarantined from the resume on
    assert [k.position for k in keys] == list(range(6, 6 + len(keys)))


@pytest.mark.parametrize(
    ("policy", "new", "words"),
    [
        (None, 12, ("grew from 10 to 12", "no DataChangePolicy", "data_changes=")),
        (DataChangePolicy(grown="refuse"), 12, ("grew from 10 to 12", "grown='this_epoch'")),
        (DataChangePolicy(shrunk="refuse"), 8, ("shrank from 10 to 8", "shrunk='skip_removed'")),
    ],
)
def test_a_refused_change_names_it_and_the_option_and_changes_nothing(
    policy: DataChangePolicy | None, new: int, words: tuple[str, ...]
) -> None:
    _, state = read(samplers(range(10), 1), None, 3)
    sampler = samplers(range(new), 1, policy)[0]
    if policy is None:  # no policy: the sampler's usual fingerprint check refuses it
        words = ("dataset_length: saved 10, now 12",)
    with pytest.raises(StateMismatchError) as error:
        sampler.load_state_dict(state)
    for word in words:
        assert word in str(error.value)
    assert (sampler.epoch, sampler.consumed, sampler.changes) == (0, 0, [])
    assert sampler.epoch_length == new


def test_replaced_files_are_refused_by_default_and_reread_by_option() -> None:
    _, state = read(samplers(Pinned(10, {"a.bin": "etag=1"}), 1), None, 4)
    changed = Pinned(10, {"a.bin": "etag=2"})
    with pytest.raises(StateMismatchError, match=r"files changed since the checkpoint \('a.bin'\)"):
        samplers(changed, 1)[0].load_state_dict(state)
    group = samplers(changed, 1, DataChangePolicy(replaced="remove_and_add"))
    rest, _ = read(group, state, None)
    assert sorted(rest) == list(range(10))  # the new data, once, in the rest of the epoch
    report = group[0].last_change
    assert report is not None
    assert (report.removed, report.added) == (6, 10)


def test_a_malformed_changes_entry_is_refused() -> None:
    _, state = read(samplers(range(10), 1), None, 3)
    state["changes"] = [[0, 3, 10]]
    with pytest.raises(StateMismatchError, match="'changes' entry must be"):
        samplers(range(10), 1)[0].load_state_dict(state)


def test_a_policy_with_an_unknown_value_is_refused() -> None:
    with pytest.raises(ValueError, match="grown='later'"):
        DataChangePolicy(grown="later")  # type: ignore[arg-type]


def mixture_group(
    weights: list[float], world: int, policy: DataChangePolicy | None = POLICY
) -> list[MixtureSampler]:
    mix = MixtureDataset({"web": range(50), "code": range(30), "math": range(20)})
    made = [
        MixtureSampler(mix, weights, world, rank, seed=7, samples_per_epoch=90)
        for rank in range(world)
    ]
    for sampler in made:
        sampler.data_changes = policy
    return made


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 5.0), min_size=3, max_size=3).filter(lambda w: sum(w) > 0.1),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 40),
)
def test_a_mixture_reweighted_at_the_resume_draws_each_sample_at_most_once_per_pass(
    weights: list[float], world: int, world_after: int, steps: int
) -> None:
    before, state = read(mixture_group([1.0, 1.0, 1.0], world), None, steps)
    group = mixture_group(weights, world_after)
    rest, _ = read(group, state, None)
    drawn = Counter(before + rest)
    for first, size in ((0, 50), (50, 30), (80, 20)):  # each source read as whole passes:
        mine = [drawn[i] for i in range(first, first + size)]  # a sample is drawn once per
        passes = sum(mine) // size  # finished pass, and once more if the pass going on
        assert all(passes <= n <= passes + 1 for n in mine)  # reached it
        assert sum(n > passes for n in mine) == sum(mine) % size
    assert group[0].weights_at(0, state["consumed"]) == pytest.approx(
        dict(zip(["web", "code", "math"], [w / sum(weights) for w in weights], strict=True))
    )
    again, _ = read(mixture_group(weights, 1), state, None)
    assert again[: len(rest)] == rest  # the same change from the same checkpoint, any layout


def test_a_second_resume_replays_the_reweight_without_a_new_change() -> None:
    _, state = read(mixture_group([1.0, 1.0, 1.0], 1), None, 10)
    first = mixture_group([4.0, 1.0, 0.0], 1)
    _, middle = read(first, state, 15)
    resumed = mixture_group([4.0, 1.0, 0.0], 2)
    rest, _ = read(resumed, middle, None)
    assert resumed[0].last_reweight is None  # in force already: nothing new recorded
    online = [e for e in middle["schedule"] if e["kind"] == "online"]
    assert [(e["epoch"], e["position"]) for e in online] == [(0, 10)]
    assert all(i < 80 for i in rest)  # math (indices 80..99) weighs 0 from the resume on
    assert first[0].last_reweight is not None
    assert first[0].last_reweight["left_after"]["math"] == 0


def test_a_reweight_is_refused_without_a_policy() -> None:
    _, state = read(mixture_group([1.0, 1.0, 1.0], 1), None, 4)
    with pytest.raises(StateMismatchError, match="initial"):
        mixture_group([2.0, 1.0, 1.0], 1, DataChangePolicy(sources="refuse"))[0].load_state_dict(
            state
        )


@pytest.mark.parametrize(("old", "new", "world"), [(61, 77, 2), (62, 50, 2), (61, 77, 3)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_the_dry_run_counts_what_a_loader_trains_with_drop_last(
    old: int, new: int, world: int, drop_last: bool
) -> None:
    """``lrd inspect --dataset-length``'s ``trained``: pads in, a dropped tail and batch out."""
    from lightning_resumable_data import StatefulDataLoader
    from lightning_resumable_data.cli._change_report import change_report

    batch = 4
    ranks = [
        DistributedSampler(range(old), world, r, seed=5, drop_last=drop_last) for r in range(world)
    ]
    loaders = [
        StatefulDataLoader(range(old), batch_size=batch, sampler=s, drop_last=drop_last)
        for s in ranks
    ]
    iterators = [iter(loader) for loader in loaders]
    for _ in range(3):
        for it in iterators:
            next(it)
    state = loaders[0].state_dict()
    planned = change_report(state["sampler"], new, POLICY, batch)
    trained = 0
    for rank in range(world):
        sampler = DistributedSampler(range(new), world, rank, seed=5, drop_last=drop_last)
        sampler.data_changes = POLICY
        loader = StatefulDataLoader(
            range(new), batch_size=batch, sampler=sampler, drop_last=drop_last
        )
        loader.load_state_dict(state)
        trained += sum(len(b) for b in loader)
    assert planned["trained"] == trained


def test_a_quarantined_index_removed_by_a_shrink_loads_again_and_again() -> None:
    """Quarantine sample 55, then shrink to 50: each later load (Lightning loads twice, and
    every resume after) accepts the saved quarantine of an index the data no longer has."""
    sampler = samplers(range(64), 1)[0]
    iterator = iter(sampler)
    for _ in range(12):
        next(iterator)
    sampler.quarantine([55, 5])
    state = sampler.state_at(0, 12)
    shrunk = samplers(range(50), 1)[0]
    shrunk.load_state_dict(state)
    again = shrunk.state_at(0, 12)
    shrunk.load_state_dict(again)  # the loader's second load of the same position
    rest = list(shrunk)
    later = samplers(range(50), 1)[0]
    later.load_state_dict(again)  # a later resume
    assert list(later) == rest
    assert 5 not in rest
    assert all(i < 50 for i in rest)
