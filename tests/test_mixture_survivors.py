"""Tests written for mutants of the mixture sampler and its schedule that survived (issue 23).

Each checks a promise of docs/mixing.md against an oracle that is not the code under test:
weights and segment counts computed by hand, or a sampler given the same schedule from the
start.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from lightning_resumable_data import MixtureDataset, MixturePhase, MixtureSampler
from lightning_resumable_data.state import StateMismatchError

SIZES = {"web": 600, "code": 300, "math": 100}  # an epoch: 1000 positions
W0 = {"web": 0.6, "code": 0.3, "math": 0.1}
W1 = {"web": 0.2, "code": 0.3, "math": 0.5}
W2 = {"web": 0.5, "code": 0.3, "math": 0.2}


def mixture() -> MixtureDataset:
    return MixtureDataset({name: range(n) for name, n in SIZES.items()})


def make(seed: int = 0, *changes: tuple[Mapping[str, float], int, int, str]) -> MixtureSampler:
    """A one-rank sampler with changes ``(weights, epoch, position, kind)``."""
    s = MixtureSampler(mixture(), W0, num_replicas=1, rank=0, seed=seed)
    for weights, epoch, position, kind in changes:
        s.update_weights(dict(weights), epoch=epoch, position=position, kind=kind)
    return s


def read(s: MixtureSampler, n: int, epoch: int = 0) -> tuple[list[int], Iterator[int]]:
    """The first ``n`` indices of ``epoch``, and the iterator to read on."""
    s.set_epoch(epoch)
    it = iter(s)
    return [next(it) for _ in range(n)], it


def shares(indices: list[int]) -> dict[str, int]:
    """Samples per source, by hand from the dataset's layout (not the sampler's counts)."""
    found = Counter(mixture().source_of(i) for i in indices)
    return {name: found[name] for name in SIZES}


def exact(weights: Mapping[str, float], length: int) -> dict[str, int]:
    """Hand-computed counts of a segment whose shares times its length are whole numbers."""
    total = sum(weights.values())
    return {name: round(w * length / total) for name, w in weights.items()}


def exact_probs(weights: Mapping[str, float]) -> dict[str, float]:
    """Hand-computed probabilities (temperature 1)."""
    total = sum(weights.values())
    return {name: w / total for name, w in weights.items()}


def test_phase_weights_must_be_a_mapping() -> None:
    """A phase's weights name the sources: a list is refused with the documented ValueError."""
    with pytest.raises(ValueError, match="non-empty mapping"):
        MixturePhase(start_step=0, weights=[0.5, 0.5])  # type: ignore[arg-type]


@pytest.mark.parametrize("start", ["start_step", "start_epoch"])
def test_phase_start_errors_name_the_argument(start: str) -> None:
    """A negative start raises a ValueError naming the argument as written."""
    with pytest.raises(ValueError, match=rf"^{start}=-1 must be >= 0"):
        MixturePhase(weights={"web": 1.0}, **{start: -1})


def test_weights_of_another_type_are_refused() -> None:
    """Weights that are neither a mapping nor a sequence raise TypeError naming the forms."""
    with pytest.raises(TypeError, match=r"weights=5 must be a mapping naming every source"):
        MixtureSampler(mixture(), 5, num_replicas=1, rank=0)  # type: ignore[arg-type]


def test_sampler_yields_python_ints() -> None:
    """A mixture sampler yields dataset indices as ``int``, like any torch sampler."""
    s = make(0, (W1, 0, 500, "declared"))
    indices = list(s)
    assert len(indices) == 1000
    assert {type(i) for i in indices} == {int}


def test_other_phases_are_refused_naming_the_difference() -> None:
    """Resuming with other phases raises StateMismatchError naming the saved change."""
    saved = make(0, (W1, 0, 500, "declared"))
    read(saved, 100)
    state = saved.state_dict()
    with pytest.raises(StateMismatchError, match=r"saved \(0, 500, \[0\.2, 0\.3, 0\.5\]"):
        make(0, (W1, 0, 600, "declared")).load_state_dict(copy.deepcopy(state))
    longer = make(0, (W1, 0, 500, "declared"), (W2, 0, 800, "declared"))
    with pytest.raises(StateMismatchError, match="change #2: saved none"):
        longer.load_state_dict(copy.deepcopy(state))


@pytest.mark.parametrize("online", [False, True])
@pytest.mark.parametrize("consumed", [1, 100])
def test_allowed_change_keeps_the_saved_schedule_up_to_the_resume_point(
    consumed: int, online: bool
) -> None:
    """With allow_schedule_change the read part keeps its draws; the new phase applies after."""
    extra = [(W2, 0, 50, "online")] if online else []
    for seed in range(8):
        saved = make(seed, *extra, (W1, 0, 500, "declared"))
        first, _ = read(saved, consumed)
        state = saved.state_dict()
        resumed = make(seed, (W1, 0, 300, "declared"))
        resumed.allow_schedule_change = True
        resumed.load_state_dict(state)
        # what the interrupted run read is what the resumed one counts as read
        assert resumed.source_counts(consumed, epoch=0) == shares(first)
        rest = list(resumed)
        assert len(rest) == 1000 - consumed
        # the new phase: [300, 1000) is one planned segment at W1, 700 positions
        assert shares(rest[300 - consumed :]) == exact(W1, 700)
        assert resumed.weights_at(0, 300) == pytest.approx(exact_probs(W1))


