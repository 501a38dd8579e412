"""The resume strategies (position, skip, torchdata) against oracles outside the package.

The oracles: torchdata's own ``StatefulDataLoader`` (its uninterrupted reading, or its own
resume of a state it saved), an uninterrupted run, and the documented order of
``DistributedSampler`` (torch's ``randperm``) strided over the ranks.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils.data
from loader_helpers import IndexDataset, as_ids, documented_order, make_loader, run_epochs
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from lightning_resumable_data import (
    DistributedSampler,
    ReproducibleShuffleBatchSampler,
    ReproducibleShuffleSampler,
    StatefulDataLoader,
    StateMismatchError,
)
from lightning_resumable_data.loader import RestoredPosition

N, BATCH, EPOCH = 50, 4, 3  # 13 batches an epoch on one rank, the last one short


def ids(batches: Any) -> list[list[int]]:
    return [torch.as_tensor(batch).tolist() for batch in batches]


class EpochlessSkipSampler(torch.utils.data.Sampler[int]):
    """A skippable sampler with no ``epoch`` attribute: a shuffle of ``range(n)`` per epoch."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self._epoch, self._skip = n, seed, 0, 0

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def set_skip(self, samples: int) -> None:
        self._skip = samples

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        skip, self._skip = self._skip, 0
        return iter(documented_order(self.n, self.seed, self._epoch)[skip:])


def torchdata_state(
    loader: TorchdataLoader[Any], k: int, finished: bool
) -> tuple[list[list[int]], dict[str, Any]]:
    """torchdata's reading of one pass, and its state after ``k`` batches (or exhausted)."""
    it = iter(loader)
    seen = ids(itertools.islice(it, k))
    if finished:
        seen += ids(it)  # to StopIteration: torchdata marks the pass finished
    return seen, loader.state_dict()


def torchdata_epoch(sampler: Any, epoch: int, **kwargs: Any) -> list[list[int]]:
    """One epoch as torchdata's loader reads it, the job calling ``set_epoch`` first."""
    sampler.set_epoch(epoch)
    return ids(TorchdataLoader(IndexDataset(N), BATCH, sampler=sampler, **kwargs))


# (num_workers, snapshot_every_n_steps, batches read, exhausted): 4 batches with a
# snapshot every 3 is saved between snapshots (one step since the last); 12 is the last
# batch but one; 13 reads the whole epoch without exhausting it; finished exhausts it.
TORCHDATA_STATES = [
    (0, 1, 4, False),
    (2, 3, 4, False),
    (0, 1, 12, False),
    (2, 3, 13, False),
    (0, 1, 13, True),
    (2, 3, 13, True),
]


@pytest.mark.parametrize(("num_workers", "every", "k", "finished"), TORCHDATA_STATES)
@pytest.mark.parametrize("mode", ["position", "skip"])
def test_a_torchdata_state_resumes_the_rest_of_the_epoch_and_the_next(
    mode: str, num_workers: int, every: int, k: int, finished: bool
) -> None:
    """A torchdata-saved state continues where torchdata would have, then the next epoch."""

    def samplers() -> tuple[Any, Any]:  # (torchdata job's sampler, ours)
        if mode == "position":
            theirs: Any = torch.utils.data.DistributedSampler(IndexDataset(N), 1, 0, seed=7)
            return theirs, DistributedSampler(IndexDataset(N), 1, 0, seed=7)
        return ReproducibleShuffleSampler(range(N), 7), ReproducibleShuffleSampler(range(N), 7)

    kwargs: dict[str, Any] = {"num_workers": num_workers, "snapshot_every_n_steps": every}
    full = torchdata_epoch(samplers()[0], EPOCH, **kwargs)
    following = torchdata_epoch(samplers()[0], EPOCH + 1, **kwargs)
    theirs, ours_sampler = samplers()
    theirs.set_epoch(EPOCH)
    saver = TorchdataLoader(IndexDataset(N), BATCH, sampler=theirs, **kwargs)
    seen, state = torchdata_state(saver, k, finished)
    assert seen == full[: len(seen)]
    ours_sampler.set_epoch(EPOCH)  # torchdata states hold no epoch: the job sets it
    ours = StatefulDataLoader(IndexDataset(N), BATCH, sampler=ours_sampler, **kwargs)
    ours.load_state_dict(state)
    assert ours.resume_mode == mode
    if finished or (mode == "position" and k == len(full)):
        assert (ours.epoch, ours.batches_yielded) == (EPOCH + 1, 0)
        assert ours.state_dict()["batches_yielded"] == 0
    else:
        assert (ours.epoch, ours.batches_yielded) == (EPOCH, k)
    assert run_epochs(ours, EPOCH + 2) == full[len(seen) :] + following


