"""Tests written for mutants of the mixture sampler and its schedule that survived (issue 23).

Each checks a promise of docs/mixing.md against an oracle that is not the code under test:
weights and segment counts computed by hand, or a sampler given the same schedule from the
start.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, cast

import pytest

from lightning_resumable_data import MixtureDataset, MixturePhase, MixtureSampler, SampleKey
from lightning_resumable_data.samplers.schedule import check_phases
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


def ranked(world: int, rank: int) -> MixtureSampler:
    return MixtureSampler(mixture(), W0, num_replicas=world, rank=rank, samples_per_epoch=400)


@pytest.mark.parametrize("kind", ["online", "declared"])
@pytest.mark.parametrize(
    ("world", "batch", "drop_last", "limit", "handed", "ahead"),
    [
        (1, 4, False, None, 2, 0),
        (2, 3, False, 25, 3, 7),
        (3, 5, True, 41, 1, 0),
        (2, 4, False, 30, 0, 0),
        (3, 7, True, None, 5, 30),
    ],
)
def test_a_change_while_reading_in_batches_gives_the_batches_of_reading_one_by_one(
    kind: str, world: int, batch: int, drop_last: bool, limit: int | None, handed: int, ahead: int
) -> None:
    """iter_batches, changed after ``handed`` batches at ``ahead`` global positions past the
    first not handed out, yields what BatchSampler(sampler) yields with the same change made
    after the same samples: no batch repeated or skipped, ``limit`` kept, on every rank."""
    for rank in range(world):
        batched = ranked(world, rank)
        it = batched.iter_batches(batch, drop_last, limit)
        got = [next(it) for _ in range(handed)]
        at = batched.consumed + ahead
        assert batched.update_weights(W1, position=at, kind=kind) == (0, at)
        got += list(it)

        plain = ranked(world, rank)
        one_by_one = iter(plain)
        first = [next(one_by_one) for _ in range(handed * batch)]
        plain.update_weights(W1, position=at, kind=kind)
        rest = list(one_by_one)
        flat = (first + rest)[:limit]
        want = [flat[i : i + batch] for i in range(0, len(flat), batch)]
        assert got == [b for b in want if len(b) == batch or not drop_last], (rank, kind)


def test_weights_at_defaults_to_the_epochs_first_position() -> None:
    """weights_at(epoch) is the mixture at the epoch's position 0; a change at position 1
    or 3 shows from there on only."""
    s = make(0, (W1, 1, 1, "declared"), (W2, 1, 3, "online"))
    assert s.weights_at(1) == s.weights_at(1, 0) == pytest.approx(exact_probs(W0))
    assert s.weights_at(1, 1) == s.weights_at(1, 2) == pytest.approx(exact_probs(W1))
    assert s.weights_at(1, 3) == s.weights_at(2) == pytest.approx(exact_probs(W2))


@pytest.mark.parametrize("epoch", [0, 1, 3])
def test_a_phase_declared_while_reading_a_later_epoch_keeps_its_prefix_and_resumes(
    epoch: int,
) -> None:
    """docs/mixing.md: a declared change made while reading leaves the positions before it as
    planned, and its segment draws exactly its counts, also in an epoch whose weights are
    inherited from an earlier one (the governing change was made in epoch 0)."""
    s = make(0, (W2, 0, 700, "declared")) if epoch else make()
    first, it = read(s, 200, epoch)
    s.update_weights(W1, position=300, kind="declared")
    middle = [next(it) for _ in range(250)]
    state = copy.deepcopy(s.state_dict())
    rest = list(it)
    order = first + middle + rest

    unchanged, _ = read(make(0, (W2, 0, 700, "declared")) if epoch else make(), 1000, epoch)
    assert order[:300] == unchanged[:300]  # the prefix as planned
    assert shares(order[300:]) == exact(W1, 700)  # the new phase: exactly its counts
    assert len(set(order[:300])) == 300  # W0 fits the sizes: one pass, no repeat
    for consumed in (150, 300, 450, 1000):  # the counts it reports are what it yielded
        assert s.source_counts(consumed, epoch) == shares(order[:consumed])

    before = [(W2, 0, 700, "declared")] if epoch else []
    resumed = make(0, *before)
    resumed.load_state_dict(state)
    assert list(resumed) == rest
    declared = make(0, *before, (W1, epoch, 300, "declared"))  # the phases a run declares
    declared.load_state_dict(state)
    assert list(declared) == rest


def saved_after_a_change() -> dict[str, Any]:
    """A state 500 positions into an epoch changed at 300: it carries the segment of 300."""
    s = make(0, (W1, 0, 300, "online"))
    read(s, 500)
    state = copy.deepcopy(s.state_dict())
    assert state["segment"] == {"start": 300, "drawn": [180, 90, 30]}  # W0's exact 300
    return state


def shift_web(state: dict[str, Any], by: int) -> None:
    state["segment"]["drawn"][0] += by
    state["source_counts"]["web"] += by


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda s: s["segment"].update(start=-1), r"'segment' is invalid \(\bstart\b"),
        (lambda s: s["segment"].update(drawn=[180, -90, 30]), r"'segment' is invalid \(\bdrawn\b"),
        (lambda s: s["segment"].update(drawn=[180, 90]), r"2 sources\) does not fit"),
        (lambda s: s["segment"].update(start=600), r"start 600, 3 sources\) does not fit the"),
        (lambda s: shift_web(s, 5), r"drawn \[185, 90, 30\]\) does not agree.*corrupted\.$"),
        (
            lambda s: s["segment"].update(start=0),
            r"fit the resume point 500 of 1000 and 3 sources; "
            r"the state is corrupted\.",
        ),
    ],
)
def test_a_corrupted_segment_is_refused_and_the_sampler_goes_on_as_before(
    corrupt: Any, match: str
) -> None:
    """A saved segment that does not fit its counts is refused (not loaded as another
    order), with a StateMismatchError naming the field; the sampler keeps its own state."""
    state = saved_after_a_change()
    corrupt(state)
    s = make(0, (W2, 0, 100, "online"))
    read(s, 40)
    own = copy.deepcopy(s.state_dict())
    with pytest.raises(StateMismatchError, match=match) as refused:
        s.load_state_dict(state)
    assert str(refused.value).startswith("Cannot load this state into MixtureSampler: its")
    assert s.state_dict() == own
    assert list(s) == list(make(0, (W2, 0, 100, "online")))  # its own schedule, from the start


def test_a_state_without_a_segment_loads_the_saved_schedule_not_the_one_read_before() -> None:
    """Loading a state saved before any change (no segment) into a sampler that has read
    with other online changes gives the saved run's order, not a stale plan."""
    saved = make()
    read(saved, 100)
    state = copy.deepcopy(saved.state_dict())
    assert "segment" not in state or state["segment"] is None
    s = make(0, (W1, 0, 200, "online"))
    read(s, 300)
    s.load_state_dict(state)
    assert list(s) == list(make())[100:]


