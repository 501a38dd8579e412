"""A drop-in ``torch.utils.data.DistributedSampler`` with O(1) save, restore and elastic resume."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sized
from typing import Any, ClassVar

import numpy as np
import torch.utils.data
from numpy.typing import NDArray

from lightning_resumable_data.index.partition import (
    epoch_total_size,
    rank_span,
    samples_per_rank,
    span_positions,
)
from lightning_resumable_data.index.permutation import (
    PermutationAlgorithm,
    check_algorithm,
    feistel_keys,
    feistel_permute,
    randperm,
)
from lightning_resumable_data.pins import check_pins, dataset_pins
from lightning_resumable_data.randomness import KeyedBatch, make_sample_keys
from lightning_resumable_data.samplers._chunks import (
    CHUNK_SIZE,
    BatchCount,
    ChunkStream,
    chunk_sizes,
)
from lightning_resumable_data.samplers._world import resolve_world
from lightning_resumable_data.state import (
    ResumeWarning,
    StateMismatchError,
    check_state,
    make_state,
)

__all__ = ["DistributedSampler", "check_non_negative_int", "dataset_length"]

_Order = Callable[[NDArray[np.int64]], NDArray[np.integer]]
_SEED_LIMIT = 2**64  # torch.Generator.manual_seed accepts [0, 2**64) (negatives wrap)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` if it is a non-negative int, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r} must be an int, got {type(value).__name__}.")
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0.")
    return int(value)


def dataset_length(dataset: object, owner: str, *, empty_ok: bool = False) -> int:
    """Return ``len(dataset)``, or raise a clear error for unsized (or empty) datasets."""
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"{owner} needs a map-style dataset with __len__, got {type(dataset).__name__}. "
            "Iterable datasets order themselves; pass them to the loader without a sampler."
        )
    length = len(dataset)
    if length == 0 and not empty_ok:
        raise ValueError(
            f"{owner} got an empty dataset (len 0); there is nothing to sample. Pass a "
            "dataset with at least one sample (check the path or filter that built it)."
        )
    return length


def _check_rank_as_torch(num_replicas: object, rank: object) -> None:
    """Refuse an out-of-range ``rank`` with torch's wording (code may match on it)."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (num_replicas, rank))
    if ints and num_replicas >= 1 and not 0 <= rank < num_replicas:  # type: ignore[operator]
        raise ValueError(
            f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]; "  # type: ignore[operator]
            "pass the data-parallel rank of this process (in Lightning: from "
            "trainer.strategy.distributed_sampler_kwargs)."
        )