@pytest.mark.parametrize("finished", [False, True])
def test_a_torchdata_state_resumes_a_sampler_without_an_epoch_in_the_loaders_epoch(
    finished: bool,
) -> None:
    """A skip sampler with no ``epoch`` attribute resumes in the epoch set on the loader."""
    full = torchdata_epoch(EpochlessSkipSampler(N, 2), EPOCH)
    following = torchdata_epoch(EpochlessSkipSampler(N, 2), EPOCH + 1)
    theirs = EpochlessSkipSampler(N, 2)
    theirs.set_epoch(EPOCH)
    seen, state = torchdata_state(
        TorchdataLoader(IndexDataset(N), BATCH, sampler=theirs), 5, finished
    )
    ours = StatefulDataLoader(IndexDataset(N), BATCH, sampler=EpochlessSkipSampler(N, 2))
    assert ours.resume_mode == "skip"
    ours.set_epoch(EPOCH)
    ours.load_state_dict(state)
    assert ours.epoch == (EPOCH + 1 if finished else EPOCH)
    assert run_epochs(ours, EPOCH + 2) == full[len(seen) :] + following


@pytest.mark.parametrize(("num_workers", "every", "k", "finished"), TORCHDATA_STATES)
def test_a_torchdata_state_in_torchdata_mode_resumes_as_torchdata_does(
    num_workers: int, every: int, k: int, finished: bool
) -> None:
    """In torchdata mode a torchdata-saved state reads what torchdata's own resume reads."""

    def build(cls: type) -> Any:
        sampler = torch.utils.data.SequentialSampler(IndexDataset(N))
        return cls(
            IndexDataset(N),
            BATCH,
            sampler=sampler,
            num_workers=num_workers,
            snapshot_every_n_steps=every,
        )

    _, state = torchdata_state(build(TorchdataLoader), k, finished)
    theirs, ours = build(TorchdataLoader), build(StatefulDataLoader)
    theirs.load_state_dict(state)
    ours.load_state_dict(state)
    assert ours.resume_mode == "torchdata"
    assert ids(ours) == ids(theirs)
    assert ids(ours) == ids(theirs)  # and the pass after it


@pytest.mark.parametrize(
    "state",
    [
        {"_num_yielded": -1, "_iterator_finished": False},
        {"_num_yielded": 2.5, "_iterator_finished": False},
        {"_num_yielded": True, "_iterator_finished": False},
        {"_snapshot": {"_snapshot_step": 2}, "_steps_since_snapshot": -3},
        {"_snapshot": {"_snapshot_step": 2.5}, "_steps_since_snapshot": 0},
        {"_snapshot": {"_snapshot_step": "3"}, "_steps_since_snapshot": 0},
        {"_snapshot": {"_snapshot_step": None}, "_steps_since_snapshot": 0},
        {"_snapshot": {"_snapshot_step": True}, "_steps_since_snapshot": 0},
        {"_snapshot": {"_snapshot_step": 2}, "_steps_since_snapshot": False},
    ],
)
def test_a_torchdata_state_with_a_corrupted_batch_count_is_refused(state: dict[str, Any]) -> None:
    """A torchdata-layout state whose batch count is not a non-negative int is refused."""
    loader = make_loader(n=N, batch_size=BATCH)
    with pytest.raises(StateMismatchError):
        loader.load_state_dict(state)
    assert (loader.epoch, loader.batches_yielded) == (0, 0)


def test_skip_sampler_reads_each_epochs_order_as_a_torchdata_job() -> None:
    """Skip mode sets the sampler's epoch: each epoch's order is the one set_epoch(e) gives."""
    sampler = ReproducibleShuffleSampler(range(N), 3)
    expected = [b for e in range(3) for b in torchdata_epoch(sampler, e)]
    ours = StatefulDataLoader(
        IndexDataset(N), BATCH, sampler=ReproducibleShuffleSampler(range(N), 3)
    )
    assert ours.resume_mode == "skip"
    assert run_epochs(ours, 3) == expected