def test_phases_of_one_kind_in_increasing_order_are_accepted_and_others_named() -> None:
    """check_phases: phases by step or by epoch, strictly increasing; the errors say how."""
    by_step = [MixturePhase(start_step=s, weights=W0) for s in (0, 10)]
    by_epoch = [MixturePhase(start_epoch=e, weights=W0) for e in (0, 2)]
    check_phases(by_step)
    check_phases(by_epoch)
    with pytest.raises(
        ValueError, match=r"^phases mix start_step and start_epoch; use one kind for all\.$"
    ):
        check_phases([by_step[0], by_epoch[1]])
    with pytest.raises(
        ValueError,
        match=r"^phases must start in strictly increasing order, got starts \[10, 0\]; sort "
        r"them and merge phases that start at the same step\.$",
    ):
        check_phases(by_step[::-1])


def test_a_phase_keeps_its_own_copy_of_the_weights_and_checks_the_temperature() -> None:
    weights = dict(W1)
    phase = MixturePhase(start_epoch=1, weights=weights, temperature=2.0)
    weights["web"] = 9.0
    assert phase.weights == W1
    assert type(phase.weights) is dict
    with pytest.raises(ValueError, match="temperature"):
        MixturePhase(start_epoch=1, weights=W1, temperature=0.0)
    with pytest.raises(
        ValueError,
        match=r"^MixturePhase\(start_step=None, start_epoch=None\) needs exactly one "
        r"of start_step and start_epoch\.$",
    ):
        MixturePhase(weights=W1)
    with pytest.raises(
        ValueError, match=r"weights=\{\} must be a non-empty mapping of source names to weights\.$"
    ):
        MixturePhase(start_step=0, weights={})


def test_a_changed_schedule_is_refused_with_how_to_accept_it() -> None:
    """The refusal of other phases names both ways to accept the change on purpose."""
    saved = make(0, (W1, 0, 500, "declared"))
    read(saved, 100)
    with pytest.raises(StateMismatchError) as refused:
        make(0, (W2, 0, 500, "declared")).load_state_dict(saved.state_dict())
    assert str(refused.value).endswith(
        "The resumed run would not mix what the interrupted run mixed. Restore the saved "
        "phases, or accept the change on purpose (ResumableDataModule(allow_config_change="
        "True), or sampler.allow_schedule_change = True before loading) to keep the saved "
        "schedule up to the resume point and use the new one after it."
    )


def test_an_allowed_change_in_a_later_epoch_saves_a_state_that_loads_again() -> None:
    """After an allowed change resumed mid-epoch 1 (its weights inherited from epoch 0), the
    run's own state loads into a sampler with the same phases and goes on identically."""
    saved = make(0, (W1, 0, 500, "declared"))
    read(saved, 1000)
    read(saved, 100, epoch=1)
    phases = ((W1, 0, 500, "declared"), (W2, 1, 300, "declared"))
    resumed = make(0, *phases)
    resumed.allow_schedule_change = True
    resumed.load_state_dict(saved.state_dict())
    it = iter(resumed)
    [next(it) for _ in range(50)]
    state = copy.deepcopy(resumed.state_dict())
    assert all(e["kind"] in ("declared", "online", "carry") for e in state["schedule"])
    rest = list(it)
    again = make(0, *phases)  # no allow_schedule_change: the phases are the state's now
    again.load_state_dict(state)
    assert list(again) == rest


def test_a_state_with_many_online_changes_loads_in_one_array_check() -> None:
    """docs/mixing.md: online changes are replayed from the state; 600 of them load with
    one array check, not an entry-by-entry check each (the per-entry path names errors)."""
    s = make()
    it = iter(s)
    for step in range(600):
        next(it)
        s.update_weights(W1 if step % 2 else W2, kind="online")
    state = s.state_dict()
    assert len(state["schedule"]) == 601
    loaded = make()
    checked: list[Any] = []
    entry = loaded._entry

    def counted(*entry_args: Any) -> Any:
        checked.append(entry_args)
        return entry(*entry_args)

    loaded._entry = counted  # type: ignore[assignment]
    loaded.load_state_dict(state)
    assert len(checked) <= 1  # at most the initial weights
    assert list(loaded) == list(it)


