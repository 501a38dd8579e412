import itertools
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import as_ids, run_epochs, take
from resume_helpers import assert_resumes

import lightning_resumable_data.index.arrangement as arrangement_module
from lightning_resumable_data import (
    MixtureDataset,
    MixturePhase,
    MixtureSampler,
    SampleKey,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.index.mixture import mixture_probabilities, target_counts
from lightning_resumable_data.randomness import KeyedBatch
from lightning_resumable_data.samplers.mixture import RANK_CHUNK, check_phases

SIZES = {"web": 120, "code": 30, "math": 9}
WEIGHTS = {"web": 0.6, "code": 0.3, "math": 0.1}
NEW_WEIGHTS = {"web": 0.2, "code": 0.2, "math": 0.6}


class Ids(torch.utils.data.Dataset[int]):
    """Sample ``i`` of a source is ``start + i``: its index in the mixture."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start = n, start

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return self.start + int(index)


def mixture() -> MixtureDataset:
    starts = np.cumsum([0, *SIZES.values()]).tolist()
    return MixtureDataset(
        {name: Ids(n, start) for (name, n), start in zip(SIZES.items(), starts[:-1], strict=True)}
    )


def sampler(
    world: int = 1, rank: int = 0, change_at: int | None = None, **kwargs: Any
) -> MixtureSampler:
    s = MixtureSampler(mixture(), WEIGHTS, world, rank, seed=3, samples_per_epoch=200, **kwargs)
    if change_at is not None:
        s.update_weights(NEW_WEIGHTS, epoch=0, position=change_at)
    return s


def source(index: int) -> str:
    return mixture().source_of(index)


def test_mixture_dataset_offsets_and_sources() -> None:
    mix = MixtureDataset([Ids(2), Ids(0), Ids(3)], return_source=True)
    assert len(mix) == 5
    assert mix[4] == (2, "2")
    assert mix.locate(2) == ("2", 0)
    with pytest.raises(IndexError, match="out of range"):
        mix[5]
    with pytest.raises(ValueError, match="at least one source"):
        MixtureDataset({})
    with pytest.raises(TypeError, match="without __len__"):
        MixtureDataset({"a": iter([1])})  # type: ignore[dict-item]


class BatchedIds(Ids):
    """A source with its own ``__getitems__``, counting its calls."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.batches: list[list[int]] = []

    def __getitems__(self, indices: list[int]) -> list[int]:
        self.batches.append(list(indices))
        return [self[i] for i in indices]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    picks=st.lists(st.integers(0, 10**6), max_size=12),
    return_source=st.booleans(),
)
def test_mixture_getitems_equals_getitem(
    sizes: list[int], picks: list[int], return_source: bool
) -> None:
    sources = [BatchedIds(n) if i % 2 else Ids(n) for i, n in enumerate(sizes)]
    mix = MixtureDataset(sources, return_source=return_source)
    indices = [p % len(mix) for p in picks] if len(mix) else []
    assert mix.__getitems__(indices) == [mix[i] for i in indices]
    for i, data in enumerate(sources):  # one read per batched source in the batch
        if isinstance(data, BatchedIds):
            start = sum(sizes[:i])
            mine = [j - start for j in indices if start <= j < start + sizes[i]]
            assert data.batches == ([mine] if mine else [])


def test_mixture_getitems_passes_keys_and_refuses_bad_indices() -> None:
    seen: list[Any] = []

    class Keys(Ids):
        def __getitem__(self, index: int) -> int:
            seen.append(index)
            return int(index)

    mix = MixtureDataset({"a": Ids(3), "b": Keys(4)})
    keys = KeyedBatch([5, 1], seed=2, epoch=1, start=6, step=2)
    assert mix.__getitems__(keys) == [2, 1]
    assert seen == [SampleKey(2, seed=2, epoch=1, position=6)]
    assert (seen[0].seed, seen[0].epoch, seen[0].position) == (2, 1, 6)
    with pytest.raises(IndexError, match="index 7 is out of range for a mixture of 7"):
        mix.__getitems__([0, 7])
    with pytest.raises(IndexError, match="index -1 is out of range"):
        mix.__getitems__([-1])
    loader = StatefulDataLoader(mix, batch_size=7)  # torch's fetcher calls __getitems__
    assert [b.tolist() for b in loader] == [[0, 1, 2, 0, 1, 2, 3]]