@pytest.mark.parametrize("k", [13, 13 + 5])  # at the end of epoch 0; within epoch 1
def test_skip_mode_resumes_at_an_epoch_boundary_and_in_a_later_epoch(k: int) -> None:
    """A skip-mode state saved at an epoch's end, or in epoch 1, resumes exactly."""

    def make() -> StatefulDataLoader:
        sampler = ReproducibleShuffleSampler(range(N), 3)
        return StatefulDataLoader(IndexDataset(N), BATCH, sampler=sampler)

    sampler = ReproducibleShuffleSampler(range(N), 3)
    expected = [b for e in range(3) for b in torchdata_epoch(sampler, e)]
    loader = make()
    seen = run_epochs(loader, 1)  # exhausted: the loader is at epoch 1, not reading
    it = iter(loader)
    seen += as_ids(itertools.islice(it, k - len(seen)))
    state = json.loads(json.dumps(loader.state_dict()))
    assert (state["epoch"], state["batches_yielded"]) == (1, k - 13)
    resumed = make()
    resumed.load_state_dict(state)
    assert seen + run_epochs(resumed, 3) == expected


@pytest.mark.parametrize("k", [1, 5])
def test_a_custom_batch_sampler_resumes_by_skipping_batches(k: int) -> None:
    """A custom ``batch_sampler`` with ``set_skip`` resumes after exactly ``k`` batches."""

    def make() -> StatefulDataLoader:
        batches = torch.utils.data.BatchSampler(range(30), 3, drop_last=False)
        return StatefulDataLoader(
            IndexDataset(30), batch_sampler=ReproducibleShuffleBatchSampler(batches, 1)
        )

    sampler = ReproducibleShuffleBatchSampler(
        torch.utils.data.BatchSampler(range(30), 3, drop_last=False), 1
    )
    expected = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        expected += ids(TorchdataLoader(IndexDataset(30), batch_sampler=sampler))
    loader = make()
    assert loader.resume_mode == "skip"
    seen = as_ids(itertools.islice(iter(loader), k))
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(loader.state_dict())))
    assert seen + run_epochs(resumed, 2) == expected


@pytest.mark.parametrize("key", ["consumed", "epoch"])
def test_a_state_whose_sampler_part_disagrees_with_its_position_is_refused(key: str) -> None:
    """A state whose sampler part differs from its position in epoch or consumed is refused."""
    loader = make_loader(n=N, batch_size=BATCH)
    next(iter(loader))
    next(iter(loader))  # a new pass: epoch 1, one batch in
    state = json.loads(json.dumps(loader.state_dict()))
    assert (state["epoch"], state["consumed"]) == (1, BATCH)
    state["sampler"][key] += 1 if key == "epoch" else BATCH  # the other entry still agrees
    resumed = make_loader(n=N, batch_size=BATCH)
    with pytest.raises(StateMismatchError, match="disagree"):
        resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.batches_yielded) == (0, 0)


@pytest.mark.parametrize(("drop_last", "batches"), [(False, 3), (True, 2)])
def test_a_state_at_the_epochs_last_batch_is_the_next_epochs_start(
    drop_last: bool, batches: int
) -> None:
    """After an epoch's last batch (iterator not exhausted) the state is epoch + 1, batch 0."""
    loader = make_loader(n=10, batch_size=4, drop_last=drop_last)
    seen = as_ids(itertools.islice(iter(loader), batches))
    assert len(seen) == len(loader)
    assert loader.ends_epoch(min(batches * 4, 10))
    state = loader.state_dict()
    assert (state["epoch"], state["consumed"], state["batches_yielded"]) == (1, 0, 0)
    resumed = make_loader(n=10, batch_size=4, drop_last=drop_last)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    uninterrupted = run_epochs(make_loader(n=10, batch_size=4, drop_last=drop_last), 2)
    assert as_ids(resumed) == uninterrupted[len(seen) :]


def limited_rank_batches(
    epoch: int, world: int, rank: int, start: int, limit: int
) -> list[list[int]]:
    """Rank ``rank``'s batches of positions ``[start, limit)`` of the documented order."""
    order = documented_order(N, 5, epoch)
    mine = [order[p] for p in range(start + rank, limit, world)]
    return [mine[i : i + BATCH] for i in range(0, len(mine), BATCH)]


