"""Drop-in behaviour against torchdata's StatefulDataLoader (issue 13).

Each test builds the same loader from torchdata and from this package and compares what a
user sees: accepted arguments, generic subscripting, the global-seed shuffle, a state loaded
while an iterator is live, and a torchdata-saved state resumed by ours mid-run.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import pytest
import torch
import torch.utils.data
from loader_helpers import IndexDataset as Rows
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from lightning_resumable_data import DistributedSampler, StatefulDataLoader


class Counting(torch.utils.data.IterableDataset[int]):
    """An iterable dataset with a state, split over workers."""

    def __init__(self, n: int) -> None:
        self.n, self.resume = n, 0

    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        start, self.resume = self.resume, 0
        for index in range(start, self.n):
            self.i = index
            if index % workers == worker:
                yield index

    def state_dict(self) -> dict[str, int]:
        return {"i": getattr(self, "i", -1) + 1}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.resume = state["i"]


def ids(batches: Any) -> list[list[int]]:
    return [torch.as_tensor(batch).tolist() for batch in batches]


def test_every_torchdata_argument_is_accepted() -> None:
    theirs = inspect.signature(TorchdataLoader.__init__).parameters
    ours = inspect.signature(StatefulDataLoader.__init__).parameters
    assert set(theirs) <= set(ours)
    loader = StatefulDataLoader(Rows(4), batch_size=2, snapshot_every_n_steps=5)
    assert ids(loader) == [[0, 1], [2, 3]]


def test_generic_subscript_as_torchdata() -> None:
    alias = StatefulDataLoader[list[torch.Tensor]]
    assert alias.__origin__ is StatefulDataLoader  # type: ignore[attr-defined]
    assert ids(alias(Rows(2), batch_size=2)) == [[0, 1]]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_global_seed_drives_a_plain_shuffle_as_torchdata(num_workers: int) -> None:
    def epochs(cls: type) -> list[list[int]]:
        torch.manual_seed(1234)
        loader = cls(Rows(24), batch_size=4, shuffle=True, num_workers=num_workers)
        return [batch for _ in range(3) for batch in ids(loader)]

    assert epochs(StatefulDataLoader) == epochs(TorchdataLoader)


@pytest.mark.parametrize("cls", [StatefulDataLoader, TorchdataLoader])
def test_load_while_live_applies_at_the_next_iter(cls: type) -> None:
    expected = ids(cls(Rows(20), batch_size=2))[3:]
    saved_loader = cls(Rows(20), batch_size=2)
    saved_it = iter(saved_loader)
    for _ in range(3):
        next(saved_it)
    state = saved_loader.state_dict()
    loader = cls(Rows(20), batch_size=2)
    live = iter(loader)
    next(live)
    loader.load_state_dict(state)
    assert ids(iter(loader)) == expected


@pytest.mark.parametrize(("num_workers", "every"), [(0, 1), (2, 1), (2, 3)])
def test_torchdata_mode_states_exchange_both_ways(num_workers: int, every: int) -> None:
    def build(cls: type) -> Any:
        return cls(
            Counting(30), batch_size=3, num_workers=num_workers, snapshot_every_n_steps=every
        )

    reference = ids(build(TorchdataLoader))
    for saver, loader_cls in itertools.product((TorchdataLoader, StatefulDataLoader), repeat=2):
        loader = build(saver)
        it = iter(loader)
        seen = [next(it) for _ in range(4)]
        state = loader.state_dict()
        assert ("_snapshot" in state) == (num_workers > 0)  # torchdata's layout, on top
        resumed = build(loader_cls)
        resumed.load_state_dict(state)
        assert ids(seen) + ids(resumed) == reference, (saver, loader_cls)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("k", [0, 3, 7])  # 7: the whole epoch (7 batches)
def test_a_torchdata_job_resumes_with_our_loader_and_sampler(num_workers: int, k: int) -> None:
    """A torchdata job (torch's DistributedSampler) switches to ours mid-epoch."""
    world, epoch = 2, 3
    data = Rows(50)

    def torch_job() -> tuple[TorchdataLoader[Any], torch.utils.data.DistributedSampler[int]]:
        sampler: torch.utils.data.DistributedSampler[int] = torch.utils.data.DistributedSampler(
            data, world, 1, seed=7
        )
        sampler.set_epoch(epoch)
        return TorchdataLoader(data, 4, sampler=sampler, num_workers=num_workers), sampler

    full = ids(torch_job()[0])
    loader, _ = torch_job()
    it = iter(loader)
    for _ in range(k):
        next(it)
    state = loader.state_dict()
    sampler = DistributedSampler(data, world, 1, seed=7)
    sampler.set_epoch(epoch)  # torchdata states hold no epoch; the job sets it, as before
    ours = StatefulDataLoader(data, 4, sampler=sampler, num_workers=num_workers)
    ours.load_state_dict(state)
    assert ours.resume_mode == "position"
    if k < len(full):
        assert ids(iter(ours)) == full[k:]
    assert ours.state_dict()["epoch"] == epoch + 1  # the epoch is over: the next one is due
