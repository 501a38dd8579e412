"""Batches read in the loading process itself, without torch's iterator (0 workers).

A :class:`~lightning_resumable_data.StatefulDataLoader` whose position is its sampler's
(``resume_mode == "position"``) needs none of the bookkeeping of torch's single-process
iterator: torchdata's counters, the fetcher's indirection and a profiler range per batch
cost about 5 µs a batch, a tenth of a whole batch of token shards. With no workers, no
pinned memory and a map-style dataset batched by the loader, it reads each batch as
torch's fetcher does (``dataset.__getitems__(indices)`` if the dataset has it, else
``[dataset[i] for i in indices]``, then ``collate_fn``), and draws the iterator's base seed
from the loader's generator as torch does at the start of a pass, so the random streams
are the ones torch's iterator leaves. A profiler that records (``torch.profiler``) still
sees each batch as torch names it.

Example:
    >>> import torch
    >>> from lightning_resumable_data import DistributedSampler, StatefulDataLoader
    >>> data = list(range(6))
    >>> loader = StatefulDataLoader(data, batch_size=4, sampler=DistributedSampler(
    ...     data, num_replicas=1, rank=0, shuffle=False))
    >>> direct(loader), [b.tolist() for b in loader]
    (True, [[0, 1, 2, 3], [4, 5]])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset
from torch.utils.data.datapipes.datapipe import IterDataPipe, MapDataPipe

__all__ = ["direct", "direct_batches"]

_PROFILE_NAME = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def direct(loader: Any) -> bool:
    """Whether ``loader`` reads its batches directly: position mode, no worker, no pinning."""
    dataset = loader.dataset
    return (
        loader.resume_mode == "position"
        and loader.num_workers == 0
        and not loader.pin_memory
        and loader.timeout == 0
        and loader.batch_sampler is not None  # the loader batches (auto-collation)
        and not isinstance(dataset, (IterableDataset, IterDataPipe, MapDataPipe))
    )


def direct_batches(loader: Any) -> Iterator[Any]:
    """One pass of ``loader``'s batches, read in this process (see the module)."""
    # torch's iterator draws its base seed at its start: the same draw keeps the streams.
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    dataset, collate = loader.dataset, loader.collate_fn
    getitems = getattr(dataset, "__getitems__", None)
    profiler = torch.autograd.profiler
    for indices in loader.batch_sampler:
        if profiler._is_profiler_enabled:  # the range torch's iterator records for a batch
            with profiler.record_function(_PROFILE_NAME):
                batch = _read(dataset, getitems, collate, indices)
        else:
            batch = _read(dataset, getitems, collate, indices)
        yield batch


def _read(dataset: Any, getitems: Any, collate: Any, indices: Any) -> Any:
    """Torch's ``_MapDatasetFetcher.fetch`` with auto-collation."""
    samples = getitems(indices) if getitems else [dataset[i] for i in indices]
    return collate(samples)