@pytest.mark.parametrize("limit", [29, 2])  # ranks end at 10, 10, 9 samples; at 1, 1, 0
def test_an_epoch_limit_over_several_ranks_reads_the_positions_before_it(limit: int) -> None:
    """With set_epoch_limit each rank reads its share of the positions below the limit."""
    world = 3
    for rank in range(world):
        loader = make_loader(n=N, world=world, rank=rank, batch_size=BATCH, seed=5)
        loader.set_epoch_limit(limit)
        expected = [b for e in range(2) for b in limited_rank_batches(e, world, rank, 0, limit)]
        assert run_epochs(loader, 2) == expected, rank


@pytest.mark.parametrize("limit", [25, 29])
def test_an_epoch_limit_resumed_on_several_ranks_ends_where_the_run_would(limit: int) -> None:
    """A resume two steps in reads, on each rank, the rest of its share below the limit."""
    world = 3
    saver = make_loader(n=N, world=world, rank=0, batch_size=BATCH, seed=5)
    saver.set_epoch_limit(limit)
    seen = as_ids(itertools.islice(iter(saver), 2))
    state = json.loads(json.dumps(saver.state_dict()))
    assert state["consumed"] == 2 * BATCH * world
    assert seen == limited_rank_batches(0, world, 0, 0, limit)[:2]
    for rank in range(world):
        loader = make_loader(n=N, world=world, rank=rank, batch_size=BATCH, seed=5)
        loader.set_epoch_limit(limit)
        loader.load_state_dict(state)
        rest = limited_rank_batches(0, world, rank, 24, limit)
        expected = rest + limited_rank_batches(1, world, rank, 0, limit)
        assert run_epochs(loader, 2) == expected, rank


def test_a_state_at_an_epoch_limit_is_the_next_epochs_start() -> None:
    """Once a rank has read its share below the limit, the state points at the next epoch."""
    world, limit = 3, 29
    for rank in range(world):
        loader = make_loader(n=N, world=world, rank=rank, batch_size=BATCH, seed=5)
        loader.set_epoch_limit(limit)
        assert loader.ends_epoch(limit)
        assert not loader.ends_epoch(limit - 1)
        share = limited_rank_batches(0, world, rank, 0, limit)
        assert as_ids(itertools.islice(iter(loader), len(share))) == share
        state = loader.state_dict()
        assert (state["epoch"], state["consumed"], state["batches_yielded"]) == (1, 0, 0)


def test_a_position_restore_keeps_the_batches_yielded() -> None:
    """A state loaded and saved again before reading is the same state."""
    loader = make_loader(n=N, batch_size=BATCH)
    as_ids(itertools.islice(iter(loader), 5))
    saved = json.loads(json.dumps(loader.state_dict()))
    resumed = make_loader(n=N, batch_size=BATCH)
    resumed.load_state_dict(saved)
    assert resumed.batches_yielded == 5
    assert resumed.state_dict() == saved


def test_handed_batches_are_reported_in_order() -> None:
    """take_handed gives where each batch handed out begins, oldest first, then None."""
    loader = make_loader(n=N, world=2, batch_size=BATCH)
    as_ids(itertools.islice(iter(loader), 3))
    taken = [loader.take_handed() for _ in range(4)]
    assert [None if t is None else tuple(t) for t in taken] == [(0, 0), (0, 8), (0, 16), None]


def torchdata_mode_loader(num_workers: int = 0) -> StatefulDataLoader:
    generator = torch.Generator().manual_seed(0)
    sampler = torch.utils.data.RandomSampler(IndexDataset(N), generator=generator)
    return StatefulDataLoader(IndexDataset(N), BATCH, sampler=sampler, num_workers=num_workers)


def replay_warnings_of_two_loads(loader: StatefulDataLoader, state: dict[str, Any]) -> list[Any]:
    """The categories of the replay warnings ``state`` loaded twice into ``loader`` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader.load_state_dict(state)
        loader.load_state_dict(state)
    return [w.category for w in caught if "replays the sampler" in str(w.message)]


def test_torchdata_mode_warns_once_and_keeps_the_epoch_and_batches() -> None:
    """torchdata mode: the replay warning comes once; a reload keeps epoch and batches."""
    loader = torchdata_mode_loader()
    as_ids(loader)
    as_ids(loader)
    as_ids(itertools.islice(iter(loader), 3))
    state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (2, 3)
    resumed = torchdata_mode_loader()
    assert replay_warnings_of_two_loads(resumed, state) == [UserWarning]
    assert (resumed.epoch, resumed.batches_yielded) == (2, 3)
    again = resumed.state_dict()
    assert (again["epoch"], again["batches_yielded"]) == (2, 3)


def test_a_state_torchdatas_own_loader_saved_warns_of_the_replay_once() -> None:
    """torchdata's own state loaded in torchdata mode replays the sampler too: warned once."""
    generator = torch.Generator().manual_seed(0)
    sampler = torch.utils.data.RandomSampler(IndexDataset(N), generator=generator)
    saver = TorchdataLoader(IndexDataset(N), BATCH, sampler=sampler)
    as_ids(itertools.islice(iter(saver), 3))
    state = saver.state_dict()
    resumed = torchdata_mode_loader()
    assert replay_warnings_of_two_loads(resumed, state) == [UserWarning]