@pytest.mark.parametrize(
    ("saved_changes", "governing"),
    [
        ((), {700: W2}),  # nothing saved at the resume point
        (((W1, 0, 700, "declared"),), {700: W2}),  # a saved phase there, changed
        (((W1, 0, 700, "online"),), {700: W1}),  # an online change there: replayed, governs
        (((W1, 0, 800, "online"),), {700: W2, 800: W1}),  # one ahead of it: replayed there
        (((W2, 0, 700, "declared"),), {700: W2}),  # the same phase there, unchanged
    ],
    ids=["new", "changed", "online-there", "online-ahead", "unchanged"],
)
def test_an_allowed_phase_starting_exactly_at_the_resume_point_applies_from_there(
    saved_changes: tuple[tuple[Mapping[str, float], int, int, str], ...],
    governing: dict[int, Mapping[str, float]],
) -> None:
    """allow_schedule_change: a new phase at the resume point itself (the natural 'from
    here on' change) governs from there; the positions read keep their plan; the saved
    online changes are replayed; and the run's own states load again with the new phases,
    without the flag. The new phase was dropped (the saved weights went on) until issue 23's
    mutation review (schedule.py:116)."""
    saved = make(0, *saved_changes)
    first, _ = read(saved, 700)
    phases = [(W2, 0, 700, "declared"), (W0, 0, 900, "declared")]  # 900: a change too
    resumed = make(0, *phases)
    resumed.allow_schedule_change = True
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    it = iter(resumed)
    rest = [next(it) for _ in range(100)]
    state = copy.deepcopy(resumed.state_dict())
    rest += list(it)
    assert len(rest) == 300
    assert resumed.source_counts(700) == shares(first)
    for position, weights in governing.items():
        assert resumed.weights_at(0, position) == pytest.approx(exact_probs(weights))
    assert resumed.weights_at(0, 900) == pytest.approx(exact_probs(W0))
    if governing == {700: W2}:
        assert shares(rest[:200]) == exact(W2, 200)  # the new phase draws exactly its counts
    again = make(0, *phases)  # no flag: the phases are the state's own now
    again.load_state_dict(state)
    assert list(again) == rest[100:]


def test_a_later_epochs_state_carries_the_online_weights_in_force_and_drops_the_rest() -> None:
    """A state keeps the changes of one epoch: online changes of earlier epochs are dropped,
    the one in force at the epoch's start is carried to (epoch, 0); the resume is exact, and
    the state holds copies (changing it changes nothing in the sampler)."""
    s = make()
    it = iter(s)
    for at, weights in ((100, W1), (400, W2)):
        while s.consumed < at:
            next(it)
        s.update_weights(weights, kind="online")
    list(it)
    _, it = read(s, 250, epoch=1)
    state = copy.deepcopy(s.state_dict())
    raw = s.state_dict()
    rest = list(it)
    assert [(e["epoch"], e["position"], e["kind"]) for e in state["schedule"]] == [
        (0, 0, "declared"),
        (1, 0, "carry"),
    ]
    assert state["schedule"][1]["weights"] == pytest.approx(list(W2.values()))
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.weights_at(1, 0) == pytest.approx(exact_probs(W2))
    assert list(resumed) == rest
    for entry in raw["schedule"]:
        entry["weights"][0] = 99.0
    assert s.weights_at(0, 0) == pytest.approx(exact_probs(W0))
    assert s.weights_at(1, 0) == pytest.approx(exact_probs(W2))


def test_a_schedule_off_the_fast_path_loads_the_same() -> None:
    """Entries the one-array check does not take (weights as tuples, from another
    serializer) go through the entry-by-entry checks and resume identically."""
    s = make(0, (W1, 0, 300, "declared"), (W2, 0, 600, "online"))
    _, it = read(s, 450)
    state = copy.deepcopy(s.state_dict())
    rest = list(it)
    for entry in state["schedule"]:
        entry["weights"] = tuple(entry["weights"])
    resumed = make(0, (W1, 0, 300, "declared"))
    resumed.load_state_dict(state)
    assert resumed.weights_at(0, 300) == pytest.approx(exact_probs(W1))
    assert resumed.weights_at(0, 600) == pytest.approx(exact_probs(W2))
    assert list(resumed) == rest


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda s: s.update(schedule="abc"), r"its 'schedule' is missing or empty; the state"),
        (lambda s: s["schedule"][1].update(epoch=-1), r"invalid \(epoch=-1 must be"),
        (lambda s: s["schedule"][1].update(position=-3), r"invalid \(position=-3 must be"),
        (lambda s: s["schedule"][1].update(plan_end=-2), r"invalid \(plan_end=-2 must be"),
        (lambda s: s["schedule"][1].update(plan_end=300), r"plan_end=300 must be in \(300, 1000\]"),
        (lambda s: s["schedule"][1].update(kind="bogus"), r"kind='bogus' must be one of \['decl"),
        (lambda s: s["schedule"][1].update(weights=(1, "x", 2)), r"schedule entry is invalid"),
    ],
)
def test_a_corrupted_schedule_entry_is_refused_naming_the_field(corrupt: Any, match: str) -> None:
    s = make(0, (W1, 0, 300, "declared"))
    read(s, 450)
    state = copy.deepcopy(s.state_dict())
    corrupt(state)
    with pytest.raises(StateMismatchError, match=match) as refused:
        make(0, (W1, 0, 300, "declared")).load_state_dict(state)
    assert str(refused.value).startswith("Cannot load this state into MixtureSampler: its ")