def test_allowed_change_in_a_later_epoch_carries_the_weights_in_force() -> None:
    """A resume mid-epoch 1 with a new phase there: inherited weights, then the new phase."""
    saved = make(0, (W1, 0, 500, "declared"))
    read(saved, 1000)
    first, _ = read(saved, 100, epoch=1)
    state = saved.state_dict()
    resumed = make(0, (W1, 0, 500, "declared"), (W2, 1, 300, "declared"))
    resumed.allow_schedule_change = True
    resumed.load_state_dict(state)
    assert resumed.source_counts(100, epoch=1) == shares(first)
    assert resumed.weights_at(1, 299) == pytest.approx(exact_probs(W1))
    assert resumed.weights_at(1, 300) == pytest.approx(exact_probs(W2))
    rest = list(resumed)
    assert len(rest) == 900
    assert shares(rest[200:]) == exact(W2, 700)


def test_allowed_change_replays_the_saved_online_changes_ahead() -> None:
    """Saved online changes ahead of the resume point are replayed after the new phases."""
    saved = make(0, (W2, 0, 300, "online"), (W1, 0, 500, "declared"))
    state = saved.state_dict()  # nothing read yet: the online change is ahead
    resumed = make(0, (W1, 0, 300, "declared"))
    resumed.allow_schedule_change = True
    resumed.load_state_dict(state)
    # the oracle: a sampler given the new phase and the online change from the start
    fresh = make(0, (W1, 0, 300, "declared"), (W2, 0, 300, "online"))
    assert resumed.weights_at(0, 300) == pytest.approx(exact_probs(W2))
    assert list(resumed) == list(fresh)


def test_allowed_change_resumed_at_a_phase_boundary() -> None:
    """Resumed exactly where a saved phase starts: the later, changed phase still applies."""
    saved = make(0, (W1, 0, 500, "declared"), (W2, 0, 800, "declared"))
    first, _ = read(saved, 500)
    state = saved.state_dict()
    resumed = make(0, (W1, 0, 500, "declared"), (W2, 0, 700, "declared"))
    resumed.allow_schedule_change = True
    resumed.load_state_dict(state)
    assert resumed.source_counts(500, epoch=0) == shares(first)
    rest = list(resumed)
    assert len(rest) == 500
    assert shares(rest[200:]) == exact(W2, 300)  # [700, 1000): one planned segment
    near = exact(W1, 200)  # [500, 700): W1's share within a few samples
    assert all(abs(shares(rest[:200])[n] - near[n]) <= 4 for n in SIZES)


def _state_with_online_change() -> dict[str, Any]:
    s = make(0, (W2, 0, 300, "online"))
    read(s, 10)
    return s.state_dict()


def test_two_online_changes_at_one_position_are_refused() -> None:
    """A saved schedule with two online changes at one position is out of order: refused."""
    state = _state_with_online_change()
    online = state["schedule"][-1]
    assert online["kind"] == "online"
    state["schedule"].append(dict(online, weights=list(W1.values())))
    with pytest.raises(StateMismatchError, match="out of order"):
        make(0).load_state_dict(state)


@pytest.mark.parametrize("weights", [[0.5, 0.5], [0.2, 0.3, 0.4, 0.1], [True, 0.5, 0.5]])
def test_saved_weights_of_another_shape_or_type_are_refused(weights: list[Any]) -> None:
    """A saved change whose weights are not one number per source raises StateMismatchError."""
    state = _state_with_online_change()
    state["schedule"][-1]["weights"] = weights
    with pytest.raises(StateMismatchError, match="schedule entry is invalid"):
        make(0).load_state_dict(state)


def test_state_of_a_changed_resume_at_an_online_change_loads_again() -> None:
    """Resumed where a saved online change starts: its state resumes exactly in turn."""
    saved = make(0, (W2, 0, 100, "online"), (W1, 0, 500, "declared"))
    read(saved, 100)
    resumed = make(0, (W1, 0, 300, "declared"))
    resumed.allow_schedule_change = True
    resumed.load_state_dict(saved.state_dict())
    it = iter(resumed)
    [next(it) for _ in range(50)]
    state = resumed.state_dict()
    rest = list(it)  # the oracle: the resumed run, not interrupted again
    again = make(0, (W1, 0, 300, "declared"))
    again.load_state_dict(state)
    assert list(again) == rest
