"""Tests written for surviving mutants of the mixture sampler's plan cache (issue 23).

A weight change either extends the cached plan of its epoch (an online change, or a phase
declared while reading, appended at the end) or clears it, to be rebuilt from the schedule.
Each test checks a promise of docs/mixing.md against an oracle that is not the code under
test: the samples read (counted from the dataset's layout), a resumed sampler, a sampler
given the same changes in another order, or torch's ``DistributedSampler`` attributes.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from lightning_resumable_data import MixtureDataset, MixtureSampler
from lightning_resumable_data.state import StateMismatchError

SIZES = {"web": 600, "code": 300, "math": 100}  # an epoch: 1000 positions
W0 = {"web": 0.6, "code": 0.3, "math": 0.1}
W1 = {"web": 0.2, "code": 0.3, "math": 0.5}
W2 = {"web": 0.5, "code": 0.3, "math": 0.2}

Change = tuple[Mapping[str, float], int, int, str]  # weights, epoch, position, kind


def mixture() -> MixtureDataset:
    return MixtureDataset({name: range(n) for name, n in SIZES.items()})


def make(*changes: Change, world: int = 1, rank: int = 0, drop_last: bool = True) -> MixtureSampler:
    """A sampler (seed 0) with changes ``(weights, epoch, position, kind)`` made in order."""
    s = MixtureSampler(mixture(), W0, num_replicas=world, rank=rank, drop_last=drop_last)
    for weights, epoch, position, kind in changes:
        s.update_weights(dict(weights), epoch=epoch, position=position, kind=kind)
    return s


def take(it: Iterator[int], n: int) -> list[int]:
    return [next(it) for _ in range(n)]


def shares(indices: list[int]) -> dict[str, int]:
    """Samples per source, by hand from the dataset's layout (not the sampler's counts)."""
    found = Counter(mixture().source_of(i) for i in indices)
    return {name: found[name] for name in SIZES}


ONLINE_AHEAD: tuple[Change, ...] = ((W1, 0, 100, "online"), (W2, 0, 200, "online"))


def test_a_phase_declared_while_reading_after_online_changes_keeps_what_was_read() -> None:
    """Online changes at 100 and 200, 250 samples read, then a phase at 300 (declared while
    reading), an online change at 400 and a phase at the epoch's end: the counts of what was
    read stay those read, and a resume from the state continues the uninterrupted run."""
    s = make(*ONLINE_AHEAD)
    it = iter(s)
    first = take(it, 250)
    read = shares(first)
    s.update_weights(W1, position=300)
    assert s.source_counts() == read
    s.update_weights(W2, position=400, kind="online")
    assert s.source_counts() == read
    s.update_weights(W1, epoch=0, position=1000)  # at the epoch's end: epoch 1 on
    assert s.source_counts() == read
    assert s.weights_at(1) == pytest.approx(s.weights_at(0, 300))
    state = s.state_dict()
    rest = list(it)
    assert len(rest) == 750
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    assert resumed.source_counts() == read
    assert list(resumed) == rest


def test_a_phase_declared_while_reading_on_ranks_with_a_wrapped_tail_keeps_what_was_read() -> None:
    """The same on 3 ranks without drop_last (ranks 1 and 2 wrap to positions 0 and 1, which
    the recomputation after the change looks up again): every rank counts the 240 global
    samples read as read, before and after reading the rest."""
    world, firsts, counted = 3, [], []
    for rank in range(world):
        s = make(*ONLINE_AHEAD, world=world, rank=rank, drop_last=False)
        it = iter(s)
        firsts.append(take(it, 80))
        s.update_weights(W1, position=300)
        counted.append(s.source_counts())
        assert len(list(it)) == 334 - 80
        counted.append(s.source_counts(240))
    read = shares([i for first in firsts for i in first])
    assert counted == [read] * (2 * world)


@pytest.mark.parametrize(("world", "rank", "ahead"), [(1, 0, 50), (3, 1, 80)])
def test_a_resume_after_a_phase_declared_while_reading_continues_the_run(
    world: int, rank: int, ahead: int
) -> None:
    """An online change at 100 (or two) ahead, ``ahead`` samples read, a phase declared at
    300: the state resumes the uninterrupted run (docs/mixing.md: "a resume before, at or
    after it reproduces the uninterrupted run exactly")."""
    changes = ONLINE_AHEAD[:1] if world == 1 else ONLINE_AHEAD
    s = make(*changes, world=world, rank=rank, drop_last=False)
    it = iter(s)
    take(it, ahead)
    s.update_weights(W1, position=300)
    state = s.state_dict()
    rest = list(it)
    resumed = make(world=world, rank=rank, drop_last=False)
    resumed.load_state_dict(copy.deepcopy(state))
    assert list(resumed) == rest


def test_a_phase_declared_at_an_online_changes_position_keeps_what_was_read() -> None:
    """An online change at 300 ahead, 250 samples read, then a phase at 300: the positions
    read keep their plan (docs/mixing.md: "made while reading, it leaves the positions
    before it as they were planned"), so their counts stay those read."""
    s = make((W1, 0, 300, "online"))
    it = iter(s)
    first = take(it, 250)
    s.update_weights(W1, position=300)
    assert s.source_counts() == shares(first)


@pytest.mark.parametrize("epoch", [0, 1])
def test_a_phase_declared_after_the_plan_was_computed_equals_declaring_it_first(
    epoch: int,
) -> None:
    """A phase declared (before reading) after the epoch's counts were computed gives the
    order of a sampler given the same changes before anything was computed, in either order
    (online changes may come before phases)."""
    online: Change = (W2, epoch, 200, "online")
    phase: Change = (W1, epoch, 500, "declared")
    cached = make(online)
    cached.source_counts(10, epoch=epoch)  # computes the epoch's plan
    cached.update_weights(dict(phase[0]), epoch=epoch, position=500)
    orders = []
    for s in (cached, make(online, phase), make(phase, online)):
        s.set_epoch(epoch)
        orders.append(list(s))
    assert orders[0] == orders[1] == orders[2]
    assert len(orders[0]) == 1000


def test_a_second_online_change_at_a_position_replaces_the_first() -> None:
    """Two online changes at one position: the later one replaces the earlier (one entry,
    whose state loads again); a phase declared there goes after it, not over it."""
    s = make((W1, 0, 300, "online"), (W2, 0, 300, "online"))
    assert [(e["position"], e["kind"]) for e in s.schedule] == [(0, "declared"), (300, "online")]
    assert s.weights_at(0, 300) == pytest.approx({"web": 0.5, "code": 0.3, "math": 0.2})
    resumed = make()
    resumed.load_state_dict(s.state_dict())
    assert list(resumed) == list(make((W2, 0, 300, "online")))
    s.update_weights(W1, position=300)
    assert [e["kind"] for e in s.schedule] == ["declared", "online", "declared"]
    assert s.weights_at(0, 300) == pytest.approx({"web": 0.2, "code": 0.3, "math": 0.5})


def test_an_online_change_repeated_at_its_place_is_already_scheduled() -> None:
    """The same online change made again (e.g. replayed after a resume) changes nothing."""
    s = make((W1, 0, 300, "online"))
    before = s.schedule
    assert s.update_weights(W1, position=300, kind="online") == (0, 300)
    assert s.schedule == before


@pytest.mark.parametrize("drop_last", [True, False])
def test_len_num_samples_and_total_size_are_torchs(drop_last: bool) -> None:
    """``len``, ``num_samples`` and ``total_size`` follow torch's DistributedSampler: 1000
    positions on 3 ranks are 333 per rank with drop_last, 334 (a padded tail) without."""
    per_rank = 333 if drop_last else 334
    for rank in range(3):
        s = make(world=3, rank=rank, drop_last=drop_last)
        assert len(s) == s.num_samples == per_rank == len(list(s))
        assert s.total_size == per_rank * 3


def test_the_default_seed_is_0() -> None:
    """``seed`` defaults to 0, as the signature says (the fingerprint saves it)."""
    default = MixtureSampler(mixture(), W0, num_replicas=1, rank=0)
    explicit = MixtureSampler(mixture(), W0, num_replicas=1, rank=0, seed=0)
    assert default.seed == 0
    assert default.fingerprint["seed"] == 0
    assert list(default) == list(explicit)


def test_the_fingerprint_saves_the_initial_weights_and_temperature_by_name() -> None:
    """The state's fingerprint keeps the initial mixture as ``{"weights", "temperature"}``
    (states written by another release are compared with it), and refuses another one."""
    s = MixtureSampler(mixture(), W0, num_replicas=1, rank=0, temperature=2.0)
    assert s.state_dict()["fingerprint"]["initial"] == {
        "weights": [0.6, 0.3, 0.1],
        "temperature": 2.0,
    }
    hotter = MixtureSampler(mixture(), W0, num_replicas=1, rank=0, temperature=3.0)
    with pytest.raises(StateMismatchError, match="initial"):
        hotter.load_state_dict(s.state_dict())


def test_a_resume_inside_a_later_segment_reads_the_wrapped_tail_from_the_epochs_start() -> None:
    """Resumed after an online change (the state plans the epoch from that segment on), a
    rank whose padded tail wraps to positions 0 and 1 reads there what the uninterrupted
    run reads: the samples of the epoch's first segment."""
    world = 3
    for rank in range(world):
        s = make((W1, 0, 100, "online"), world=world, rank=rank, drop_last=False)
        it = iter(s)
        take(it, 100)  # 300 global samples: the state's segment starts at 100
        state = s.state_dict()
        assert state["segment"]["start"] == 100
        rest = list(it)
        resumed = make(world=world, rank=rank, drop_last=False)
        resumed.load_state_dict(copy.deepcopy(state))
        assert list(resumed) == rest, rank


def _phase_declared_while_reading() -> tuple[dict[str, Any], list[int]]:
    """Online changes at 100 and 200, 250 samples read, a phase declared at 300: the state
    there (its segment starts at 200) and the rest of the uninterrupted run."""
    s = make(*ONLINE_AHEAD)
    it = iter(s)
    take(it, 250)
    s.update_weights(W1, position=300)
    return s.state_dict(), list(it)


def test_a_resumed_sampler_plans_from_the_saved_segment_after_a_later_change() -> None:
    """Resumed after a phase declared while reading, a change for the next epoch (which
    plans the epoch again) leaves the rest of this epoch the uninterrupted run's."""
    state, rest = _phase_declared_while_reading()
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    resumed.update_weights(W2, epoch=1, position=0)
    assert list(resumed) == rest


def test_a_refused_state_leaves_the_loaded_segment_in_force() -> None:
    """A corrupted state refused after a resume leaves the sampler reading the rest of the
    run it resumed (docs: "the sampler goes on as before")."""
    state, rest = _phase_declared_while_reading()
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    corrupted = copy.deepcopy(state)
    corrupted["segment"]["drawn"][0] += 1
    with pytest.raises(StateMismatchError, match="segment"):
        resumed.load_state_dict(corrupted)
    assert list(resumed) == rest


@pytest.mark.parametrize("phase", [500, 700])
def test_a_state_saved_in_a_segment_starting_at_position_1_resumes_the_run(phase: int) -> None:
    """An online change at position 1, one sample read, a phase declared while reading: the
    state (its segment starts at 1) resumes the uninterrupted run."""
    s = make((W1, 0, 1, "online"))
    it = iter(s)
    take(it, 1)
    s.update_weights(W2, position=phase)
    state = s.state_dict()
    assert state["segment"]["start"] == 1
    rest = list(it)
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    assert list(resumed) == rest


def test_a_change_for_the_next_epoch_leaves_the_rest_of_this_epoch_as_computed() -> None:
    """After a phase declared while reading, a change for the next epoch does not touch the
    rest of this epoch: the state saved before it resumes what the run then reads."""
    s = make(*ONLINE_AHEAD)
    it = iter(s)
    take(it, 250)
    s.update_weights(W1, position=300)
    state = s.state_dict()
    s.update_weights(W2, epoch=1, position=0)
    rest = list(it)
    resumed = make()
    resumed.load_state_dict(copy.deepcopy(state))
    assert list(resumed) == rest
