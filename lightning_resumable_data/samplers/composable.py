"""Determined's composable samplers, keyed on an epoch so that they resume exactly.

Build a training chain as Determined recommends, innermost first: shuffle, repeat, shard,
skip::

    SkipSampler(ShardSampler(RepeatSampler(ReproducibleShuffleSampler(
        ResumableSequentialSampler(dataset), seed)), num_replicas, rank), skip)

There is no hidden RNG: a shuffle is a function of ``key_rng(SHUFFLE_STREAM, seed, epoch)``
(fixed-width keys, :mod:`~lightning_resumable_data.index.keys`), pass ``p`` of a repeat
runs its inner sampler at epoch ``epoch + p`` (a new shuffle each pass), and a skip applies
to the first ``__iter__`` only (Determined's apply every epoch). A state nests the inner
sampler's state under ``"inner"`` and restores through the inner's O(1) ``set_skip`` where
it has one (see
:mod:`~lightning_resumable_data.samplers._composition`).

State keys: ``version``, ``kind``, ``fingerprint`` (``seed`` of a shuffle; ``num_replicas``,
not ``rank``, of a shard: every rank loads rank 0's state), ``epoch``, the position
(``position``, own items of the current iteration; a repeat's ``pass`` and ``offset``) and
``inner`` when the inner sampler is stateful.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, Final, TypeVar

import numpy as np

from lightning_resumable_data.index.keys import KEY_LIMIT, key_rng
from lightning_resumable_data.index.partition import check_rank
from lightning_resumable_data.samplers._chunks import CHUNK_SIZE
from lightning_resumable_data.samplers._composition import (
    Composable,
    Cursor,
    Stateful,
    check_count,
    chunks_of,
    epoch_target,
    is_infinite,
    iter_from,
)

__all__ = [
    "SHUFFLE_STREAM",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "ShardBatchSampler",
    "ShardSampler",
    "SkipBatchSampler",
    "SkipSampler",
]

T = TypeVar("T")

SHUFFLE_STREAM: Final = 0x53485546  # "SHUF": key stream tag of the shuffles

Batch = list[int]


class _Shuffle(Composable[T]):
    def __init__(self, inner: Iterable[T], seed: int) -> None:
        super().__init__(inner)
        if is_infinite(inner):
            raise ValueError(
                f"{type(self).__name__} cannot shuffle {type(inner).__name__}: it never ends, "
                "so the shuffle would hang. Shuffle first, then repeat: "
                "RepeatSampler(ReproducibleShuffleSampler(sampler, seed))."
            )
        self.seed = check_count(type(self).__name__, "seed", seed, "the shuffle seed")
        if self.seed >= KEY_LIMIT:
            raise ValueError(
                f"{type(self).__name__}: seed={self.seed} must be < 2**64 (shuffle keys are "
                "64-bit); pass a smaller seed, e.g. seed % 2**64."
            )

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The shuffle seed."""
        return {"seed": self.seed}

    def _rng(self) -> np.random.Generator:
        return key_rng(SHUFFLE_STREAM, self.seed, self.epoch)


class ReproducibleShuffleSampler(_Shuffle[int]):
    """Shuffle an inner sampler's indices, reproducibly from ``(seed, epoch)``.

    Each ``__iter__`` reads the inner sampler's epoch into an array and shuffles it with
    ``key_rng(SHUFFLE_STREAM, seed, epoch)``; ``set_epoch`` selects the epoch and is
    forwarded to the inner sampler. Shuffle before you repeat, shard or skip.

    Args:
        sampler: A finite sampler of indices.
        seed: Shuffle seed, an int in ``[0, 2**64)``, the same on every rank.

    Example:
        >>> from lightning_resumable_data.samplers.sequential import ResumableSequentialSampler
        >>> sampler = ReproducibleShuffleSampler(ResumableSequentialSampler(range(6)), seed=0)
        >>> first = list(sampler)
        >>> sorted(first), list(sampler) == first
        ([0, 1, 2, 3, 4, 5], True)
        >>> sampler.set_epoch(1)
        >>> list(sampler) != first
        True
    """

    KIND: ClassVar[str] = "ReproducibleShuffleSampler"

    def __init__(self, sampler: Iterable[int], seed: int) -> None:
        super().__init__(sampler, seed)

    def _iterate(self) -> Iterator[int]:
        start = self._begin()
        indices = np.fromiter(self.inner, dtype=np.int64)
        self._rng().shuffle(indices)
        cursor = self._stream = Cursor()
        for begin in range(start, len(indices), CHUNK_SIZE):
            yield from cursor.enter(indices[begin : begin + CHUNK_SIZE].tolist())