@pytest.mark.parametrize("at", [0, 1])
def test_a_phase_declared_at_the_first_positions_of_an_epoch_being_read(at: int) -> None:
    """A declared change at position 0 or 1 of an epoch being read (its weights inherited):
    the positions before it keep their plan and counts, the phase draws from there on, and
    the state taken after it loads into a sampler that declares the phase."""
    s = make()
    first, it = read(s, at, epoch=1)
    s.update_weights(W1, position=at, kind="declared")
    middle = [next(it) for _ in range(100)]
    state = copy.deepcopy(s.state_dict())
    rest = list(it)
    order = first + middle + rest
    unchanged, _ = read(make(), 1000, 1)
    assert order[:at] == unchanged[:at]
    for consumed in (at, 500, 1000):
        assert s.source_counts(consumed, 1) == shares(order[:consumed])
    if at == 0:
        assert shares(order) == exact(W1, 1000)
    declared = make(0, (W1, 1, at, "declared"))
    declared.load_state_dict(state)
    assert list(declared) == rest


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        ({"weights": [0.0, 0.0, 0.0, 0.0]}, "all zero"),
        ({"temperature": 0.0}, r"temperature=0\.0 must be > 0"),
        ({"weights": [0.5, 0.3, 0.2]}, r"got 3 weights for 4 sources"),
        ({"weights": [0.5, 0.3, 0.1, 0.3]}, r"sources \['empty'\] are empty but have weight > 0"),
    ],
    ids=["all-zero", "temperature-0", "width", "empty-source"],
)
def test_a_saved_entry_the_sampler_would_not_accept_is_refused(
    corrupt: dict[str, Any], match: str
) -> None:
    """The one-array check of a saved schedule refuses what update_weights refuses: an
    all-zero row, a temperature <= 0, another width, weight on an empty source."""
    sources = {**{name: range(n) for name, n in SIZES.items()}, "empty": range(0)}

    def sampler() -> MixtureSampler:
        weights = {**W0, "empty": 0.0}
        return MixtureSampler(MixtureDataset(sources), weights, num_replicas=1, rank=0)

    s = sampler()
    it = iter(s)
    [next(it) for _ in range(10)]
    s.update_weights({**W1, "empty": 0.0}, kind="online")
    state = copy.deepcopy(s.state_dict())
    state["schedule"][1].update(corrupt)
    with pytest.raises(StateMismatchError, match=match):
        sampler().load_state_dict(state)


def test_a_state_written_before_entries_had_kinds_loads_them_as_declared() -> None:
    """States of the earlier version have no 'kind' in their entries: all were declared."""
    s = make(0, (W1, 0, 300, "declared"))
    _, it = read(s, 450)
    state = copy.deepcopy(s.state_dict())
    rest = list(it)
    for entry in state["schedule"]:
        del entry["kind"]
    resumed = make(0, (W1, 0, 300, "declared"))
    resumed.load_state_dict(state)
    assert list(resumed) == rest


def test_a_later_epochs_state_keeps_declared_phases_as_they_are_and_copies_its_entries() -> None:
    """A declared phase of an earlier epoch stays as it is (no carried copy); the entries of
    the state's own epoch are copies too."""
    s = make(0, (W1, 0, 500, "declared"))
    read(s, 1000)
    _, it = read(s, 100, epoch=1)
    s.update_weights(W2, kind="online")  # at (1, 100)
    state = copy.deepcopy(s.state_dict())
    assert [(e["epoch"], e["position"], e["kind"]) for e in state["schedule"]] == [
        (0, 0, "declared"),
        (0, 500, "declared"),
        (1, 100, "online"),
    ]
    raw = s.state_dict()
    raw["schedule"][-1]["weights"][0] = 99.0
    assert s.weights_at(1, 100) == pytest.approx(exact_probs(W2))
    resumed = make(0, (W1, 0, 500, "declared"))
    resumed.load_state_dict(state)
    assert list(resumed) == list(it)


@pytest.mark.parametrize("new_phase", [None, (W2, 1, 0, "declared")], ids=["kept", "new"])
def test_an_allowed_change_at_an_epoch_start_keeps_the_online_weights_carried_into_it(
    new_phase: tuple[Mapping[str, float], int, int, str] | None,
) -> None:
    """A state at the start of epoch 1 carries the online weights in force from epoch 0;
    resumed with another later phase (allowed), they still govern epoch 1, unless a new
    phase starts exactly there."""
    s = make()
    it = iter(s)
    [next(it) for _ in range(100)]
    s.update_weights(W1, kind="online")
    list(it)
    s.set_epoch(1)
    state = copy.deepcopy(s.state_dict())
    assert (state["epoch"], state["consumed"]) == (1, 0)
    phases = [(W0, 2, 0, "declared")] if new_phase is None else [new_phase]
    resumed = make(0, *phases)
    resumed.allow_schedule_change = True
    resumed.load_state_dict(state)
    expected = W1 if new_phase is None else W2
    assert resumed.weights_at(1, 0) == pytest.approx(exact_probs(expected))
    assert shares(list(resumed)) == exact(expected, 1000)
    again = make(0, *phases)
    again.allow_schedule_change = True
    again.load_state_dict(copy.deepcopy(resumed.state_dict()))  # a valid state


