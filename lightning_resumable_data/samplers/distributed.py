# size: the drop-in torch sampler: its position contract (epoch, skips, state) and examples
"""A drop-in ``torch.utils.data.DistributedSampler`` with O(1) save, restore and elastic resume."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import Any, ClassVar

import numpy as np
import torch.utils.data
from numpy.typing import NDArray

from lightning_resumable_data.index.changes import DataChange
from lightning_resumable_data.index.partition import rank_span, samples_per_rank
from lightning_resumable_data.index.permutation import PermutationAlgorithm, check_algorithm
from lightning_resumable_data.pins import dataset_pins
from lightning_resumable_data.randomness import make_sample_keys
from lightning_resumable_data.samplers._arguments import (
    SEED_LIMIT,
    check_epoch_seed,
    check_non_negative_int,
    check_rank_as_torch,
    check_seed,
    dataset_length,
)
from lightning_resumable_data.samplers._changed_order import ChangedOrder
from lightning_resumable_data.samplers._chunks import (
    CHUNK_SIZE,
    BatchCount,
    ChunkStream,
    chunk_sizes,
)
from lightning_resumable_data.samplers._cut_order import skipping
from lightning_resumable_data.samplers._cuts import Quarantine
from lightning_resumable_data.samplers._distributed_state import (
    epoch_position,
    loaded_cuts,
    loaded_position,
    order_fingerprint,
    position_state,
    saved_data,
)
from lightning_resumable_data.samplers._rank_order import array_batches, span_arrays
from lightning_resumable_data.samplers._rank_position import RankPosition
from lightning_resumable_data.samplers._world import resolve_world
from lightning_resumable_data.samplers.data_changes import (
    ChangeReport,
    DataChangePolicy,
    loaded_changes,
)

__all__ = ["DistributedSampler", "check_non_negative_int", "dataset_length"]


class DistributedSampler(ChangedOrder, torch.utils.data.DistributedSampler[int]):
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
        check_rank_as_torch(num_replicas, rank)
        num_replicas, rank = resolve_world(num_replicas, rank)
        seed, shuffle, drop_last = check_seed(seed), bool(shuffle), bool(drop_last)
        # torch only needs len(dataset)
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)  # type: ignore[arg-type]
        self.algorithm: PermutationAlgorithm = check_algorithm(algorithm)
        self.dataset_length = length
        self.epoch_length = length  # length of the epoch's global order (before padding)
        self.pins = dataset_pins(dataset)  # files whose bytes the state pins (pins.py)
        self.sample_keys = bool(sample_keys)
        self._position = RankPosition()  # global samples of the epoch; the live iteration
        self.skips: dict[int, list[tuple[int, int]]] = {}  # epoch -> base ranges never read
        self.quarantined: list[Quarantine] = []  # samples left out from a position on
        self._cuts: dict[int, list[tuple[int, int]]] = {}  # epoch -> all it leaves out
        self.changes: list[DataChange] = []  # of the data between checkpoints and resumes
        self.data_changes: DataChangePolicy | None = None  # None: a changed dataset is refused
        self.last_change: ChangeReport | None = None  # what the last resume's change did
        self._epoch_locked = False  # set by lock_epoch: the loader owns the epoch

    @property
    def _key_seed(self) -> int:
        """The seed as a 64-bit key word: a negative seed wraps, as torch's generator does."""
        return self.seed % SEED_LIMIT

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the epoch's order depends on (apart from the epoch)."""
        return order_fingerprint(self)

    @property
    def consumed(self) -> int:
        """Global samples of the current epoch consumed by all ranks, as far as known here.

        Counts what this sampler has yielded, assuming every rank advances in lockstep (as
        data-parallel training does). A loader that prefetches knows better: see
        :class:`lightning_resumable_data.StatefulDataLoader`.
        """
        return self._position.consumed(self.num_replicas)

    @property
    def frontier(self) -> int:
        """Global position up to which this epoch's order has been computed (all ranks)."""
        return self._position.frontier(self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next ``__iter__`` yields.

        Setting the epoch it is already at keeps a restored position (Lightning calls
        ``set_epoch`` at the start of every epoch, including the resumed one); another epoch
        starts from its beginning. An iterator taken before yields its own epoch, as torch's
        does, but no longer moves the position.
        """
        epoch = check_non_negative_int("epoch", epoch)
        if self._epoch_locked and epoch != self.epoch:
            return  # a StatefulDataLoader owns the epoch (see lock_epoch)
        check_epoch_seed(epoch, self.seed)
        if epoch == self.epoch:
            return
        self._position.warn_discarded(epoch, self.epoch)
        self.epoch = epoch
        self._position.restart()

    def lock_epoch(self, epoch: int) -> None:
        """Set the epoch and ignore ``set_epoch`` calls for other epochs from now on.

        :class:`~lightning_resumable_data.StatefulDataLoader` calls this at every
        ``__iter__``: the epoch is the loader's (saved with its state), and a trainer's own
        ``set_epoch`` — Lightning's epoch counter can lag the data's by one after a resume at
        an epoch's end — must not move the order under it.
        """
        epoch = check_non_negative_int("epoch", epoch)
        check_epoch_seed(epoch, self.seed)  # refused before anything changes
        self._epoch_locked = False
        if epoch != self.epoch:
            self._position.resume_at = 0  # the loader moved past a restored position: no warning
        self.set_epoch(epoch)
        self._epoch_locked = True

    def set_skip(self, samples: int) -> None:
        """Skip ``samples`` more of this rank's share in the next ``__iter__`` only.

        ``samples`` counts this rank's samples (``batches * batch_size``); all ranks skip
        the same amount, so the start moves by ``samples * num_replicas`` global samples,
        from the epoch's beginning or from a position restored by :meth:`load_state_dict`.
        """
        self._position.skip(check_non_negative_int("samples", samples) * self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        epoch, start, claim = self._position.claim(self.epoch)  # the restored start is used up
        stream = ChunkStream(self._chunks(epoch, start, lambda: stream), claim)
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
        epoch, start, claim = self._position.claim(self.epoch)  # the restored start is used up
        count = BatchCount(claim)
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
        keys = (self._key_seed, epoch) if self.sample_keys else None
        arrays = self._arrays(epoch, start, count, batch_size, limit)
        yield from array_batches(arrays, count, batch_size, drop_last, keys, self.num_replicas)

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
        count = self._position.begin(start, counter)
        length, order, ranges = self.epoch_size(epoch), self._order(epoch), self.cuts(epoch)
        span = rank_span(length, self.num_replicas, self.rank, self.drop_last, consumed=start)
        total = span.count if limit is None else min(span.count, limit)
        if total:
            sizes = chunk_sizes(self._chunk_size(), multiple)
            if ranges:  # positions of the order that remains, read at their base positions
                order = skipping(order, ranges)
            arrays = span_arrays(span, total, order, length, sizes, count)
            if self.changes:  # a pad wrapping onto a sample read before a shrink: one now
                arrays = ((p, i % self.dataset_length) for p, i in arrays)
            yield from arrays

    def samples_left(self, consumed: int) -> int:
        """Samples this rank still reads in an epoch after ``consumed`` global samples."""
        return samples_per_rank(self.epoch_size() - consumed, self.num_replicas, self.drop_last)

    def _chunk_size(self) -> int:
        """Samples of this rank computed at a time."""
        return CHUNK_SIZE

    def __len__(self) -> int:
        """Samples this rank reads in a full epoch (torch's ``num_samples``, less skips)."""
        return samples_per_rank(self.epoch_size(), self.num_replicas, self.drop_last)

    def _restart(self, consumed: int) -> None:
        self._position.restart(consumed)

    def state_dict(self) -> dict[str, Any]:
        """Return the position: epoch and global samples consumed, with the fingerprint."""
        return self.state_at(self.epoch, self.consumed)

    def state_at(self, epoch: int, consumed: int) -> dict[str, Any]:
        """Return the state this sampler has after ``consumed`` global samples of ``epoch``.

        A loader that knows the position better than the sampler (it prefetches) uses this.
        """
        return position_state(self, epoch, consumed)

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
        before = self.skips, self.quarantined, self.changes, self.epoch_length
        try:
            self.changes = loaded_changes(state_dict, self.KIND)
            length, changed_files = saved_data(self, state_dict)
            changed = length != self.dataset_length or bool(changed_files)
            if changed:  # the saved data's length, while its position is checked
                self.epoch_length = length
            lengths = [self.epoch_length, *(c.old_length for c in self.changes)]
            bound = max(lengths) + sum(c.added for c in self.changes)  # indices ever read
            self.skips, self.quarantined = loaded_cuts(state_dict, bound, self.KIND)
            self._cuts = {}
            fingerprint = {**self.fingerprint, "dataset_length": length} if changed else None
            self.epoch, consumed = loaded_position(
                self, state_dict, fingerprint, check_files=not changed_files
            )
            if changed:  # at the saved position (a pad past the old epoch's end: its end)
                at = min(state_dict["consumed"], self.epoch_size(self.epoch))
                self.apply_change(self.KIND, self.epoch, at, length, changed_files)
                consumed = epoch_position(at, self.epoch_size(self.epoch), self)
        except Exception:
            self.skips, self.quarantined, self.changes, self.epoch_length = before
            self._cuts = {}  # nothing changes
            raise
        self._position.restart(consumed)
