"""Datasets and helpers for the loader tests (module level so that workers can pickle them)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import torch

from lightning_resumable_data import DistributedSampler, SampleKey, StatefulDataLoader


class IndexDataset(torch.utils.data.Dataset[int]):
    """Returns the index itself: batches are directly the sample ids."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


class AugmentedDataset(IndexDataset):
    """Returns (index, a random draw): keyed by SampleKey, or from the worker's global RNG."""

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, SampleKey):
            return torch.tensor([int(index), int(index.rng().integers(10**9))])
        return torch.tensor([int(index), int(np.random.randint(10**9))])


def make_loader(
    n: int = 50,
    world: int = 1,
    rank: int = 0,
    batch_size: int = 4,
    num_workers: int = 0,
    persistent_workers: bool = False,
    seed: int = 0,
    drop_last: bool = False,
    dataset: torch.utils.data.Dataset[Any] | None = None,
    **sampler_kwargs: Any,
) -> StatefulDataLoader:
    data = IndexDataset(n) if dataset is None else dataset
    sampler = DistributedSampler(
        data,  # type: ignore[arg-type]  # map-style datasets are sized
        world,
        rank,
        seed=seed,
        drop_last=drop_last,
        **sampler_kwargs,
    )
    return StatefulDataLoader(
        data,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        persistent_workers=persistent_workers,
        drop_last=drop_last,
    )


def as_ids(batches: Any) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def take(loader: StatefulDataLoader, k: int) -> tuple[list[list[int]], dict[str, Any]]:
    """Read ``k`` batches from a fresh pass (crossing epochs), return them and the state."""
    out: list[list[int]] = []
    while len(out) < k:
        out += as_ids(itertools.islice(iter(loader), k - len(out)))
    state = json.loads(json.dumps(loader.state_dict()))
    return out, state


def run_epochs(loader: StatefulDataLoader, epochs: int) -> list[list[int]]:
    """Batches until the loader has finished ``epochs`` epochs (from wherever it stands)."""
    out: list[list[int]] = []
    while loader.epoch < epochs:
        out += as_ids(loader)
    return out


def documented_order(n: int, seed: int, epoch: int) -> list[int]:
    """``G`` computed independently of the package: torch's own ``randperm``."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(n, generator=generator).tolist()


def documented_rank_batches(
    order: list[int], start: int, world: int, rank: int, batch: int, drop_last: bool
) -> list[list[int]]:
    """A rank's batches over ``order[start:]`` as docs/concepts.md describes the layout.

    The suffix is padded by wrapping around ``G`` (position ``p >= n`` reads ``G[p - n]``)
    or, with ``drop_last``, trimmed, by fewer than ``world`` samples; rank ``r`` reads every
    ``world``-th position from ``start + r``; the loader cuts batches of ``batch``, dropping
    a short last one with ``drop_last``.
    """
    n = len(order)
    rows = (n - start) // world if drop_last else -(-(n - start) // world)
    mine = [order[(start + rank + world * j) % n] for j in range(rows)]
    cut = len(mine) // batch * batch if drop_last else len(mine)
    return [mine[i : i + batch] for i in range(0, cut, batch)]