def test_an_allowed_phase_moved_later_keeps_the_read_plan_then_plans_afresh() -> None:
    """A saved phase at 500 resumed at 300 as a phase at 700 (as an elastic resume to larger
    batches places it): the segment being read goes on with its plan up to where that plan
    ended (500: the same samples as the saved run), then with a fresh plan up to the phase."""
    saved = make(0, (W1, 0, 500, "declared"))
    first, it = read(saved, 300)
    state = copy.deepcopy(saved.state_dict())
    uninterrupted = first + list(it)
    resumed = make(0, (W1, 0, 700, "declared"))
    resumed.allow_schedule_change = True
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert rest[:200] == uninterrupted[300:500]
    assert resumed.weights_at(0, 600) == pytest.approx(exact_probs(W0))
    assert resumed.weights_at(0, 700) == pytest.approx(exact_probs(W1))
    assert shares(rest[200:400]) == exact(W0, 200)
    assert shares(rest[400:]) == exact(W1, 300)


@pytest.mark.parametrize(
    ("saved_phases", "new_phases", "expected"),
    [
        ([], [(W1, 0, 200, "declared")], {400: W1}),  # a new phase before the point
        ([(W1, 0, 200, "declared")], [(W2, 0, 200, "declared")], {400: W2}),  # edited
        ([(W1, 0, 500, "declared")], [(W2, 0, 600, "declared")], {400: W0, 500: W0, 600: W2}),
        (
            [(W1, 0, 200, "declared")],
            [(W1, 0, 200, "declared"), (W2, 0, 600, "declared")],
            {400: W1, 600: W2},
        ),
        ([(W1, 0, 200, "declared")], [(W2, 0, 600, "declared")], {400: W1, 600: W2}),
        (
            [(W1, 0, 200, "declared"), (W2, 0, 300, "online")],
            [(W0, 0, 100, "declared")],
            {400: W2},
        ),
    ],
    ids=["new-before", "edited", "replaced-later", "added-later", "passed-not-given", "online"],
)
def test_an_allowed_change_applies_what_the_new_schedule_has_in_force_at_the_point(
    saved_phases: list[tuple[Mapping[str, float], int, int, str]],
    new_phases: list[tuple[Mapping[str, float], int, int, str]],
    expected: dict[int, Mapping[str, float]],
) -> None:
    """docs/mixing.md: with allow_config_change, the new schedule applies from the resume
    point: the weights it has in force there (a phase that started before it, an edited
    passed one), or, with only the initial weights given again (an elastic resume does not
    give passed phases again), the saved ones; a saved online change later than the new
    phase still governs; the positions read keep their order; the merged state loads to the
    same order again."""
    saved = make(0, *saved_phases)
    first, it = read(saved, 400)
    state = copy.deepcopy(saved.state_dict())
    uninterrupted = first + list(it)
    resumed = make(0, *new_phases)
    resumed.allow_schedule_change = True
    resumed.load_state_dict(copy.deepcopy(state))
    for position, weights in expected.items():
        assert resumed.weights_at(0, position) == pytest.approx(exact_probs(weights))
    rest = list(resumed)
    assert len(rest) == 600
    if expected[400] is (saved_phases[-1][0] if saved_phases else W0):  # nothing changed at 400
        changed_at = min([p for p in expected if p > 400] + [1000])
        assert rest[: changed_at - 400] == uninterrupted[400:changed_at]
    resumed.load_state_dict(copy.deepcopy(state))  # the same state again, onto the merged one
    assert list(resumed) == rest


def changed(
    initial: Mapping[str, float], *phases: tuple[Mapping[str, float], int, int, str]
) -> MixtureSampler:
    """A one-rank sampler with other initial weights and ``phases``, allowed to change."""
    s = MixtureSampler(mixture(), initial, num_replicas=1, rank=0, seed=0)
    for weights, epoch, position, kind in phases:
        s.update_weights(dict(weights), epoch=epoch, position=position, kind=kind)
    s.allow_schedule_change = True
    return s


@pytest.mark.parametrize("point", [300, 450])
def test_an_allowed_edit_of_a_later_phase_leaves_the_order_before_it_unchanged(point: int) -> None:
    """Only the phase at 600 is edited: every position before 600 is the saved run's, read
    from a resume at the previous phase's start (300) or inside it (450); the edited weights
    govern from 600."""
    saved = make(0, (W1, 0, 300, "declared"), (W2, 0, 600, "declared"))
    first, it = read(saved, point)
    state = copy.deepcopy(saved.state_dict())
    uninterrupted = first + list(it)
    resumed = changed(W0, (W1, 0, 300, "declared"), (W0, 0, 600, "declared"))
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert rest[: 600 - point] == uninterrupted[point:600]
    assert resumed.weights_at(0, 600) == pytest.approx(exact_probs(W0))
    assert shares(rest[600 - point :]) == exact(W0, 400)


def test_a_new_phase_at_a_saved_online_changes_position_gives_way_to_it() -> None:
    """At one position an online change comes after a declared one (as in the sampler's own
    schedule), so a new phase declared where the saved run changed its weights online leaves
    the online weights in force at the resume point."""
    saved = make(0, (W2, 0, 200, "online"))
    first, it = read(saved, 400)
    state = copy.deepcopy(saved.state_dict())
    uninterrupted = first + list(it)
    resumed = changed(W0, (W1, 0, 200, "declared"))
    resumed.load_state_dict(state)
    assert resumed.weights_at(0, 400) == pytest.approx(exact_probs(W2))
    assert list(resumed) == uninterrupted[400:]


def test_a_saved_phase_no_longer_declared_stops_at_the_resume_point() -> None:
    """The new schedule keeps the phase at 200, drops the saved one at 300 and adds one at
    800: from the resume point (400) the phase at 200 is in force again, up to 800. (A
    schedule that only leaves out the saved later phases is a prefix: the callback declares
    those after loading.)"""
    saved = make(0, (W1, 0, 200, "declared"), (W2, 0, 300, "declared"))
    read(saved, 400)
    resumed = changed(W0, (W1, 0, 200, "declared"), (W0, 0, 800, "declared"))
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    assert resumed.weights_at(0, 399) == pytest.approx(exact_probs(W2))
    assert resumed.weights_at(0, 400) == pytest.approx(exact_probs(W1))
    rest = list(resumed)
    assert shares(rest[:400]) == exact(W1, 400)
    assert shares(rest[400:]) == exact(W0, 200)