class ReproducibleShuffleBatchSampler(_Shuffle[Batch]):
    """Shuffle the order of an inner batch sampler's batches, reproducibly from ``(seed, epoch)``.

    Prefer :class:`ReproducibleShuffleSampler` where you can: it varies the batches'
    contents, this only their order.

    Args:
        batch_sampler: A finite sampler of batches (lists of indices).
        seed: Shuffle seed, an int in ``[0, 2**64)``, the same on every rank.

    Example:
        >>> batches = [[0, 1], [2, 3], [4, 5], [6, 7]]
        >>> sampler = ReproducibleShuffleBatchSampler(batches, seed=0)
        >>> sorted(sampler) == batches, list(sampler) == list(sampler)
        (True, True)
    """

    KIND: ClassVar[str] = "ReproducibleShuffleBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], seed: int) -> None:
        super().__init__(batch_sampler, seed)

    def _iterate(self) -> Iterator[Batch]:
        start = self._begin()
        batches = list(self.inner)
        order = self._rng().permutation(len(batches))[start:]
        cursor = self._stream = Cursor()
        yield from cursor.enter([batches[i] for i in order.tolist()])


class _Repeat(Composable[T]):
    _POSITION_KEYS: ClassVar[tuple[str, ...]] = ("pass", "offset")
    _FORWARDS_EPOCH: ClassVar[bool] = False  # each pass sets the inner epoch itself

    def __init__(self, inner: Iterable[T]) -> None:
        super().__init__(inner)
        self._resume_pass = 0  # pass the next __iter__ starts in (self._resume: its offset)
        self._pass = 0  # pass of the live iteration
        self._pass_start = 0  # offset in the live pass where iteration started

    @property
    def infinite(self) -> bool:
        """Always ``True``."""
        return True

    def _pending(self) -> tuple[int, int]:
        """``(pass, offset)`` the next ``__iter__`` starts at; ``set_skip`` counts full passes."""
        pass_, offset = self._resume_pass, self._resume + self._skip
        if self._skip:
            length = self._inner_length()
            if length == 0:
                raise ValueError(f"{type(self).__name__} cannot skip in an empty sampler.")
            pass_, offset = pass_ + offset // length, offset % length
        return pass_, offset

    def _position_state(self) -> dict[str, int]:
        if self._stream is None:
            pass_, offset = self._pending()
            return {"pass": pass_, "offset": offset}
        return {"pass": self._pass, "offset": self._pass_start + self._stream.yielded}

    def _restore_position(self, state: Mapping[str, Any]) -> None:
        self._resume_pass, self._resume = state["pass"], state["offset"]

    def _forget_position(self) -> None:
        self._resume_pass = self._resume = 0

    def _iterate(self) -> Iterator[T]:
        pass_, offset = self._pending()
        self._resume_pass = self._resume = self._skip = 0
        while True:
            cursor, items = self._start_pass(pass_, offset)
            for chunk in chunks_of(items):
                yield from cursor.enter(chunk)
            if self._stream is not cursor:
                return  # load_state_dict, set_epoch or a newer iteration took over
            if cursor.yielded == 0 and offset == 0:
                raise ValueError(
                    f"{type(self).__name__}: pass {pass_} of {type(self.inner).__name__} "
                    "yielded nothing; repeating an empty sampler would loop forever. Check "
                    "that the dataset is not empty."
                )
            pass_, offset = pass_ + 1, 0

    def _start_pass(self, pass_: int, offset: int) -> tuple[Cursor, Iterator[T]]:
        target = epoch_target(self.inner)
        if target is not None:
            target.set_epoch(self.epoch + pass_)
        self._origin = self.inner.state_dict() if isinstance(self.inner, Stateful) else None
        self._pass, self._pass_start = pass_, offset
        cursor = self._stream = Cursor()
        return cursor, iter_from(self.inner, offset)


class RepeatSampler(_Repeat[int]):
    """Repeat an inner sampler forever, reshuffling every pass.

    Pass ``p`` calls ``sampler.set_epoch(epoch + p)`` when the inner sampler has
    ``set_epoch`` (through a torch ``BatchSampler`` too), so a repeat over a
    :class:`ReproducibleShuffleSampler` yields a new order each pass. The position is the
    pass and the offset in it; ``set_skip`` assumes passes of ``len(sampler)`` items.

    Args:
        sampler: A sampler to repeat.

    Example:
        >>> repeat = RepeatSampler(range(3))
        >>> it = iter(repeat)
        >>> [next(it) for _ in range(7)]
        [0, 1, 2, 0, 1, 2, 0]
        >>> {k: repeat.state_dict()[k] for k in ("pass", "offset")}
        {'pass': 2, 'offset': 1}
    """

    KIND: ClassVar[str] = "RepeatSampler"

    def __init__(self, sampler: Iterable[int]) -> None:
        super().__init__(sampler)


class RepeatBatchSampler(_Repeat[Batch]):
    """Repeat an inner batch sampler forever; see :class:`RepeatSampler`.

    Args:
        batch_sampler: A batch sampler to repeat.

    Example:
        >>> it = iter(RepeatBatchSampler([[0, 1], [2]]))
        >>> [next(it) for _ in range(3)]
        [[0, 1], [2], [0, 1]]
    """

    KIND: ClassVar[str] = "RepeatBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch]) -> None:
        super().__init__(batch_sampler)


