"""How a sharded loader reads a rank's stream into batches: the data-loader factory."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from lightning_resumable_data._batching import PositionBatchSampler
from lightning_resumable_data._rows import collate_rows
from lightning_resumable_data.shards.sampler import ShardedSampler

__all__ = ["DataLoaderFactory", "DefaultDataLoaderFactory"]

DataLoaderFactory = Callable[[torch.utils.data.Dataset[Any], ShardedSampler], Iterable[Any]]


@dataclass(frozen=True)
class DefaultDataLoaderFactory:
    """Builds the ``torch.utils.data.DataLoader`` that reads the rank's stream into batches.

    ``multiprocessing=True`` reads in one persistent worker process (shard loads, reads and
    collation leave the training process); ``False`` reads in the calling thread.

    Example:
        >>> factory = DefaultDataLoaderFactory(batch_size=2, multiprocessing=False)
        >>> loader = factory(list(range(4)), None)
        >>> [batch.tolist() for batch in loader]
        [[0, 1], [2, 3]]
    """

    batch_size: int
    drop_last: bool = False
    collate_fn: Callable[[list[Any]], Any] | None = None
    multiprocessing: bool = True
    pin_memory: bool = False

    def __call__(
        self, dataset: torch.utils.data.Dataset[Any], sampler: ShardedSampler | None
    ) -> torch.utils.data.DataLoader[Any]:
        """A DataLoader over ``dataset`` in ``sampler``'s order.

        The sampler hands out whole batches (one ``KeyedBatch`` each, no Python object per
        index); without a sampler, the dataset is read in order.
        """
        batching: dict[str, Any] = {"batch_size": self.batch_size, "drop_last": self.drop_last}
        if sampler is not None:
            batching = {
                "batch_sampler": PositionBatchSampler(sampler, self.batch_size, self.drop_last)
            }
        return torch.utils.data.DataLoader(
            dataset,
            **batching,
            collate_fn=self.collate_fn or collate_rows,
            num_workers=1 if self.multiprocessing else 0,
            persistent_workers=self.multiprocessing,
            pin_memory=self.pin_memory,
        )