def test_other_initial_weights_are_refused_even_with_an_allowed_schedule_change() -> None:
    """The initial weights are part of the order's identity (the sampler's fingerprint):
    allow_schedule_change does not accept them, and the refused sampler keeps its state."""
    saved = make()
    read(saved, 400)
    resumed = changed(W1)
    with pytest.raises(StateMismatchError, match="initial: saved"):
        resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    assert shares(list(resumed)) == exact(W1, 1000)


def test_a_saved_phase_at_the_resume_point_not_declared_again_does_not_start() -> None:
    """The saved run had a phase at 400, the new schedule has one at 600 instead: a resume
    at exactly 400 goes on with the initial weights (a fresh plan: the read one ended at
    400) up to 600."""
    saved = make(0, (W1, 0, 400, "declared"))
    read(saved, 400)
    resumed = changed(W0, (W2, 0, 600, "declared"))
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    assert resumed.weights_at(0, 400) == pytest.approx(exact_probs(W0))
    rest = list(resumed)
    assert shares(rest[:200]) == exact(W0, 200)
    assert shares(rest[200:]) == exact(W2, 400)


def test_a_phase_added_for_a_later_epoch_leaves_the_epoch_resumed_at_its_start_unchanged() -> None:
    """Resumed at the start of epoch 1 with a phase added at epoch 2: epoch 1 is the saved
    run's, sample for sample (the weights in force there did not change)."""
    saved = make(0, (W1, 0, 500, "declared"))
    read(saved, 1000)
    saved.set_epoch(1)
    state = copy.deepcopy(saved.state_dict())
    uninterrupted = list(saved)
    resumed = changed(W0, (W1, 0, 500, "declared"), (W2, 2, 0, "declared"))
    resumed.load_state_dict(state)
    assert list(resumed) == uninterrupted
    assert resumed.weights_at(2, 0) == pytest.approx(exact_probs(W2))


@pytest.mark.parametrize("position", [0, 200])
@pytest.mark.parametrize("online", [False, True], ids=["declared", "online-before-it"])
def test_a_new_phase_of_an_earlier_epoch_is_in_force_in_a_later_epochs_resume(
    position: int, online: bool
) -> None:
    """A phase added at (0, 500), resumed at (1, 0) or (1, 200): its weights are the new
    schedule's in force there, from the resume point on and in the next epoch, also when
    the saved run changed its weights online at (0, 100), before the new phase (the state
    carries those weights into epoch 1)."""
    saved = make(0, *([(W2, 0, 100, "online")] if online else []))
    read(saved, 1000)
    read(saved, position, epoch=1)
    before = W2 if online else W0
    resumed = changed(W0, (W1, 0, 500, "declared"))
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    if position:
        assert resumed.weights_at(1, position - 1) == pytest.approx(exact_probs(before))
    assert resumed.weights_at(1, position) == pytest.approx(exact_probs(W1))
    assert shares(list(resumed)) == exact(W1, 1000 - position)
    assert resumed.weights_at(2, 0) == pytest.approx(exact_probs(W1))


RESUMES = {  # saved phases, new initial weights, new phases, resume point (epoch, position)
    "new-before": ([], W0, [(W1, 0, 200, "declared")], (0, 400)),
    "edited": ([(W1, 0, 200, "declared")], W0, [(W2, 0, 200, "declared")], (0, 400)),
    "moved-later": ([(W1, 0, 500, "declared")], W0, [(W1, 0, 700, "declared")], (0, 300)),
    "dropped": (
        [(W1, 0, 200, "declared"), (W2, 0, 300, "declared")],
        W0,
        [(W1, 0, 200, "declared"), (W0, 0, 900, "declared")],
        (0, 400),
    ),
    "online-ahead": (
        [(W1, 0, 200, "declared"), (W2, 0, 700, "online")],
        W0,
        [(W0, 0, 100, "declared")],
        (0, 400),
    ),
    "online-in-force": (
        [(W2, 0, 100, "online"), (W1, 0, 300, "declared")],
        W0,
        [(W2, 0, 500, "declared")],
        (0, 400),
    ),
    "online-cut": (  # the online change at 100 is in force again at 400: a carry is cut
        [(W1, 0, 50, "declared"), (W2, 0, 100, "online"), (W0, 0, 300, "declared")],
        W0,
        [(W1, 0, 50, "declared"), (W0, 0, 900, "declared")],
        (0, 400),
    ),
    "online-carried": ([(W2, 0, 100, "online")], W0, [(W1, 0, 500, "declared")], (1, 200)),
    "epoch-start": ([(W2, 0, 100, "online")], W0, [(W1, 0, 500, "declared")], (1, 0)),
    "later-epoch": ([], W0, [(W1, 0, 500, "declared")], (1, 200)),
}