class DistributedSampler(torch.utils.data.DistributedSampler[int]):
    """Shard a dataset over data-parallel ranks; save and restore the position in O(1).

    With ``algorithm="randperm"`` (the default) it yields exactly what
    ``torch.utils.data.DistributedSampler`` yields for the same arguments and epoch. It is a
    subclass of it, so Lightning and Fabric neither replace nor wrap it.

    The epoch's global order ``G`` is shuffled from ``(seed, epoch)``, padded by wrapping
    around (or its tail dropped with ``drop_last=True``), and rank ``r`` of ``W`` takes
    ``G[r], G[r+W], ...``. The position is the number of global samples consumed in the
    epoch, so a state saved under ``W`` ranks resumes under any ``W'``: the remaining suffix
    is strided over the new ranks and every sample is still read exactly once.

    State keys: ``version``, ``kind``, ``fingerprint`` (``dataset_length``, ``seed``,
    ``shuffle``, ``algorithm``, ``drop_last``), ``epoch``, ``consumed`` (global samples of the
    epoch consumed by all ranks together), ``num_replicas`` (world size at save time).

    Args:
        dataset: A sized dataset.
        num_replicas: Data-parallel world size; ``None`` reads the initialised process group.
        rank: Data-parallel rank; ``None`` reads the initialised process group.
        shuffle: Shuffle the order every epoch.
        seed: Shuffle seed, in ``[-2**63, 2**64)`` with ``seed + epoch < 2**64`` (as torch:
            a negative seed wraps modulo 2**64); the same on every rank. Like torch's, the
            ``"randperm"`` order depends only on ``(seed + epoch) % 2**32`` (torch's CPU
            generator keeps 32 bits of a seed).
        drop_last: Drop the ragged tail instead of padding with wrapped-around samples.
        algorithm: ``"randperm"`` (torch's order, O(n) memory) or ``"feistel"`` (random
            access, O(1) memory, for datasets of 10**9+ samples).
            An empty dataset is accepted, as torch's is: every epoch yields nothing.
        sample_keys: Yield :class:`~lightning_resumable_data.SampleKey` indices that carry
            (seed, epoch, position), for augmentations that must survive a resume.

    Example:
        >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=0, seed=0)
        >>> it = iter(sampler)
        >>> first = [next(it) for _ in range(2)]
        >>> state = sampler.state_dict()
        >>> state["consumed"]
        4
        >>> resumed = DistributedSampler(range(10), num_replicas=2, rank=0, seed=0)
        >>> resumed.load_state_dict(state)
        >>> list(resumed) == list(it)
        True
    """

    KIND: ClassVar[str] = "DistributedSampler"

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        algorithm: PermutationAlgorithm = "randperm",
        sample_keys: bool = False,
    ) -> None:
        length = dataset_length(dataset, type(self).__name__, empty_ok=True)
        _check_rank_as_torch(num_replicas, rank)
        num_replicas, rank = resolve_world(num_replicas, rank)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed={seed!r} must be an int, got {type(seed).__name__}.")
        seed = int(seed)
        if not -(2**63) <= seed < _SEED_LIMIT:
            raise ValueError(
                f"seed={seed} must be in [-2**63, 2**64) (torch's manual_seed range); pass "
                "seed % 2**64."
            )
        super().__init__(
            dataset,  # type: ignore[arg-type]  # torch only needs len(dataset)
            num_replicas,
            rank,
            bool(shuffle),
            seed,
            bool(drop_last),
        )
        self.algorithm: PermutationAlgorithm = check_algorithm(algorithm)
        self.dataset_length = length
        self.epoch_length = length  # length of the epoch's global order (before padding)
        self.pins = dataset_pins(dataset)  # files whose bytes the state pins (pins.py)
        self.sample_keys = bool(sample_keys)
        self._resume_at = 0  # global position the next __iter__ starts from (one-shot)
        self._started_at = 0  # global position where the live iteration started
        self._stream: ChunkStream | BatchCount | None = None
        self._pending: tuple[int, int] | None = None  # (epoch, start) of an unread iterator
        self._epoch_locked = False  # set by lock_epoch: the loader owns the epoch

    @property
    def _key_seed(self) -> int:
        """The seed as a 64-bit key word: a negative seed wraps, as torch's generator does."""
        return self.seed % _SEED_LIMIT

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the epoch's order depends on (apart from the epoch)."""
        return {
            "dataset_length": self.dataset_length,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "algorithm": self.algorithm,
            "drop_last": self.drop_last,
        }

    @property
    def consumed(self) -> int:
        """Global samples of the current epoch consumed by all ranks, as far as known here.

        Counts what this sampler has yielded, assuming every rank advances in lockstep (as
        data-parallel training does). A loader that prefetches knows better: see
        :class:`lightning_resumable_data.StatefulDataLoader`.
        """
        if self._stream is None:
            return self._pending[1] if self._pending is not None else self._resume_at
        return self._started_at + self._stream.yielded * self.num_replicas

    @property
    def frontier(self) -> int:
        """Global position up to which this epoch's order has been computed (all ranks)."""
        if self._stream is None:
            return self._pending[1] if self._pending is not None else self._resume_at
        return self._started_at + self._stream.produced * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``__iter__`` yields.

        Setting the epoch it is already at keeps a restored position (Lightning calls
        ``set_epoch`` at the start of every epoch, including the resumed one); moving to
        another epoch starts that epoch from its beginning.
        """
        epoch = check_non_negative_int("epoch", epoch)
        if self._epoch_locked and epoch != self.epoch:
            return  # a StatefulDataLoader owns the epoch (see lock_epoch)
        if self.seed + epoch >= _SEED_LIMIT:
            raise ValueError(
                f"epoch={epoch} with seed={self.seed} must keep seed + epoch < 2**64 (torch "
                "seeds the epoch's shuffle with seed + epoch); use a smaller seed."
            )
        if epoch == self.epoch:
            return
        if self._resume_at:
            warnings.warn(
                f"set_epoch({epoch}) discards the restored position (epoch {self.epoch}, "
                f"{self._resume_at} samples consumed). If this run should continue epoch "
                f"{self.epoch}, call set_epoch({self.epoch}) instead.",
                ResumeWarning,
                stacklevel=2,
            )
        self.epoch = epoch
        self._resume_at = self._started_at = 0
        self._stream = self._pending = None

    def lock_epoch(self, epoch: int) -> None:
        """Set the epoch and ignore ``set_epoch`` calls for other epochs from now on.

        :class:`~lightning_resumable_data.StatefulDataLoader` calls this at every
        ``__iter__``: the epoch is the loader's (saved with its state), and a trainer's own
        ``set_epoch`` — Lightning's epoch counter can lag the data's by one after a resume at
        an epoch's end — must not move the order under it.
        """
        self._epoch_locked = False
        if epoch != self.epoch:
            self._resume_at = 0  # the loader moved past a restored position: no warning
        self.set_epoch(epoch)
        self._epoch_locked = True

    def set_skip(self, samples: int) -> None:
        """Skip ``samples`` more of this rank's share in the next ``__iter__`` only.

        ``samples`` counts this rank's samples (``batches * batch_size``); all ranks skip
        the same amount, so the start moves by ``samples * num_replicas`` global samples,
        from the epoch's beginning or from a position restored by :meth:`load_state_dict`.
        """
        self._resume_at += check_non_negative_int("samples", samples) * self.num_replicas
        self._stream = self._pending = None

    def _claim(self) -> tuple[int, int]:
        """The (epoch, start) of a new iteration; the restored position is used up."""
        # The epoch and start are fixed here, so a later ``set_epoch`` cannot change an
        # iterator already handed out (Lightning may call it after the loader's ``iter``).
        # torch's multi-worker DataLoader calls ``iter(sampler)`` twice and discards the
        # first iterator: a start no iterator has begun reading is handed out again.
        if self._pending is not None and self._pending[0] == self.epoch:
            epoch, start = self._pending
        else:
            epoch, start = self.epoch, self._resume_at
        self._resume_at = 0
        self._pending = (epoch, start)
        self._stream = None
        return epoch, start

    def __iter__(self) -> Iterator[int]:
        epoch, start = self._claim()
        stream = ChunkStream(self._chunks(epoch, start, lambda: stream))
        return iter(stream)

    def iter_batches(
        self, batch_size: int, drop_last: bool = False, limit: int | None = None
    ) -> Iterator[list[int]]:
        """Return this rank's indices in batches, as ``BatchSampler(self, ...)`` yields them.

        The same batches, with no Python work per index: a chunk of the order is computed
        as an array, converted to ``int`` in one call and sliced into batches. With
        ``sample_keys`` each batch is a :class:`~lightning_resumable_data.KeyedBatch` (one
        object per batch; keys are built only if the dataset iterates it). ``limit`` stops
        after that many of this rank's samples. The position (:attr:`consumed`) advances as
        batches are handed out.

        Example:
            >>> sampler = DistributedSampler(range(10), num_replicas=2, rank=1, shuffle=False)
            >>> list(sampler.iter_batches(2))
            [[1, 3], [5, 7], [9]]
        """
        epoch, start = self._claim()
        count = BatchCount()
        return self._batches(epoch, start, count, batch_size, bool(drop_last), limit)

    def _batches(
        self,
        epoch: int,
        start: int,
        count: BatchCount,
        batch_size: int,
        drop_last: bool,
        limit: int | None,
    ) -> Iterator[list[int]]:
        seed, keyed, step = self._key_seed, self.sample_keys, self.num_replicas
        for positions, indices in self._arrays(epoch, start, count, batch_size, limit):
            values: list[int] = indices.tolist()
            first = int(positions[0])
            for offset in range(0, len(values), batch_size):
                batch = values[offset : offset + batch_size]
                if drop_last and len(batch) < batch_size:
                    return
                count.yielded += len(batch)
                if keyed:
                    yield KeyedBatch(
                        batch, seed=seed, epoch=epoch, start=first + offset * step, step=step
                    )
                else:
                    yield batch

    def _chunks(
        self, epoch: int, start: int, stream: Callable[[], ChunkStream]
    ) -> Iterator[list[Any]]:
        """Yield this rank's indices of ``epoch`` from ``start``, a list per chunk."""
        seed, keyed = self._key_seed, self.sample_keys
        for positions, indices in self._arrays(epoch, start, stream, 1, None):
            yield make_sample_keys(indices, positions, seed, epoch) if keyed else indices.tolist()

    def _arrays(
        self,
        epoch: int,
        start: int,
        counter: BatchCount | Callable[[], ChunkStream],
        multiple: int,
        limit: int | None,
    ) -> Iterator[tuple[NDArray[np.int64], NDArray[np.integer]]]:
        """Yield (positions, indices) of this rank's samples from ``start``, chunk by chunk.

        Chunks grow from a small first one (see ``chunk_sizes``): a resume computes only
        what its first batches need.
        """
        self._pending = None
        span = rank_span(
            self.epoch_length, self.num_replicas, self.rank, self.drop_last, consumed=start
        )
        total = span.count if limit is None else min(span.count, limit)
        self._started_at = start
        self._stream = counter if isinstance(counter, BatchCount) else counter()
        if total == 0:
            return
        order = self._order(epoch)
        n = self.epoch_length
        sizes = chunk_sizes(self._chunk_size(), multiple)
        begin = 0
        while begin < total:
            end = min(begin + next(sizes), total)
            positions = span_positions(span, begin, end)
            if isinstance(counter, BatchCount):
                counter.produced += end - begin
            yield positions, order(positions % n)
            begin = end

    def samples_left(self, consumed: int) -> int:
        """Samples this rank still reads in an epoch after ``consumed`` global samples."""
        return samples_per_rank(self.epoch_length - consumed, self.num_replicas, self.drop_last)

    def _chunk_size(self) -> int:
        """Samples of this rank computed at a time."""
        return CHUNK_SIZE

    def __len__(self) -> int:
        """Samples this rank reads in a full epoch (torch's ``num_samples``)."""
        return self.num_samples

    def _order(self, epoch: int) -> _Order:
        """The global order of ``epoch`` as a lookup from positions to dataset indices."""
        if not self.shuffle:
            return lambda positions: positions
        if self.algorithm == "randperm":
            permutation = randperm(self.dataset_length, (self.seed + epoch) % _SEED_LIMIT)
            return lambda positions: permutation[positions]
        keys = feistel_keys(self._key_seed, epoch)
        n = self.dataset_length
        return lambda positions: feistel_permute(positions, n, keys)

    def state_dict(self) -> dict[str, Any]:
        """Return the position: epoch and global samples consumed, with the fingerprint."""
        return self.state_at(self.epoch, self.consumed)

    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]:
        """Return the state this sampler has after ``consumed`` global samples of ``epoch``.

        A loader that knows the position better than the sampler (it prefetches) uses this.
        """
        state = make_state(
            self.KIND,
            self.fingerprint,
            epoch=epoch,
            consumed=consumed,
            num_replicas=self.num_replicas,
        )
        if self.pins:
            state["pins"] = dict(self.pins)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position; the next ``__iter__`` continues from it.

        The world size may differ from the one that saved the state: the rest of the epoch
        is then strided over the current ranks.

        Raises:
            StateMismatchError: The state is of another version or kind, is malformed, or
                was saved with a different dataset length, seed, shuffle, algorithm or
                drop_last, or over a pinned file whose bytes changed since
                (:mod:`~lightning_resumable_data.pins`).
        """
        check_state(
            state_dict,
            self.KIND,
            self.fingerprint,
            {"epoch": int, "consumed": int, "num_replicas": int},
        )
        check_pins(state_dict, self.KIND, self.pins)
        if self.seed + state_dict["epoch"] >= _SEED_LIMIT:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: epoch={state_dict['epoch']} with "
                f"seed={self.seed} exceeds 2**64 - 1 (torch's seed range). The state is "
                "corrupted."
            )
        consumed, saved_replicas = state_dict["consumed"], state_dict["num_replicas"]
        if saved_replicas == 0:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: num_replicas=0; a state is saved "
                "by at least one rank. The state is corrupted."
            )
        limit = epoch_total_size(self.epoch_length, saved_replicas, self.drop_last)
        if consumed > limit:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: consumed={consumed} is past the "
                f"end of an epoch of {self.epoch_length} samples over "
                f"num_replicas={saved_replicas} ranks (at most {limit}). The state is "
                "corrupted or belongs to another dataset."
            )
        # An epoch with no real sample left reads nothing in any layout; past the end of
        # this layout's epoch (a narrower resume), it is saved again as that end, so the
        # state it saves loads here too.
        if consumed >= self.epoch_length:
            consumed = min(
                consumed, epoch_total_size(self.epoch_length, self.num_replicas, self.drop_last)
            )
        self.epoch = state_dict["epoch"]
        self._resume_at = consumed
        self._started_at = 0
        self._stream = self._pending = None