def test_a_torchdata_mode_state_in_the_earlier_nested_layout_still_loads() -> None:
    """A torchdata-mode state with torchdata's part nested under "torchdata" still loads."""
    loader = torchdata_mode_loader()
    as_ids(itertools.islice(iter(loader), 4))
    flat = loader.state_dict()
    ours = (
        *("version", "kind", "fingerprint", "epoch", "batches_yielded", "batch_size"),
        "num_replicas",
    )
    nested = {key: value for key, value in flat.items() if key in ours}
    nested["torchdata"] = {key: value for key, value in flat.items() if key not in ours}
    expected, resumed = torchdata_mode_loader(), torchdata_mode_loader()
    with pytest.warns(UserWarning, match="replays the sampler"):
        expected.load_state_dict(flat)
    with pytest.warns(UserWarning, match="replays the sampler"):
        resumed.load_state_dict(nested)
    assert as_ids(resumed) == as_ids(expected)


@pytest.mark.parametrize(("world", "batch_size"), [(2, 4), (1, 4)])  # same layout; another
def test_the_restored_position_is_reported_in_the_layout_that_saved_it(
    world: int, batch_size: int
) -> None:
    """``restored`` is (epoch, consumed, saver's step); ``layout_change`` only on a change."""
    saver = make_loader(n=N, world=2, batch_size=4)
    as_ids(saver)
    as_ids(itertools.islice(iter(saver), 3))
    state = json.loads(json.dumps(saver.state_dict()))
    loader = make_loader(n=N, world=world, batch_size=batch_size)
    loader.load_state_dict(state)
    assert loader.restored == RestoredPosition(epoch=1, consumed=24, step_samples=8)
    assert loader.layout_change == (None if world == 2 else (3, 6))


def test_a_trainers_set_epoch_after_a_load_neither_warns_nor_moves_the_position() -> None:
    """A trainer's lagging ``sampler.set_epoch`` after a load is ignored, with no warning."""
    expected = run_epochs(make_loader(n=N, batch_size=BATCH), 3)
    loader = make_loader(n=N, batch_size=BATCH)
    run_epochs(loader, 2)
    seen = as_ids(itertools.islice(iter(loader), 3))
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = make_loader(n=N, batch_size=BATCH)
    resumed.load_state_dict(state)
    sampler = resumed.sampler
    assert isinstance(sampler, DistributedSampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.set_epoch(1)  # Lightning's epoch counter, one behind
        rest = run_epochs(resumed, 3)
    assert expected[-(len(seen) + len(rest)) :] == seen + rest
    assert len(rest) == 13 - 3


def test_a_skip_mode_state_of_another_seed_is_refused() -> None:
    """docs/loader.md: a state saved with another seed raises, in skip mode too."""

    def make(seed: int) -> StatefulDataLoader:
        sampler = ReproducibleShuffleSampler(range(N), seed)
        return StatefulDataLoader(IndexDataset(N), BATCH, sampler=sampler)

    saver = make(3)
    as_ids(itertools.islice(iter(saver), 2))
    state = json.loads(json.dumps(saver.state_dict()))
    with pytest.raises(StateMismatchError, match="seed"):
        make(4).load_state_dict(state)


def test_a_torchdata_state_with_a_negative_count_is_refused_in_skip_mode() -> None:
    """A torchdata-layout state with a negative batch count is refused by a skip loader."""
    sampler = ReproducibleShuffleSampler(range(N), 3)
    loader = StatefulDataLoader(IndexDataset(N), BATCH, sampler=sampler)
    with pytest.raises(StateMismatchError):
        loader.load_state_dict({"_num_yielded": -1, "_iterator_finished": False})
    assert (loader.epoch, loader.batches_yielded) == (0, 0)