@pytest.mark.parametrize("case", RESUMES)
@pytest.mark.parametrize("second", [(0, 800), (1, 300)], ids=["same-epoch", "next-epoch"])
def test_the_runs_own_state_after_an_allowed_change_resumes_it_exactly(
    case: str, second: tuple[int, int]
) -> None:
    """docs/mixing.md: after an allowed change, the resumed run's own checkpoints resume it
    (with the same new configuration and allow_config_change): the order from a second
    stop is the first resume's own, in its epoch and the next."""
    saved_phases, initial, new_phases, (epoch, position) = RESUMES[case]
    saved = make(0, *saved_phases)
    for e in range(epoch):
        read(saved, 1000, epoch=e)
    read(saved, position, epoch=epoch)
    resumed = changed(initial, *new_phases)
    resumed.load_state_dict(copy.deepcopy(saved.state_dict()))
    second_epoch, second_position = (epoch + second[0], second[1])
    order: dict[int, list[int]] = {}
    for e in range(epoch, second_epoch + 1):
        resumed.set_epoch(e)
        order[e] = list(resumed)
    offset = position if second_epoch == epoch else 0
    again = changed(initial, *new_phases)
    stopped = changed(initial, *new_phases)
    stopped.load_state_dict(copy.deepcopy(saved.state_dict()))
    if second_epoch == epoch:
        head, _ = read_on(stopped, second_position - position)
    else:
        list(stopped)
        stopped.set_epoch(second_epoch)
        head, _ = read_on(stopped, second_position)
    assert head == order[second_epoch][: second_position - offset]
    again.load_state_dict(copy.deepcopy(stopped.state_dict()))
    assert list(again) == order[second_epoch][second_position - offset :]


def read_on(s: MixtureSampler, n: int) -> tuple[list[int], Iterator[int]]:
    """The next ``n`` indices of the epoch ``s`` is set to, and the iterator to read on."""
    it = iter(s)
    return [next(it) for _ in range(n)], it


def test_a_second_allowed_change_weighs_the_carried_online_weights_where_they_were_decided() -> (
    None
):
    """After a first allowed change cut the online weights of position 100 again at 400, a
    second one declaring a phase at 200 puts that phase in force at 600: the online change
    (made at 100) came before it, wherever its weights were carried to."""
    first = make(0, (W1, 0, 50, "declared"), (W2, 0, 100, "online"), (W0, 0, 300, "declared"))
    read(first, 400)
    resumed = changed(W0, (W1, 0, 50, "declared"), (W0, 0, 900, "declared"))
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    assert resumed.weights_at(0, 400) == pytest.approx(exact_probs(W2))
    read_on(resumed, 200)
    again = changed(W0, (W1, 0, 50, "declared"), (W1, 0, 200, "declared"), (W0, 0, 900, "declared"))
    again.load_state_dict(copy.deepcopy(resumed.state_dict()))
    assert again.weights_at(0, 599) == pytest.approx(exact_probs(W2))
    assert again.weights_at(0, 600) == pytest.approx(exact_probs(W1))
    rest = list(again)
    assert shares(rest[:300]) == exact(W1, 300)
    assert shares(rest[300:]) == exact(W0, 100)


def _state_with_a_carry() -> dict[str, Any]:
    """A state at (1, 200) whose schedule carries the online weights of (0, 100)."""
    s = make(0, (W2, 0, 100, "online"))
    read(s, 1000)
    read(s, 200, epoch=1)
    state = copy.deepcopy(s.state_dict())
    assert [(e["kind"], e.get("since")) for e in state["schedule"]] == [
        ("declared", None),
        ("carry", [0, 100]),
    ]
    return state


@pytest.mark.parametrize(
    ("since", "match"),
    [
        ("x", "must be None or an \\(epoch, position\\) pair"),
        ([0], "must be None or an \\(epoch, position\\) pair"),
        ([0, -1], "since"),
        ([1, 1], "must not be after the carry at \\(1, 0\\)"),
    ],
)
def test_a_corrupted_since_of_a_carry_is_refused(since: object, match: str) -> None:
    state = _state_with_a_carry()
    state["schedule"][1]["since"] = since
    resumed = make()
    with pytest.raises(StateMismatchError, match=match):
        resumed.load_state_dict(state)


def test_a_carry_since_its_own_place_loads() -> None:
    """``since`` may be the carry's own place (not after it)."""
    state = _state_with_a_carry()
    state["schedule"][1]["since"] = [1, 0]
    make().load_state_dict(state)


def test_a_carry_written_before_since_counts_where_it_stands() -> None:
    """A state of the earlier version has carries without 'since': an allowed change weighs
    such a carry at its own place (the epoch's start), as that version did; with 'since',
    at the online change it carries, before the new phase."""
    state = _state_with_a_carry()
    resumed = changed(W0, (W1, 0, 500, "declared"))
    resumed.load_state_dict(copy.deepcopy(state))
    assert resumed.weights_at(1, 200) == pytest.approx(exact_probs(W1))
    del state["schedule"][1]["since"]
    old = changed(W0, (W1, 0, 500, "declared"))
    old.load_state_dict(state)
    assert old.weights_at(1, 200) == pytest.approx(exact_probs(W2))


@pytest.mark.parametrize(("world", "batch", "limit"), [(1, 4, None), (2, 3, 61), (3, 5, None)])
def test_two_changes_while_reading_in_batches_give_the_batches_of_reading_one_by_one(
    world: int, batch: int, limit: int | None
) -> None:
    """Two online changes inside one batched iteration (two restarts): the batches are those
    of reading one by one with the same changes after the same samples, on every rank."""
    for rank in range(world):
        batched = ranked(world, rank)
        it = batched.iter_batches(batch, False, limit)
        got = [next(it) for _ in range(2)]
        first_at = batched.consumed + world
        batched.update_weights(W1, position=first_at, kind="online")
        got += [next(it) for _ in range(3)]
        second_at = batched.consumed + 2 * world
        batched.update_weights(W2, position=second_at, kind="online")
        got += list(it)

        plain = ranked(world, rank)
        one_by_one = iter(plain)
        flat = [next(one_by_one) for _ in range(2 * batch)]
        plain.update_weights(W1, position=first_at, kind="online")
        flat += [next(one_by_one) for _ in range(3 * batch)]
        plain.update_weights(W2, position=second_at, kind="online")
        flat = (flat + list(one_by_one))[:limit]
        assert got == [flat[i : i + batch] for i in range(0, len(flat), batch)], rank


