"""ResumableSequentialSampler: one-shot start index, O(1) position, exact resume."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import (
    STATE_VERSION,
    ResumableSequentialSampler,
    ResumeWarning,
    StateMismatchError,
)


def take(sampler: ResumableSequentialSampler, count: int) -> tuple[list[int], Any]:
    """Start an iteration, read ``count`` items, return them and the live iterator."""
    iterator = iter(sampler)
    return list(itertools.islice(iterator, count)), iterator


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(state))
    return loaded


def test_start_index_applies_to_the_first_iteration_only() -> None:
    sampler = ResumableSequentialSampler(range(6), start_index=4)
    assert len(sampler) == 6
    assert list(sampler) == [4, 5]
    assert list(sampler) == [0, 1, 2, 3, 4, 5]
    assert list(sampler) == [0, 1, 2, 3, 4, 5]


def test_start_index_at_the_end_yields_nothing_once() -> None:
    sampler = ResumableSequentialSampler(range(3), start_index=3)
    assert list(sampler) == []
    assert list(sampler) == [0, 1, 2]


def test_a_discarded_iterator_does_not_use_up_the_start_index() -> None:
    # torch's multi-worker DataLoader calls iter() on its batch sampler twice.
    sampler = ResumableSequentialSampler(range(5), start_index=2)
    iter(sampler)
    assert list(sampler) == [2, 3, 4]


def test_index_counts_what_the_live_iterator_yielded() -> None:
    sampler = ResumableSequentialSampler(range(10), start_index=3)
    assert sampler.state_dict()["index"] == 3
    iterator = iter(sampler)
    assert sampler.index == 3
    assert [next(iterator) for _ in range(4)] == [3, 4, 5, 6]
    assert sampler.state_dict() == {
        "version": STATE_VERSION,
        "kind": "ResumableSequentialSampler",
        "fingerprint": {"dataset_length": 10},
        "epoch": 0,
        "index": 7,
    }
    assert list(iterator) == [7, 8, 9]
    assert sampler.index == 10


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    data=st.data(),
)
def test_restore_continues_the_uninterrupted_stream(n: int, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, n), label="start")
    count = data.draw(st.integers(0, n - start), label="count")
    sampler = ResumableSequentialSampler(range(n), start_index=start)
    seen, iterator = take(sampler, count)
    assert seen == list(range(start, start + count))
    state = roundtrip(sampler.state_dict())
    assert state["index"] == start + count

    resumed = ResumableSequentialSampler(range(n))
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert list(resumed) == list(iterator)
    assert list(resumed) == list(range(n))  # the restored position is one-shot


def test_end_of_epoch_state_resumes_to_an_empty_iteration_then_a_full_one() -> None:
    sampler = ResumableSequentialSampler(range(4))
    assert list(sampler) == [0, 1, 2, 3]
    state = sampler.state_dict()
    assert state["index"] == 4
    resumed = ResumableSequentialSampler(range(4))
    resumed.load_state_dict(state)
    assert list(resumed) == []
    assert list(resumed) == [0, 1, 2, 3]


def test_set_skip_is_one_shot_and_adds_to_a_restored_position() -> None:
    sampler = ResumableSequentialSampler(range(10))
    sampler.set_skip(3)
    assert sampler.index == 3
    assert list(sampler) == list(range(3, 10))
    assert list(sampler) == list(range(10))

    sampler.load_state_dict(ResumableSequentialSampler(range(10), start_index=2).state_dict())
    sampler.set_skip(5)
    assert list(sampler) == [7, 8, 9]
    sampler.set_skip(50)  # past the end: nothing left this time
    assert list(sampler) == []


def test_set_epoch_keeps_a_restored_position_for_the_same_epoch() -> None:
    sampler = ResumableSequentialSampler(range(6))
    sampler.set_epoch(2)
    take(sampler, 4)
    state = sampler.state_dict()
    assert (state["epoch"], state["index"]) == (2, 4)

    resumed = ResumableSequentialSampler(range(6))
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # what Lightning does at the start of the resumed epoch
    assert list(resumed) == [4, 5]
    resumed.set_epoch(3)
    assert resumed.state_dict()["epoch"] == 3
    assert list(resumed) == list(range(6))


def test_set_epoch_to_another_epoch_discards_a_restored_position_with_a_warning() -> None:
    sampler = ResumableSequentialSampler(range(6))
    sampler.load_state_dict(ResumableSequentialSampler(range(6), start_index=4).state_dict())
    with pytest.warns(ResumeWarning, match=r"set_epoch\(1\) discards the restored position"):
        sampler.set_epoch(1)
    assert sampler.state_dict()["index"] == 0
    assert list(sampler) == list(range(6))


def test_set_epoch_before_the_first_iteration_keeps_the_start_index() -> None:
    sampler = ResumableSequentialSampler(range(6), start_index=4)
    sampler.set_epoch(3)  # Lightning calls set_epoch(current_epoch) before iterating
    assert sampler.epoch == 3
    assert list(sampler) == [4, 5]


def test_iterates_lazily_over_a_huge_dataset() -> None:
    sampler = ResumableSequentialSampler(range(10**12), start_index=10**12 - 2)
    assert list(iter(sampler)) == [10**12 - 2, 10**12 - 1]  # list(sampler) would use len()
    assert sampler.index == 10**12


@pytest.mark.parametrize(
    ("data_source", "start_index", "error", "match"),
    [
        (range(5), 6, ValueError, r"start_index=6 must be <= len\(data_source\)=5"),
        (range(5), -1, ValueError, r"start_index=-1 must be >= 0"),
        (range(5), 1.5, TypeError, r"start_index=1.5 must be an int"),
        (range(5), True, TypeError, r"start_index=True must be an int"),
        (range(0), 0, ValueError, r"empty dataset"),
        (iter(range(5)), 0, TypeError, r"needs a map-style dataset with __len__"),
    ],
)
def test_bad_arguments_raise(
    data_source: Any, start_index: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        ResumableSequentialSampler(data_source, start_index)


def test_bad_set_skip_and_set_epoch_raise() -> None:
    sampler = ResumableSequentialSampler(range(5))
    with pytest.raises(ValueError, match=r"samples=-2 must be >= 0"):
        sampler.set_skip(-2)
    with pytest.raises(ValueError, match=r"epoch=-1 must be >= 0"):
        sampler.set_epoch(-1)
    assert list(sampler) == list(range(5))


def _state(**changes: Any) -> dict[str, Any]:
    state = ResumableSequentialSampler(range(10), start_index=2).state_dict()
    state.update(changes)
    return state


@pytest.mark.parametrize(
    ("state", "match"),
    [
        (_state(fingerprint={"dataset_length": 11}), r"dataset_length: saved 11, now 10"),
        (_state(index=11), r"index=11 is past the end of a dataset of 10 samples"),
        (_state(index=-1), r"'index'=-1 must be >= 0"),
        (_state(index="3"), r"key 'index' is '3'; expected int"),
        (_state(kind="DistributedSampler"), r"written by kind='DistributedSampler'"),
        (_state(version=99), r"version=99"),
        (
            {"version": STATE_VERSION, "kind": "ResumableSequentialSampler"},
            r"no 'fingerprint' dict",
        ),
    ],
)
def test_a_refused_state_leaves_the_sampler_untouched(state: dict[str, Any], match: str) -> None:
    sampler = ResumableSequentialSampler(range(10))
    sampler.set_epoch(1)
    sampler.set_skip(4)
    before = sampler.state_dict()
    with pytest.raises(StateMismatchError, match=match):
        sampler.load_state_dict(state)
    assert sampler.state_dict() == before
    assert list(sampler) == list(range(4, 10))


def test_load_rejects_a_non_mapping() -> None:
    sampler = ResumableSequentialSampler(range(3))
    with pytest.raises(TypeError, match=r"expected a dict"):
        sampler.load_state_dict([1, 2])  # type: ignore[arg-type]


def test_works_under_a_multi_worker_data_loader() -> None:
    sampler = ResumableSequentialSampler(range(10), start_index=3)
    dataset = torch.utils.data.TensorDataset(torch.arange(100, 110))
    loader = torch.utils.data.DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=2)
    batches = [batch.tolist() for (batch,) in loader]
    assert batches == [[103, 104, 105], [106, 107, 108], [109]]
    assert sampler.index == 10


# Found by mutation testing of samplers/ (tests/MUTATION.md): the attributes llm-pytorch's
# sampler has, and the class named in the errors of its constructor.


def test_keeps_llm_pytorchs_attributes() -> None:
    """data_length and start_index are the constructor's, as on llm-pytorch's sampler."""
    sampler = ResumableSequentialSampler(range(6), start_index=4)
    assert (sampler.data_length, sampler.start_index) == (6, 4)
    assert list(sampler) == [4, 5]
    assert (sampler.data_length, sampler.start_index) == (6, 4)


@pytest.mark.parametrize(
    ("data_source", "match"),
    [
        (iter(range(5)), r"^ResumableSequentialSampler needs a map-style dataset with __len__"),
        (range(0), r"^ResumableSequentialSampler got an empty dataset"),
    ],
)
def test_errors_about_the_data_source_name_the_sampler(data_source: Any, match: str) -> None:
    """An unsized or empty data source is refused by an error that names the sampler."""
    with pytest.raises((TypeError, ValueError), match=match):
        ResumableSequentialSampler(data_source)
