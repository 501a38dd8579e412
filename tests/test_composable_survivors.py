"""The composable samplers' promises that their surviving mutants showed untested (issue 23)."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

from lightning_resumable_data import (
    RepeatBatchSampler,
    RepeatSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    ResumableSequentialSampler,
    ResumeWarning,
    ShardSampler,
    SkipSampler,
    StatefulDataLoader,
)
from lightning_resumable_data.index.keys import key_rng
from lightning_resumable_data.samplers._inner import chunks_of
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


def repeated_shuffles(n: int, seed: int, epoch: int, count: int) -> list[int]:
    """The first ``count`` items of a repeat over a shuffle: pass ``p`` at epoch ``epoch + p``."""
    stream = itertools.chain.from_iterable(shuffled(n, seed, epoch + p) for p in itertools.count())
    return take(stream, count)


def shard_of_shuffle() -> AnySampler:
    """A chain of three stateful levels: shard, shuffle, sequential."""
    return ShardSampler(ReproducibleShuffleSampler(ResumableSequentialSampler(range(12)), 3), 2, 0)


def repeat_of_shuffle() -> AnySampler:
    return RepeatSampler(ReproducibleShuffleSampler(ResumableSequentialSampler(range(10)), 3))


# --- position ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ReproducibleShuffleSampler(range(10), 1),
        lambda: ShardSampler(range(20), 2, 1),
        lambda: SkipSampler(range(10), 0),
        lambda: RepeatSampler(range(10)),
    ],
    ids=["shuffle", "shard", "skip", "repeat"],
)
def test_position_counts_the_items_taken_from_a_fresh_iteration(
    build: Callable[[], AnySampler],
) -> None:
    """``position`` is the own items of the current iteration consumed, 0 before the first."""
    sampler = build()
    assert sampler.position == 0
    iterator = iter(sampler)
    for taken in range(1, 6):
        next(iterator)
        assert sampler.position == taken


def test_a_restored_repeats_position_counts_on_from_the_restored_offset() -> None:
    """A repeat restored at offset 3 is at position 4 after one more item, as a shuffle is."""
    repeat = RepeatSampler(range(10))
    iterator = iter(repeat)
    take(iterator, 3)
    resumed = RepeatSampler(range(10))
    resumed.load_state_dict(roundtrip(repeat.state_dict()))
    assert resumed.position == 3
    next(iter(resumed))
    assert resumed.position == 4


# --- set_epoch ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "error", "match"),
    [(-1, ValueError, r"^epoch=-1 must be >= 0"), (1.5, TypeError, r"^epoch=1.5 must be an int")],
)
def test_set_epoch_refuses_a_bad_epoch_by_name_and_changes_nothing(
    epoch: Any, error: type[Exception], match: str
) -> None:
    """A composable sampler's ``set_epoch`` names ``epoch`` in its error; nothing moves."""
    sampler = shard_of_shuffle()
    with pytest.raises(error, match=match):
        sampler.set_epoch(epoch)
    assert sampler.epoch == 0
    assert list(sampler) == shuffled(12, 3, 0)[0::2]


def test_a_state_saved_after_set_epoch_resumes_the_new_epoch_from_its_start() -> None:
    """Moving to another epoch mid-iteration, then saving: the resume reads the new epoch."""
    sampler = shard_of_shuffle()
    take(iter(sampler), 3)
    sampler.set_epoch(1)
    resumed = shard_of_shuffle()
    resumed.load_state_dict(roundtrip(sampler.state_dict()))
    expected = shuffled(12, 3, 1)[0::2]
    assert list(resumed) == expected
    assert list(sampler) == expected


def test_a_returned_state_is_a_snapshot_the_caller_may_change() -> None:
    """Editing a state ``state_dict`` returned changes neither later states nor the resume."""
    sampler = shard_of_shuffle()
    iterator = iter(sampler)
    take(iterator, 2)
    mine = sampler.state_dict()
    pristine = json.loads(json.dumps(mine))
    mine["inner"]["inner"]["index"] = 5  # the caller's copy, e.g. a migrated checkpoint
    mine["inner"]["fingerprint"]["seed"] = 4
    later = sampler.state_dict()
    assert later == pristine
    resumed = shard_of_shuffle()
    resumed.load_state_dict(later)
    assert list(resumed) == list(iterator) == shuffled(12, 3, 0)[0::2][2:]


# --- shuffle -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "items"),
    [
        (ReproducibleShuffleSampler, list(range(5))),
        (ReproducibleShuffleBatchSampler, [[i] for i in range(5)]),
    ],
    ids=["index", "batch"],
)
def test_a_shuffle_seed_must_be_below_2_64(
    build: Callable[[Any, int], AnySampler], items: list[Any]
) -> None:
    """``seed`` is an int in ``[0, 2**64)``: ``2**64 - 1`` shuffles, ``2**64`` is refused."""
    assert sorted(build(items, 2**64 - 1)) == items
    with pytest.raises(ValueError, match=r"seed=18446744073709551616 must be < 2\*\*64"):
        build(items, 2**64)


