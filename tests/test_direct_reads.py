"""Batches read in the loading process without torch's iterator (``_direct``, 0 workers).

The loader of this package reads a position-mode pass at 0 workers itself: each batch must
be the batch torch's iterator would give (``__getitems__`` or per-sample reads, the collate
function, keyed batches), the global random stream must be left where torch's iterator
leaves it, and a profiler must still see each batch. Workers, pinned memory and the
torchdata mode keep torch's iterator.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from lightning_resumable_data import DistributedSampler, SampleKey, StatefulDataLoader
from lightning_resumable_data._direct import direct


class PerSample(torch.utils.data.Dataset[Any]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, SampleKey):
            return torch.tensor([int(index), index.position])
        return torch.tensor([index, index * 10])


class Batched(PerSample):
    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [torch.tensor([i, -i]) for i in list.__iter__(indices)]


def both(dataset: Any, **options: Any) -> tuple[list[Any], list[Any]]:
    """Our loader's batches, and torchdata's over the same sampler order."""
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=4)
    ours = StatefulDataLoader(dataset, 4, sampler=sampler, **options)
    assert direct(ours)
    got = list(ours)
    order = DistributedSampler(dataset, num_replicas=1, rank=0, seed=4)
    keyed = options.pop("sample_keys", False)
    if keyed:
        order.sample_keys = True
    want = list(TorchdataLoader(dataset, 4, sampler=list(order), **options))
    return got, want


@pytest.mark.parametrize("dataset", [PerSample(10), Batched(10)])
def test_the_batches_are_torchs(dataset: Any) -> None:
    got, want = both(dataset)
    assert [b.tolist() for b in got] == [b.tolist() for b in want]


def test_a_collate_fn_of_your_own_gets_the_samples() -> None:
    def collate(samples: list[Any]) -> Any:
        return [s.tolist() for s in samples]

    got, want = both(PerSample(9), collate_fn=collate)
    assert got == want


def test_the_random_streams_are_left_as_torchs_iterator_leaves_them() -> None:
    """The loader's generator gives the pass its base seed; the global stream is untouched."""
    dataset, states = PerSample(8), []
    for pin in (False, True):  # pinning (a no-op here) keeps torch's iterator
        generator = torch.Generator().manual_seed(1)
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0)
        loader = StatefulDataLoader(
            dataset, 4, sampler=sampler, generator=generator, pin_memory=pin
        )
        torch.manual_seed(0)
        with pytest.warns(UserWarning, match="pin_memory") if pin else nullcontext():
            list(loader)
        states.append((generator.get_state(), torch.rand(3)))
    assert torch.equal(states[0][0], states[1][0])
    assert torch.equal(states[0][1], states[1][1])


def test_a_profiler_sees_each_batch() -> None:
    dataset = PerSample(8)
    loader = StatefulDataLoader(dataset, 4, sampler=DistributedSampler(dataset, 1, 0))
    with torch.profiler.profile() as profile:
        list(loader)
    names = [event.name for event in profile.events()]
    assert sum(name.startswith("enumerate(DataLoader)") for name in names) == 2


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
@pytest.mark.parametrize("options", [{"num_workers": 1}, {"pin_memory": True}, {"torch": True}])
def test_workers_pinning_and_the_other_modes_keep_torchs_iterator(options: Any) -> None:
    dataset = PerSample(8)
    sampler: Any = DistributedSampler(dataset, 1, 0)
    if options.pop("torch", False):  # a torch sampler: torchdata's (or the skip) mode
        sampler = torch.utils.data.RandomSampler(dataset)
    loader = StatefulDataLoader(dataset, 4, sampler=sampler, **options)
    assert not direct(loader)
    assert [b.shape[0] for b in loader] == [4, 4]