def test_realised_proportions_are_the_exact_targets_per_epoch_and_per_phase() -> None:
    for epoch in range(3):
        s = sampler(change_at=80)
        s.set_epoch(epoch)
        drawn = [source(i) for i in s]
        probs_before = mixture_probabilities(list(WEIGHTS.values()), 1.0)
        probs_after = mixture_probabilities(list(NEW_WEIGHTS.values()), 1.0)
        if epoch == 0:
            expected_before = target_counts(probs_before, 80).tolist()
            expected_after = target_counts(probs_after, 120).tolist()
            assert [Counter(drawn[:80])[n] for n in SIZES] == expected_before
            assert [Counter(drawn[80:])[n] for n in SIZES] == expected_after
        else:  # the new weights hold for later epochs
            assert [Counter(drawn)[n] for n in SIZES] == target_counts(probs_after, 200).tolist()
        assert s.source_counts() == dict(Counter(drawn))


@pytest.mark.parametrize("change_at", [None, 50])
def test_each_source_is_read_in_passes_strictly_in_time_order(change_at: int | None) -> None:
    s = sampler(change_at=change_at)
    drawn = np.array(list(s))
    labels, draws = s._locate(0, np.arange(200, dtype=np.int64))
    offsets = mixture().offsets
    for j, (name, size) in enumerate(SIZES.items()):
        mine = drawn[labels == j] - offsets[name]
        assert draws[labels == j].tolist() == list(range(len(mine)))  # the k-th draw is k
        for p in range(-(-len(mine) // size)):  # each pass: a permutation of the source
            chunk = mine[p * size : (p + 1) * size]
            assert len(set(chunk.tolist())) == len(chunk)


@given(k=st.integers(0, 200), change_at=st.sampled_from([None, 0, 1, 57, 100, 199]))
@settings(max_examples=40, deadline=None)
def test_resume_anywhere_around_a_phase_boundary(k: int, change_at: int | None) -> None:
    assert_resumes(lambda: sampler(change_at=change_at), 0, k)


def _loader(world: int, rank: int, batch: int, workers: int = 0) -> StatefulDataLoader:
    s = sampler(world, rank, change_at=96)
    return StatefulDataLoader(mixture(), batch_size=batch, sampler=s, num_workers=workers)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("k", [0, 5, 11, 12, 13, 30])  # the change is after batch 12
def test_loader_resumes_exactly_around_the_phase_boundary(workers: int, k: int) -> None:
    expected = run_epochs(_loader(1, 0, 8), 2)
    seen, state = take(_loader(1, 0, 8, workers), k)
    assert json.loads(json.dumps(state)) == state
    assert state["sampler"]["schedule"][1]["position"] == 96
    resumed = _loader(1, 0, 8, workers)
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 2) == expected


def test_loader_resumes_twice_in_one_epoch() -> None:
    expected = run_epochs(_loader(1, 0, 8), 1)
    loader, seen = _loader(1, 0, 8), []
    for k in (7, 6):  # before the boundary, then across it
        chunk, state = take(loader, k)
        seen += chunk
        loader = _loader(1, 0, 8)
        loader.load_state_dict(state)
    assert seen + run_epochs(loader, 1) == expected


@pytest.mark.parametrize(("world", "new_world"), [(2, 1), (1, 2), (2, 3)])
def test_elastic_resume_keeps_draws_and_proportions(world: int, new_world: int) -> None:
    uninterrupted = Counter(list(sampler(change_at=96)))
    consumed: list[int] = []
    state: dict[str, Any] = {}
    for rank in range(world):
        batches, state = take(_loader(world, rank, 4), 10)
        consumed += [i for b in batches for i in b]
    rest: list[int] = []
    for rank in range(new_world):
        loader = _loader(new_world, rank, 4)
        loader.load_state_dict(state)
        rest += [i for b in as_ids(loader) for i in b]
    everything = Counter(consumed + rest)
    # drop_last: the run on new_world ranks drops a ragged tail of < new_world positions.
    assert sum((uninterrupted - everything).values()) < new_world
    assert not everything - uninterrupted  # nothing drawn that the uninterrupted run did not


def test_mid_iteration_change_is_reproducible_after_resume() -> None:
    def run(resume_after: int | None) -> list[int]:
        s = sampler()
        it = iter(s)
        out = list(itertools.islice(it, 40))
        s.update_weights(NEW_WEIGHTS)  # at the frontier: where nothing is computed yet
        if resume_after is not None:
            out += list(itertools.islice(it, resume_after))
            state = s.state_dict()
            s = sampler()
            s.load_state_dict(state)
            it = iter(s)
        return out + list(it)

    assert run(None) == run(0) == run(30)


def test_late_or_out_of_order_changes_are_refused() -> None:
    s = sampler()
    it = iter(s)
    next(it)
    with pytest.raises(ValueError, match="too late"):
        s.update_weights(NEW_WEIGHTS, position=0)
    s2 = sampler(change_at=100)
    with pytest.raises(ValueError, match="add changes in order"):
        s2.update_weights(WEIGHTS, epoch=0, position=50)
    s2.update_weights(NEW_WEIGHTS, epoch=0, position=100)  # the same change again: no-op
    assert len(s2.schedule) == 2


def test_changes_in_future_epochs_are_exact_and_persist() -> None:
    s = sampler()
    s.update_weights({"web": 0, "code": 1, "math": 0}, epoch=1, position=100)
    s.set_epoch(1)
    drawn = [source(i) for i in s]
    assert set(drawn[100:]) == {"code"}
    assert s.weights_at(2)["code"] == 1.0


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ({"web": 1, "code": 1}, r"missing: \['math'\]"),
        ({"web": 1, "code": 1, "math": 1, "art": 1}, r"unknown: \['art'\]"),
        ({"web": -1, "code": 1, "math": 1}, "must be >= 0"),
        ({"web": float("nan"), "code": 1, "math": 1}, "finite"),
        ({"web": 0, "code": 0, "math": 0}, "all zero"),
        ([1, 1], "got 2 weights for 3 sources"),
    ],
)
def test_bad_weights_are_explained(weights: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MixtureSampler(mixture(), weights, 1, 0)


def test_empty_source_needs_zero_weight() -> None:
    mix = MixtureDataset({"a": Ids(5), "empty": Ids(0)})
    MixtureSampler(mix, {"a": 1, "empty": 0}, 1, 0)  # fine
    with pytest.raises(ValueError, match=r"sources \['empty'\] are empty but have weight > 0"):
        MixtureSampler(mix, {"a": 1, "empty": 1}, 1, 0)
    with pytest.raises(ValueError, match="temperature=0"):
        MixtureSampler(mix, {"a": 1, "empty": 0}, 1, 0, temperature=0)
    with pytest.raises(TypeError, match="samples a MixtureDataset"):
        MixtureSampler(Ids(3), [1.0], 1, 0)  # type: ignore[arg-type]


def test_phases_are_validated() -> None:
    with pytest.raises(ValueError, match="exactly one of start_step and start_epoch"):
        MixturePhase(weights={"a": 1})
    with pytest.raises(ValueError, match="all zero"):
        MixturePhase(start_step=0, weights={"a": 0})
    with pytest.raises(ValueError, match="temperature=-1"):
        MixturePhase(start_step=0, weights={"a": 1}, temperature=-1)
    phase = MixturePhase(start_step=5, weights={"a": 1})
    with pytest.raises(ValueError, match="strictly increasing"):
        check_phases([phase, MixturePhase(start_step=5, weights={"a": 2})])
    with pytest.raises(ValueError, match="strictly increasing"):
        check_phases([phase, MixturePhase(start_step=1, weights={"a": 2})])
    with pytest.raises(ValueError, match="mix start_step and start_epoch"):
        check_phases([phase, MixturePhase(start_epoch=3, weights={"a": 2})])


@pytest.mark.parametrize(
    ("changed", "match"),
    [
        ({"sizes": {"web": 121, "code": 30, "math": 9}}, "sizes: saved"),
        ({"names": ["web", "code", "art"]}, "sources: saved"),
        ({"seed": 4}, "seed: saved 3, now 4"),
        ({"weights": {"web": 1.0, "code": 0.3, "math": 0.1}}, "initial: saved"),
    ],
)
def test_resume_with_other_sources_sizes_seed_or_weights_is_refused(
    changed: dict[str, Any], match: str
) -> None:
    state = sampler(change_at=50).state_dict()
    sizes = changed.get("sizes", SIZES)
    names = changed.get("names", list(sizes))
    mix = MixtureDataset({name: Ids(n) for name, n in zip(names, sizes.values(), strict=True)})
    weights = dict(zip(names, changed.get("weights", WEIGHTS).values(), strict=True))
    other = MixtureSampler(mix, weights, 1, 0, seed=changed.get("seed", 3), samples_per_epoch=200)
    before = other.schedule
    with pytest.raises(StateMismatchError, match=match):
        other.load_state_dict(state)
    assert other.schedule == before


def test_corrupted_schedule_is_refused() -> None:
    state = sampler(change_at=50).state_dict()
    state["schedule"][1]["weights"] = [1, -1, 0]
    with pytest.raises(StateMismatchError, match="schedule entry is invalid"):
        sampler().load_state_dict(state)
    del state["schedule"]
    with pytest.raises(StateMismatchError, match="'schedule' is missing"):
        sampler().load_state_dict(state)


def test_mixture_sampler_passes_sample_keys_to_sources() -> None:
    s = MixtureSampler(mixture(), WEIGHTS, 1, 0, seed=3, sample_keys=True)
    key = next(iter(s))
    assert isinstance(key, SampleKey)
    assert key.position == 0
    assert mixture()[key] == int(key)
    assert np.isfinite(key.rng().random())


def big(world: int, rank: int, epoch_length: int = 2_000_000_000) -> MixtureSampler:
    mix = MixtureDataset({"web": range(10**9), "code": range(3 * 10**8), "math": range(10**6)})
    return MixtureSampler(mix, WEIGHTS, world, rank, seed=3, samples_per_epoch=epoch_length)


@pytest.mark.parametrize("epoch_length", [2_000_000_000, 10**10])
def test_epochs_of_billions_iterate_and_resume(epoch_length: int) -> None:
    s = big(8, 3, epoch_length)
    s.update_weights(NEW_WEIGHTS, epoch=0, position=epoch_length // 2 + 8 * 1000)
    first = list(itertools.islice(s, 500))
    assert all(0 <= i < len(s.mixture) for i in first)
    resumed = big(8, 3, epoch_length)
    resumed.load_state_dict(json.loads(json.dumps(s.state_dict())))
    again = big(8, 3, epoch_length)
    again.load_state_dict(s.state_at(0, 0))
    assert list(itertools.islice(again, 600))[500:] == list(itertools.islice(resumed, 100))
    for position in (10**9 - 8 * 700, epoch_length // 2 - 8 * 300):  # across the change
        state = s.state_at(0, position)
        assert sum(state["source_counts"].values()) == position
        elastic = big(3, 1, epoch_length)  # resumed on another world size
        elastic.load_state_dict(state)
        got = list(itertools.islice(elastic, 1000))
        expected = elastic._order(0)(position + 1 + 3 * np.arange(1000, dtype=np.int64))
        assert got == expected.tolist()  # random access equals sequential
    counts = s.source_counts(epoch_length)
    probabilities = [mixture_probabilities(list(w.values()), 1.0) for w in (WEIGHTS, NEW_WEIGHTS)]
    half = epoch_length // 2 + 8 * 1000
    exact = target_counts(probabilities[0], half) + target_counts(
        probabilities[1], epoch_length - half
    )
    assert list(counts.values()) == exact.tolist()


def test_epochs_past_the_limit_are_refused() -> None:
    with pytest.raises(ValueError, match=r"samples_per_epoch=.* must be in \[1, 2\*\*53"):
        big(1, 0, 2**53 + 1)


def test_rank_work_is_proportional_to_its_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    permuted: list[int] = []
    original = arrangement_module.Arrangement.locate

    def counting(self: arrangement_module.Arrangement, positions: np.ndarray) -> Any:
        permuted.append(len(positions))
        return original(self, positions)

    monkeypatch.setattr(arrangement_module.Arrangement, "locate", counting)
    work = {}
    for world in (1, 64):
        permuted.clear()
        s = big(world, world - 1, 2**20 + 12345)
        s.update_weights(NEW_WEIGHTS, epoch=0, position=2**19 + 64 * 7)
        assert sum(1 for _ in s) == len(s)
        work[world] = sum(permuted)  # positions whose source was computed
    assert work == {1: len(big(1, 0, 2**20 + 12345)), 64: len(big(64, 63, 2**20 + 12345))}


def test_changes_are_accepted_from_the_first_position_not_handed_out() -> None:
    s = big(4, 0)
    it = iter(s)
    next(it)
    assert s.frontier > s.consumed == 4  # computed ahead; handed out: one position per rank
    with pytest.raises(ValueError, match="earliest allowed position is 4 "):
        s.update_weights(NEW_WEIGHTS, position=3)
    at = s.update_weights(NEW_WEIGHTS, position=8)  # inside the computed chunk: recomputed
    assert at == (0, 8)
    saved = s.state_at(0, 4)  # the cut segment keeps its plan
    rest = list(itertools.islice(it, 3 * RANK_CHUNK))
    resumed = big(4, 0)
    resumed.load_state_dict(saved)
    assert list(itertools.islice(resumed, 3 * RANK_CHUNK)) == rest
    assert s.state_dict()["fingerprint"]["order"] == "bisection-passes/3"


def test_a_state_with_counts_beyond_int64_is_refused_as_corrupted() -> None:
    # Found by the fault campaign's soak: an int64 overflow escaped as OverflowError.
    dataset = MixtureDataset({"a": Ids(6), "b": Ids(4)})
    sampler = MixtureSampler(dataset, {"a": 1.0, "b": 1.0}, 1, 0, seed=1, samples_per_epoch=10)
    iterator = iter(sampler)
    next(iterator)
    sampler.update_weights({"a": 0.0, "b": 1.0}, position=4)
    for _ in range(5):
        next(iterator)
    state = json.loads(json.dumps(sampler.state_dict()))
    assert state.get("segment") is not None
    state["source_counts"]["a"] = 2**63 + 3
    fresh = MixtureSampler(dataset, {"a": 1.0, "b": 1.0}, 1, 0, seed=1, samples_per_epoch=10)
    fresh.update_weights({"a": 0.0, "b": 1.0}, position=4)
    with pytest.raises(StateMismatchError, match="'segment' is invalid"):
        fresh.load_state_dict(state)


def test_states_of_the_earlier_mixture_order_are_refused_with_how_to_finish_them() -> None:
    s = big(1, 0)
    it = iter(s)
    next(it)
    state = s.state_dict()
    state["fingerprint"]["order"] = "blocks-leaves-feistel/2"  # what 0.2 wrote
    fresh = big(1, 0)
    refusal = r"version 0.2, which wrote it \(pip install -e \. in a checkout"
    with pytest.raises(StateMismatchError, match=refusal):
        fresh.load_state_dict(state)
    assert fresh.consumed == 0  # nothing changed


def test_an_online_change_does_not_depend_on_when_it_is_made() -> None:
    # Found by a docs-only user test: made before iter() it re-planned the positions
    # before it; an online change never moves them, made early or late.
    mix = MixtureDataset({"a": range(1000), "b": range(3), "c": range(1)})

    def make() -> MixtureSampler:
        return MixtureSampler(mix, [2, 0, 1], 1, 0, seed=49, samples_per_epoch=97)

    untouched = list(make())
    early = make()
    early.update_weights([1, 1, 3], epoch=0, position=8, kind="online")
    late = make()
    it = iter(late)
    first = next(it)
    late.update_weights([1, 1, 3], epoch=0, position=8, kind="online")
    assert list(early) == [first, *it]
    assert list(make())[:8] == untouched[:8]
    assert early.schedule == late.schedule


def test_an_online_change_at_the_first_position_resumes() -> None:
    # Found by a docs-only user test: it replaced the initial weights in the schedule, and
    # a fresh sampler (with those initial weights) refused the state.
    mix = MixtureDataset({"a": range(50), "b": range(1000, 1050)})

    def make() -> tuple[MixtureSampler, StatefulDataLoader]:
        sampler = MixtureSampler(mix, {"a": 1, "b": 1}, 1, 0, seed=0, samples_per_epoch=20)
        return sampler, StatefulDataLoader(mix, batch_size=5, sampler=sampler)

    sampler, loader = make()
    sampler.update_weights({"a": 0, "b": 1}, kind="online")
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(2)]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [b.tolist() for b in it]
    assert all(v >= 1000 for b in seen + rest for v in b)  # only b, from the first sample
    _, resumed = make()
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == rest


def test_online_changes_give_one_order_whatever_order_they_are_made_in() -> None:
    # Found by a docs-only user test: the segment of the earlier change was planned up to
    # the later one only if that one was made first. Online changes only cut segments.
    mix = MixtureDataset({"a": range(7), "b": range(100, 116), "c": range(200, 217)})
    first = {"weights": [1, 3, 1], "temperature": 2.0, "epoch": 0, "position": 214}
    second = {"weights": [1, 0.5, 1], "epoch": 0, "position": 122}

    def read(*changes: dict[str, Any]) -> list[int]:
        s = MixtureSampler(mix, [3, 1, 0], 1, 0, seed=39, samples_per_epoch=240)
        it = iter(s)
        head = [next(it) for _ in range(120)]
        for change in changes:
            s.update_weights(**change, kind="online")
        return head + list(it)

    assert read(first, second) == read(second, first)


def test_an_elastic_resume_at_the_new_layouts_epoch_end_moves_on_without_a_warning() -> None:
    # Found by a docs-only user test: 96 of 97 samples read on 1 rank leave nothing for 2
    # ranks; the loader reads the next epoch and warned about a set_epoch nobody called.
    mix = MixtureDataset({"a": range(50), "b": range(1000, 1050)})

    def loader(world: int, rank: int) -> StatefulDataLoader:
        sampler = MixtureSampler(mix, [1, 1], world, rank, seed=0, samples_per_epoch=97)
        return StatefulDataLoader(mix, batch_size=4, sampler=sampler)

    one = loader(1, 0)
    it = iter(one)
    for _ in range(24):
        next(it)
    state = json.loads(json.dumps(one.state_dict()))
    assert (state["epoch"], state["consumed"]) == (0, 96)
    for rank in range(2):
        resumed = loader(2, rank)
        resumed.load_state_dict(state)
        first = next(iter(resumed)).tolist()  # ResumeWarning is an error in this suite
        fresh = loader(2, rank)
        fresh.set_epoch(1)
        assert first == next(iter(fresh)).tolist()  # epoch 1 from its start
