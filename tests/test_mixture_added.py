"""A source appended to a mixture between a checkpoint and its resume (``DataChangePolicy``).

The state of a mixture of the first sources loads into a sampler of more sources: the
positions read keep their draws, the new sources draw from the resume position on with the
weights the sampler was built with, every source is still read in whole passes (nothing
skipped or repeated within a pass), on any world size before and after, and a later resume
from a checkpoint written after the addition replays it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_reads import read

from lightning_resumable_data import (
    DataChangePolicy,
    DistributedSampler,
    MixtureDataset,
    MixtureSampler,
    StateMismatchError,
)
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._mixture_dryrun import mixture_dry_run, parse_pairs
from lightning_resumable_data.lightning._checks import describe_sources

SIZES = {"web": 50, "code": 30, "math": 20, "books": 7}
BUDGET = 90
POLICY = DataChangePolicy()


def group(
    count: int,
    weights: list[float],
    world: int,
    policy: DataChangePolicy | None = POLICY,
    budget: int = BUDGET,
) -> list[MixtureSampler]:
    """Samplers over the first ``count`` sources, one per rank."""
    mix = MixtureDataset({n: range(s) for n, s in list(SIZES.items())[:count]})
    made = [
        MixtureSampler(mix, weights[:count], world, rank, seed=7, samples_per_epoch=budget)
        for rank in range(world)
    ]
    for sampler in made:
        sampler.data_changes = policy
    return made


def assert_whole_passes(ids: list[int], count: int) -> None:
    """Each of the first ``count`` sources is read as passes: once per pass, +1 if reached."""
    drawn, first = Counter(ids), 0
    for size in list(SIZES.values())[:count]:
        mine = [drawn[i] for i in range(first, first + size)]
        passes = sum(mine) // size
        assert all(passes <= n <= passes + 1 for n in mine), mine
        assert sum(n > passes for n in mine) == sum(mine) % size
        first += size


weights = st.lists(st.floats(0.0, 5.0), min_size=4, max_size=4).filter(
    lambda w: sum(w[:2]) > 0.1 and all(x == 0 or x > 1e-3 for x in w)
)


@settings(max_examples=60, deadline=None)
@given(weights, st.integers(1, 3), st.integers(1, 3), st.integers(0, 45), st.integers(3, 4))
def test_an_added_source_draws_from_the_resume_and_every_source_in_whole_passes(
    new_weights: list[float], world: int, world_after: int, steps: int, count: int
) -> None:
    before, state = read(group(2, [1.0, 1.0], world), None, steps)
    resumed = group(count, new_weights, world_after)
    rest, _ = read(resumed, state, None)
    at = state["consumed"]
    assert resumed[0].source_counts(at, 0) == {
        **state["source_counts"],
        **dict.fromkeys(list(SIZES)[2:count], 0),
    }
    assert all(i < 80 for i in before)
    assert_whole_passes(before + rest, count)
    usable = at + len(rest) if world_after == 1 else None
    if usable is not None:  # one rank: the epoch reads its whole budget
        assert usable == BUDGET
    total = sum(new_weights[:count])
    assert resumed[0].weights_at(0, at) == pytest.approx(
        {n: w / total for n, w in zip(SIZES, new_weights[:count], strict=False)}
    )
    again, _ = read(group(count, new_weights, 1), state, None)
    assert again[: len(rest)] == rest[: len(again)]  # the same addition on any layout


def test_a_resume_after_the_addition_replays_it_and_later_epochs_mix_all_sources() -> None:
    _, state = read(group(2, [1.0, 1.0], 2), None, 6)  # 12 samples read
    first = group(3, [1.0, 1.0, 2.0], 1)
    rest, middle = read(first, state, 20)
    assert middle["sources_added"] == [[0, 12, 2]]
    assert middle["fingerprint"]["sources"] == ["web", "code", "math"]
    later, _ = read(group(3, [1.0, 1.0, 2.0], 3), middle, None)
    whole, _ = read(group(3, [1.0, 1.0, 2.0], 1), state, None)  # the resumed run, on
    assert whole[:20] == rest
    assert later == whole[20 : 20 + len(later)]
    for sampler in first:
        sampler.set_epoch(1)
    epoch_1, _ = read(first, None, None)
    assert sum(i >= 80 for i in epoch_1) == 45  # math: half of the budget, exactly


def test_sources_can_be_added_twice() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    _, middle = read(group(3, [1.0, 1.0, 1.0], 1), state, 10)
    last = group(4, [1.0, 1.0, 1.0, 1.0], 1)
    rest, end = read(last, middle, 10)
    assert end["sources_added"] == [[0, 10, 2], [0, 20, 3]]
    assert any(i >= 100 for i in rest)
    replay, _ = read(group(4, [1.0, 1.0, 1.0, 1.0], 2), middle, 5)
    assert replay == rest


@pytest.mark.parametrize(
    ("policy", "match"),
    [(None, "sources"), (DataChangePolicy(sources="refuse"), "sources")],
)
def test_an_added_source_is_refused_without_a_policy_that_accepts_it(
    policy: DataChangePolicy | None, match: str
) -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    sampler = group(3, [1.0, 1.0, 1.0], 1, policy)[0]
    with pytest.raises(StateMismatchError, match=match):
        sampler.load_state_dict(state)
    assert sampler.consumed == 0
    assert "sources_added" not in sampler.state_dict()


def test_an_added_source_with_another_epoch_budget_is_refused_with_the_budget_to_keep() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    sampler = group(3, [1.0, 1.0, 1.0], 1, budget=100)[0]
    with pytest.raises(StateMismatchError, match="samples_per_epoch=90"):
        sampler.load_state_dict(state)


def test_sources_inserted_before_the_saved_ones_are_refused() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    mix = MixtureDataset({"math": range(20), "web": range(50), "code": range(30)})
    sampler = MixtureSampler(mix, [1.0, 1.0, 1.0], 1, 0, seed=7, samples_per_epoch=BUDGET)
    sampler.data_changes = DataChangePolicy()
    with pytest.raises(StateMismatchError, match="sources"):
        sampler.load_state_dict(state)


@pytest.mark.parametrize(
    "recorded", [[[0, 10, 3]], [[0, 10]], "x", [[0, 10, 1], [0, 5, 2]], [[0, -1, 2]]]
)
def test_a_malformed_addition_record_is_refused(recorded: Any) -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    _, middle = read(group(3, [1.0, 1.0, 1.0], 1), state, 5)
    sampler = group(3, [1.0, 1.0, 1.0], 1)[0]
    with pytest.raises(StateMismatchError, match="sources_added"):
        sampler.load_state_dict({**middle, "sources_added": recorded})


def test_the_dry_run_counts_each_sources_draws_left_as_the_resume_draws_them() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 12)
    planned = mixture_dry_run(
        state, {"web": 50, "code": 30, "math": 20}, {"web": 1, "code": 1, "math": 2}
    )
    rest, _ = read(group(3, [1.0, 1.0, 2.0], 1), state, None)
    bounds = {"web": (0, 50), "code": (50, 80), "math": (80, 100)}
    assert planned["left_after"] == {
        n: sum(a <= i < b for i in rest) for n, (a, b) in bounds.items()
    }
    assert planned["added"] == ["math"]
    assert planned["left_before"]["math"] == 0


def test_the_dry_run_reports_a_refusal_and_rejects_bad_arguments() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 12)
    refused = mixture_dry_run(
        state,
        {"web": 50, "code": 30, "math": 20},
        {"web": 1, "code": 1, "math": 1},
        DataChangePolicy(sources="refuse"),
    )
    assert "sources" in refused["refused"]
    with pytest.raises(CliError, match="no weight"):
        mixture_dry_run(state, {"web": 50, "code": 30, "math": 20}, None)
    with pytest.raises(CliError, match="not among the sources"):
        mixture_dry_run(state, None, {"web": 1, "code": 1, "math": 1})
    with pytest.raises(CliError, match="NAME=INT"):
        parse_pairs("web=1.5", int, "--sources")
    single = DistributedSampler(range(10), 1, 0).state_at(0, 4)
    with pytest.raises(CliError, match="mixture"):
        mixture_dry_run(single, {"web": 10}, {"web": 1})


def epoch_counts(samplers: list[MixtureSampler], epoch: int) -> list[int]:
    """Draws per source (web, code, math, books) in ``epoch``, read whole."""
    for sampler in samplers:
        sampler.set_epoch(epoch)
    drawn, _ = read(samplers, None, None)
    bounds = [0, 50, 80, 100, 107]
    return [sum(a <= i < b for i in drawn) for a, b in itertools.pairwise(bounds)]


def test_weights_changed_back_at_a_later_resume_are_the_weights_again() -> None:
    """W0 -> W1 at one resume, back to W0 at the next: the configured weights win."""
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    _, middle = read(group(2, [9.0, 1.0], 1), state, 10)
    assert middle["configured"]["weights"] == [9.0, 1.0]
    back = group(2, [1.0, 1.0], 1)
    read(back, middle, None)
    assert back[0].weights_at(0, 20) == pytest.approx({"web": 0.5, "code": 0.5})
    assert epoch_counts(back, 1)[:2] == [45, 45]
    assert "configured" not in back[0].state_at(1, 0)  # the initial weights again


def test_an_added_source_weighted_zero_at_a_later_resume_stops_drawing() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    _, middle = read(group(3, [1.0, 1.0, 1.0], 1), state, 10)
    rest, _ = read(group(3, [1.0, 1.0, 0.0], 1), middle, None)
    assert not [i for i in rest if i >= 80]  # math weighs 0 from the second resume on
    assert epoch_counts(group(3, [1.0, 1.0, 0.0], 1), 1)[2] == 0


def test_an_online_change_is_kept_by_a_resume_under_the_configured_weights() -> None:
    first = group(2, [1.0, 1.0], 1)
    read(first, None, 5)
    first[0].update_weights([1.0, 0.0], kind="online")  # decided while training
    _, state = read(first, None, 5)
    resumed = group(2, [1.0, 1.0], 1)  # the same configuration
    rest, _ = read(resumed, state, None)
    assert not [i for i in rest if i >= 50]  # code still weighs 0
    assert resumed[0].last_reweight is None


def test_a_malformed_configured_entry_is_refused() -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 10)
    _, middle = read(group(2, [9.0, 1.0], 1), state, 10)
    with pytest.raises(StateMismatchError, match="configured"):
        group(2, [9.0, 1.0], 1)[0].load_state_dict({**middle, "configured": {"weights": [1]}})


@pytest.mark.parametrize(
    ("sources", "why"),
    [
        ({"math": 20, "web": 50, "code": 30}, "another order"),
        ({"web": 50, "math": 20}, "added and"),
        ({"web": 50, "code": 29}, "changed size"),
    ],
)
def test_the_dry_run_refuses_what_a_datamodule_refuses(sources: dict[str, int], why: str) -> None:
    _, state = read(group(2, [1.0, 1.0], 1), None, 12)
    weights = dict.fromkeys(sources, 1.0)
    assert why in mixture_dry_run(state, sources, weights)["refused"]


@pytest.mark.parametrize(
    ("text", "kind", "match"),
    [
        ("web=-1", float, "finite value >= 0"),
        ("web=nan", float, "finite value >= 0"),
        ("web=inf", float, "finite value >= 0"),
        ("web=1,web=2", float, "twice"),
        ("web", int, "NAME=INT"),
    ],
)
def test_bad_dry_run_arguments_say_what_is_wrong(text: str, kind: type, match: str) -> None:
    with pytest.raises(CliError, match=match):
        parse_pairs(text, kind, "--weights")


@pytest.mark.parametrize(
    ("now", "hint"),
    [
        ({"math": 1, "web": 4, "code": 2}, "appended after the saved ones"),
        ({"web": 4, "math": 1}, "two resumes"),
        ({"web": 4, "code": 3}, "changed size"),
    ],
)
def test_a_refused_change_of_the_sources_says_what_would_resume_exactly(
    now: dict[str, int], hint: str
) -> None:
    assert hint in describe_sources({"web": 4, "code": 2}, now)