def test_a_shuffle_yields_int_indices_a_list_dataset_accepts() -> None:
    """The indices are Python ints (the documented order), so any map-style dataset takes them."""
    dataset = [f"sample {i}" for i in range(9)]
    indices = list(ReproducibleShuffleSampler(ResumableSequentialSampler(dataset), 5))
    assert indices == shuffled(9, 5, 0)
    assert all(type(index) is int for index in indices)
    assert [dataset[i] for i in indices] == [f"sample {i}" for i in shuffled(9, 5, 0)]


# --- repeat ------------------------------------------------------------------------------


def test_each_iteration_of_a_repeat_starts_at_its_first_pass() -> None:
    """A new ``__iter__`` (no state loaded) starts the repeat's epoch again, at pass 0."""
    repeat = repeat_of_shuffle()
    assert take(iter(repeat), 13) == repeated_shuffles(10, 3, 0, 13)
    assert take(iter(repeat), 13) == repeated_shuffles(10, 3, 0, 13)
    repeat.set_epoch(2)
    assert {k: repeat.state_dict()[k] for k in ("epoch", "pass", "offset")} == {
        "epoch": 2,
        "pass": 0,
        "offset": 0,
    }
    assert take(iter(repeat), 13) == repeated_shuffles(10, 3, 2, 13)


@pytest.mark.parametrize("build", [RepeatSampler, RepeatBatchSampler])
def test_a_skip_into_an_empty_repeat_is_refused_naming_the_sampler(
    build: Callable[[Any], AnySampler],
) -> None:
    """``set_skip`` counts passes of ``len`` items: an empty inner cannot be skipped into."""
    repeat = build([])
    repeat.set_skip(1)
    match = rf"^{build.__name__} cannot skip in an empty sampler"
    with pytest.raises(ValueError, match=match):
        repeat.state_dict()
    with pytest.raises(ValueError, match=match):
        next(iter(repeat))


# --- chunks ------------------------------------------------------------------------------


def test_a_wrapper_reads_its_inner_in_chunks_of_8_doubling_to_1024() -> None:
    """``chunks_of``: lists of 8, 16, ... up to 1024 items, the last one shorter."""
    sizes = [len(chunk) for chunk in chunks_of(iter(range(5000)))]
    assert sizes == [8, 16, 32, 64, 128, 256, 512, 1024, 1024, 1024, 912]
    assert [len(chunk) for chunk in chunks_of(iter(range(20)))] == [8, 12]
    assert list(chunks_of(iter(()))) == []


# --- bugs: a state saved while an inner sampler still has a live iteration ---------------


def test_a_state_saved_before_the_first_next_resumes_the_new_iteration() -> None:
    """A state taken after ``iter()`` and before ``next()`` resumes that iteration exactly."""

    def build() -> ReproducibleShuffleSampler:
        return ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), 0)

    sampler = build()
    assert list(sampler) == shuffled(6, 0, 0)
    iterator = iter(sampler)  # torch's DataLoader makes its sampler iterator up front
    resumed = build()
    resumed.load_state_dict(roundtrip(sampler.state_dict()))
    assert list(iterator) == shuffled(6, 0, 0)
    assert list(resumed) == shuffled(6, 0, 0)


def test_a_repeat_saved_after_set_epoch_resumes_its_first_pass_whole() -> None:
    """A repeat moved to epoch 1 in its pass 1, then saved, resumes at pass 0 of epoch 1."""
    repeat = repeat_of_shuffle()
    take(iter(repeat), 13)  # pass 1: the inner shuffle is live at epoch 1
    repeat.set_epoch(1)
    resumed = repeat_of_shuffle()
    resumed.load_state_dict(roundtrip(repeat.state_dict()))
    expected = repeated_shuffles(10, 3, 1, 15)
    assert take(iter(repeat), 15) == expected
    assert take(iter(resumed), 15) == expected


def test_a_loader_over_a_repeat_resumes_an_epoch_begun_mid_pass() -> None:
    """A loader resumed in an epoch that began while the repeat's inner was mid-pass."""
    data = list(range(10))

    def build() -> StatefulDataLoader[Any]:
        return StatefulDataLoader(data, batch_size=2, sampler=repeat_of_shuffle())

    loader = build()
    take(iter(loader), 6)  # 12 samples: epoch 0 ends in the repeat's pass 1
    live = iter(loader)  # a new pass: epoch 1
    take(live, 2)
    resumed = build()
    resumed.load_state_dict(roundtrip(loader.state_dict()))
    expected = [batch.tolist() for batch in take(live, 5)]
    assert [batch.tolist() for batch in take(iter(resumed), 5)] == expected


def test_a_repeat_saved_after_set_epoch_resumes_without_a_warning() -> None:
    """A repeat moved to another epoch and saved resumes that epoch, warning nothing."""
    repeat = RepeatSampler(ResumableSequentialSampler(range(10)))
    take(iter(repeat), 13)
    repeat.set_epoch(5)
    resumed = RepeatSampler(ResumableSequentialSampler(range(10)))
    resumed.load_state_dict(roundtrip(repeat.state_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResumeWarning)
        assert take(iter(resumed), 12) == [*range(10), 0, 1]