class _Shard(Composable[T]):
    def __init__(self, inner: Iterable[T], num_replicas: int, rank: int) -> None:
        super().__init__(inner)
        check_rank(num_replicas, rank)
        self.num_replicas, self.rank = int(num_replicas), int(rank)

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The number of replicas (not the rank: every rank loads rank 0's state)."""
        return {"num_replicas": self.num_replicas}

    def __len__(self) -> int:
        """Return the items this rank yields from a finite inner (or one pass of a repeat)."""
        length = self._inner_length()
        return length // self.num_replicas + (self.rank < length % self.num_replicas)

    def _iterate(self) -> Iterator[T]:
        start = self._begin()
        source = iter_from(self.inner, start * self.num_replicas)
        mine = itertools.islice(source, self.rank, None, self.num_replicas)
        cursor = self._stream = Cursor()
        for chunk in chunks_of(mine):
            yield from cursor.enter(chunk)


class ShardSampler(_Shard[int]):
    """Yield the items ``i`` of an inner sampler with ``i % num_replicas == rank``.

    Shard after you repeat, so that every rank yields the same number of items. On a finite
    inner sampler rank ``r`` yields ``len // num_replicas + (r < len % num_replicas)``.
    ``set_skip(k)`` skips ``k * num_replicas`` inner items, in O(1) when the inner can.

    Args:
        sampler: The sampler to shard (the same on every rank).
        num_replicas: Number of shards, >= 1.
        rank: This shard, in ``[0, num_replicas)``.

    Example:
        >>> [list(ShardSampler(range(5), num_replicas=2, rank=r)) for r in range(2)]
        [[0, 2, 4], [1, 3]]
    """

    KIND: ClassVar[str] = "ShardSampler"

    def __init__(self, sampler: Iterable[int], num_replicas: int, rank: int) -> None:
        super().__init__(sampler, num_replicas, rank)


class ShardBatchSampler(_Shard[Batch]):
    """Yield the batches ``i`` of an inner batch sampler with ``i % num_replicas == rank``.

    Args:
        batch_sampler: The batch sampler to shard (the same on every rank).
        num_replicas: Number of shards, >= 1.
        rank: This shard, in ``[0, num_replicas)``.

    Example:
        >>> list(ShardBatchSampler([[0, 1], [2, 3], [4]], num_replicas=2, rank=0))
        [[0, 1], [4]]
    """

    KIND: ClassVar[str] = "ShardBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], num_replicas: int, rank: int) -> None:
        super().__init__(batch_sampler, num_replicas, rank)


class _Skip(Composable[T]):
    def __init__(self, inner: Iterable[T], skip: int) -> None:
        super().__init__(inner)
        self.skip = check_count(type(self).__name__, "skip", skip, "inner items to skip once")
        self._first = True  # the construction skip applies to the first __iter__ only

    def _pending_start(self) -> int:
        return super()._pending_start() + (self.skip if self._first else 0)

    def _restore_position(self, state: Mapping[str, Any]) -> None:
        super()._restore_position(state)
        self._first = False  # the loaded position replaces the construction skip

    def _iterate(self) -> Iterator[T]:
        start = self._begin()
        self._first = False
        cursor = self._stream = Cursor()
        for chunk in chunks_of(iter_from(self.inner, start)):
            yield from cursor.enter(chunk)


class SkipSampler(_Skip[int]):
    """Skip the first ``skip`` items of an inner sampler, in the first ``__iter__`` only.

    The position counts inner items (skipped ones included), so a loaded state replaces the
    construction skip. Skips in O(1) when the inner sampler has ``set_skip``.

    Args:
        sampler: The sampler to skip into.
        skip: Inner items to skip once, >= 0.

    Example:
        >>> skip = SkipSampler(range(5), skip=2)
        >>> list(skip), list(skip)
        ([2, 3, 4], [0, 1, 2, 3, 4])
    """

    KIND: ClassVar[str] = "SkipSampler"

    def __init__(self, sampler: Iterable[int], skip: int) -> None:
        super().__init__(sampler, skip)


class SkipBatchSampler(_Skip[Batch]):
    """Skip the first ``skip`` batches of an inner batch sampler, in the first ``__iter__`` only.

    Args:
        batch_sampler: The batch sampler to skip into.
        skip: Inner batches to skip once, >= 0.

    Example:
        >>> list(SkipBatchSampler([[0, 1], [2, 3], [4]], skip=1))
        [[2, 3], [4]]
    """

    KIND: ClassVar[str] = "SkipBatchSampler"

    def __init__(self, batch_sampler: Iterable[Batch], skip: int) -> None:
        super().__init__(batch_sampler, skip)