def test_source_counts_and_state_at_read_the_epoch_they_are_given() -> None:
    """source_counts(consumed, epoch) and state_at(epoch, consumed) describe ``epoch``, not
    the epoch the sampler is set to: the counts of epoch 1's first 300 samples, by hand."""
    s = make(0, (W1, 1, 0, "declared"))
    epoch1, _ = read(s, 300, epoch=1)
    s.set_epoch(0)
    assert s.source_counts(300, 1) == shares(epoch1)
    assert s.state_at(1, 300)["source_counts"] == shares(epoch1)
    assert s.source_counts(300, 0) != shares(epoch1)


@pytest.mark.parametrize("corrupt", ["junk", 5, None])
def test_a_fingerprint_that_is_not_a_mapping_is_refused(corrupt: object) -> None:
    """A 'fingerprint' that is not a dict: a StateMismatchError, not a crash."""
    s = make()
    read(s, 100)
    state = copy.deepcopy(s.state_dict())
    state["fingerprint"] = corrupt
    with pytest.raises(StateMismatchError, match="fingerprint"):
        make().load_state_dict(state)


def test_another_epoch_length_or_drop_last_is_refused_naming_it() -> None:
    """The refusal names what changed: samples_per_epoch, drop_last."""
    s = MixtureSampler(mixture(), W0, num_replicas=3, rank=0, seed=0)  # drop_last=True
    read(s, 100)
    state = copy.deepcopy(s.state_dict())
    shorter = MixtureSampler(mixture(), W0, num_replicas=3, rank=0, seed=0, samples_per_epoch=900)
    with pytest.raises(StateMismatchError, match="samples_per_epoch"):
        shorter.load_state_dict(copy.deepcopy(state))
    padding = MixtureSampler(mixture(), W0, num_replicas=3, rank=0, seed=0, drop_last=False)
    with pytest.raises(StateMismatchError, match="drop_last"):
        padding.load_state_dict(copy.deepcopy(state))


@pytest.mark.parametrize("sample_keys", [False, True])
@pytest.mark.parametrize("drop_last", [True, False])
def test_an_online_change_while_reading_a_resumed_epoch_equals_the_change_made_before(
    sample_keys: bool, drop_last: bool
) -> None:
    """Resumed at position 301 on 3 ranks (1000 samples: a ragged tail), read one by one,
    then changed online 20 positions ahead: every rank yields what a sampler given the same
    change before reading yields (online changes keep no plan of their own), as keys with
    their seed, epoch and position when ``sample_keys``."""

    def sampler(rank: int) -> MixtureSampler:
        return MixtureSampler(
            mixture(), W0, num_replicas=3, rank=rank, seed=5, drop_last=drop_last,
            sample_keys=sample_keys,
        )  # fmt: skip

    first = sampler(0)
    read(first, 101)  # 101 samples of rank 0: global position 303
    state = copy.deepcopy(first.state_dict())
    for rank in range(3):
        live = sampler(rank)
        live.load_state_dict(copy.deepcopy(state))
        it = iter(live)
        got = [next(it) for _ in range(10)]
        at = live.consumed + 20
        live.update_weights(W1, position=at, kind="online")
        got += list(it)
        before = sampler(rank)
        before.load_state_dict(copy.deepcopy(state))
        before.update_weights(W1, position=at, kind="online")
        want = list(before)
        assert got == want, rank
        assert {type(i) for i in got} == {SampleKey if sample_keys else int}
        if sample_keys:
            keys = [cast(SampleKey, k) for k in got]
            assert [(k.seed, k.epoch) for k in keys] == [(5, 0)] * len(keys)
            assert [k.position for k in keys] == [cast(SampleKey, k).position for k in want]


def test_a_change_for_a_later_epoch_may_start_before_this_epochs_position() -> None:
    """300 positions into epoch 0, a change at (1, 100) is not too late: epoch 1 has not
    started; one at (0, 100) is. Without a position, a later epoch's change starts at its
    beginning, this epoch's at the first position not handed out."""
    s = make()
    read(s, 300)
    assert s.update_weights(W1, kind="online") == (0, 300)
    assert s.update_weights(W1, epoch=1, position=100, kind="declared") == (1, 100)
    assert s.update_weights(W2, epoch=2, kind="declared") == (2, 0)
    assert s.weights_at(1, 100) == pytest.approx(exact_probs(W1))
    with pytest.raises(ValueError, match="too late"):
        s.update_weights(W2, epoch=0, position=100, kind="declared")


@pytest.mark.parametrize("kind", ["declared", "online"])
def test_a_change_with_a_temperature_uses_it(kind: str) -> None:
    """update_weights(..., temperature=0.5): p ~ w ** 2 from the change on (by hand)."""
    s = make()
    read(s, 100)
    s.update_weights({"web": 1, "code": 2, "math": 1}, position=200, temperature=0.5, kind=kind)
    assert s.weights_at(0, 199) == pytest.approx(exact_probs(W0))
    assert s.weights_at(0, 200) == pytest.approx({"web": 1 / 6, "code": 4 / 6, "math": 1 / 6})
