"""The shard-streaming loader: shard and micro-batch prefetch, device transfer, exact resume."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import torch
import torch.utils.data

from lightning_resumable_data.index.partition import samples_per_rank
from lightning_resumable_data.pins import check_pins
from lightning_resumable_data.samplers.distributed import check_non_negative_int
from lightning_resumable_data.shards._prefetch import Prefetcher, to_device
from lightning_resumable_data.shards.assembly import check_loader, sharded_dataset, sharded_sampler
from lightning_resumable_data.shards.dataset import DistributedShardedDataset
from lightning_resumable_data.shards.loader_factory import (
    DataLoaderFactory,
    DefaultDataLoaderFactory,
)
from lightning_resumable_data.shards.protocol import ShardReader
from lightning_resumable_data.shards.sampler import ShardedSampler, check_shards_unchanged
from lightning_resumable_data.state import (
    ResumeWarning,
    StateMismatchError,
    check_state,
    make_state,
)

__all__ = ["DataLoaderFactory", "DefaultDataLoaderFactory", "ShardedDataLoader"]


class ShardedDataLoader(Iterable[Any]):
    """Stream a rank's batches from shards, prefetching shards and micro-batches ahead.

    The parameters and the pipeline follow fkat's ``ShardedDataLoader``: a shard sampler, a
    data-loader factory, shard prefetch, micro-batch prefetch and a background device
    transfer, with the reading optionally in another process. The position is
    this package's: the rank reads ``G[r::W]`` of the sharded global order ``G`` (see
    :class:`ShardedSampler`), batches are counted as they leave the loader, and the state is
    the epoch and the global samples consumed. It is the same on every rank and resumes
    exactly mid-shard (no replay of a partly used shard), also under another world size or
    batch size (the rest of the epoch, every sample once).

    Pipeline: ``dataloader_factory(dataset, sampler)`` reads the rank's stream into batches
    (by default a DataLoader with one persistent worker process if ``multiprocessing``,
    else in this process); the dataset loads the next ``num_shard_prefetches`` shards on a
    background thread of whichever process reads; a background thread keeps
    ``num_microbatch_prefetches`` batches ready, already moved to ``device`` (pinned, with
    ``non_blocking=True``, when it is a CUDA device).

    State keys: ``version``, ``kind``, ``fingerprint`` (the sampler's: shard count, sizes
    digest, seed, shuffle flags, ``drop_last``), ``epoch``, ``consumed``; ``pins`` where the
    shards have an ETag or version (:mod:`~lightning_resumable_data.pins`).

    Args:
        shards: Shard readers (``open_token_shards(...)``) or a ``DistributedShardedDataset``.
        batch_size: Samples per batch on this rank.
        seed: Seed of the orders; defaults to the dataset's, else 0.
        shard_sampler: A :class:`ShardedSampler` over these shards; built from
            ``dp_rank``/``num_replicas``/``drop_last`` if not given.
        dataloader_factory: ``(dataset, sampler) -> iterable of batches``; it must batch in
            the sampler's order with ``batch_size``. Defaults to
            :class:`DefaultDataLoaderFactory`.
        num_shard_prefetches: Shards loaded ahead (default 1, or the dataset's).
        num_microbatch_prefetches: Batches kept ready by the background thread; 0 reads in
            the caller.
        dp_rank: Data-parallel rank; ``None`` reads the process group.
        num_replicas: Data-parallel world size; ``None`` reads the process group.
        device: Move batches there in the background.
        multiprocessing: Read in a worker process (the default factory's ``num_workers=1``).
        drop_last: Drop the ragged tail of the epoch and a short last batch.
        collate_fn: Collation of the default factory.
        max_resident: Shards resident per process (default ``num_shard_prefetches + 1``).
        strict_resume: Refuse a state whose pinned shards have other bytes now (another
            ETag or version). ``False`` resumes at the saved position over the new bytes,
            with a :class:`~lightning_resumable_data.ResumeWarning`.

    Example:
        >>> from lightning_resumable_data.shards import DatasetShardReader
        >>> shards = [DatasetShardReader(list(range(s, s + 4))) for s in (0, 4, 8)]
        >>> loader = ShardedDataLoader(shards, batch_size=2, dp_rank=0, num_replicas=1,
        ...                            multiprocessing=False)
        >>> it = iter(loader)
        >>> first = [next(it) for _ in range(3)]
        >>> state = loader.state_dict()
        >>> state["epoch"], state["consumed"]
        (0, 6)
        >>> resumed = ShardedDataLoader(shards, batch_size=2, dp_rank=0, num_replicas=1,
        ...                             multiprocessing=False)
        >>> resumed.load_state_dict(state)
        >>> [b.tolist() for b in resumed] == [b.tolist() for b in it]
        True
    """

    KIND: Final = "ShardedDataLoader"

    def __init__(
        self,
        shards: Sequence[ShardReader[Any]] | DistributedShardedDataset[Any],
        batch_size: int = 1,
        *,
        seed: int | None = None,
        shard_sampler: ShardedSampler | None = None,
        dataloader_factory: DataLoaderFactory | None = None,
        num_shard_prefetches: int | None = None,
        num_microbatch_prefetches: int = 2,
        dp_rank: int | None = None,
        num_replicas: int | None = None,
        device: torch.device | str | None = None,
        multiprocessing: bool = True,
        drop_last: bool | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        max_resident: int | None = None,
        strict_resume: bool = True,
    ) -> None:
        self.strict_resume = bool(strict_resume)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive int.")
        self.batch_size = batch_size
        self.num_microbatch_prefetches = check_non_negative_int(
            "num_microbatch_prefetches", num_microbatch_prefetches
        )
        self.dataset = sharded_dataset(shards, seed, num_shard_prefetches, max_resident)
        self.sampler = sharded_sampler(
            self.dataset, shard_sampler, dp_rank, num_replicas, drop_last
        )
        self.device = None if device is None else torch.device(device)
        self.multiprocessing = bool(multiprocessing)
        factory = dataloader_factory or DefaultDataLoaderFactory(
            batch_size,
            drop_last=self.sampler.drop_last,
            collate_fn=collate_fn,
            multiprocessing=self.multiprocessing,
            pin_memory=self.device is not None and self.device.type == "cuda",
        )
        self.loader = factory(self.dataset, self.sampler)
        # Whether a short last batch is dropped: the DataLoader's batch sampler's say (or the
        # DataLoader's), else the sampler's.
        batches = getattr(self.loader, "batch_sampler", None)
        drop = getattr(self.loader, "drop_last", self.sampler.drop_last)
        self._drop_short_batch = bool(getattr(batches, "drop_last", drop))
        check_loader(self.loader, self.sampler, self.batch_size)
        self._epoch = 0
        self._start = 0  # global samples of the epoch consumed before the live iterator
        self._yielded = 0  # batches of the live iterator that left the loader
        self._limit = 0  # global samples consumed once the live iterator is exhausted
        self._iterating = False
        self._live: Prefetcher | None = None

    # -- iteration -------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next (or live) iterator reads."""
        return self._epoch

    def _rank_samples(self, start: int) -> int:
        remaining = len(self.dataset) - min(start, len(self.dataset))
        return samples_per_rank(remaining, self.sampler.num_replicas, self.sampler.drop_last)

    def __len__(self) -> int:
        """Batches this rank reads in the current epoch, from where it starts."""
        count = self._rank_samples(self._start)
        if self._drop_short_batch:
            return count // self.batch_size
        return -(-count // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        self._stop_live()
        if self._iterating:  # an unfinished iterator: the next pass is the next epoch
            self._end_epoch()
        start = min(self._start, len(self.dataset))  # past the end: nothing left but pads
        self.sampler.seek(self._epoch, start)
        self._limit = start + self._rank_samples(start) * self.sampler.num_replicas
        self._start, self._yielded, self._iterating = start, 0, True
        # The transfer must not hold the loader (see Prefetcher): a partial, not a method.
        transfer = functools.partial(to_device, self.device)
        live = Prefetcher(iter(self.loader), self.num_microbatch_prefetches, transfer)
        self._live = live
        return self._count(live)

    def _count(self, live: Prefetcher) -> Iterator[Any]:
        for batch in live:
            self._yielded += 1  # counted as it leaves the loader, not as it is prefetched
            yield batch
        if self._live is live:  # not an iterator that a newer one replaced
            self._end_epoch()

    def _end_epoch(self) -> None:
        self._epoch += 1
        self._start = self._yielded = 0
        self._iterating = False

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.close()

    def set_device(self, device: torch.device | str | None) -> None:
        """Move batches to ``device`` from the next iterator on."""
        self.device = None if device is None else torch.device(device)

    def close(self) -> None:
        """Stop the background threads and release the shards of this process."""
        self._stop_live()
        self.dataset.close()

    # -- state -----------------------------------------------------------------------------

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What the order depends on: the sampler's fingerprint."""
        return self.sampler.fingerprint

    @property
    def consumed(self) -> int:
        """Global samples of the current epoch consumed by all ranks (batches that left)."""
        if not self._iterating:
            return self._start
        step = self.batch_size * self.sampler.num_replicas
        return min(self._start + self._yielded * step, self._limit)

    def state_dict(self) -> dict[str, Any]:
        """The position after the last batch that left the loader, identical on every rank."""
        state = make_state(self.KIND, self.fingerprint, epoch=self._epoch, consumed=self.consumed)
        if self.sampler.pins:
            state["pins"] = dict(self.sampler.pins)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position; the next ``__iter__`` continues right after it.

        Raises:
            RuntimeError: An iterator of this loader is still running.
            StateMismatchError: The state is of another version or kind, is malformed, or
                was saved over other shards (one vanished, was added, resized or rewritten,
                or a pinned shard has another ETag or version now; see ``strict_resume``)
                or with another seed, shuffle or ``drop_last``.
        """
        if self._iterating and self._live is not None and not self._live.finished:
            raise RuntimeError(
                f"{self.KIND}.load_state_dict() was called while an iterator is live (epoch "
                f"{self._epoch}, {self._yielded} batches yielded). Load the state before "
                "iterating, or after the epoch ends."
            )
        check_shards_unchanged(state_dict, self.KIND, self.fingerprint)
        check_state(state_dict, self.KIND, self.fingerprint, {"epoch": int, "consumed": int})
        try:
            check_pins(state_dict, self.KIND, self.sampler.pins)
        except StateMismatchError as error:
            if self.strict_resume:
                raise
            warnings.warn(f"{error} (strict_resume=False: resuming.)", ResumeWarning, 2)
        self.dataset.check_shards()
        self._epoch, self._start = state_dict["epoch"], state_dict["consumed"]
        self._yielded, self._iterating = 0, False
