"""The composable repeats: an inner sampler (or batch sampler) forever, a new epoch each pass."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from lightning_resumable_data.samplers._composition import (
    Batch,
    Composable,
    Cursor,
    Stateful,
    chunks_of,
    end_live_iteration,
    epoch_target,
    iter_from,
)

__all__ = ["RepeatBatchSampler", "RepeatSampler"]

T = TypeVar("T")


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

    @property
    def position(self) -> int:
        """Items of the current pass consumed or skipped (the state's ``offset``)."""
        return self._position_state()["offset"]

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
        end_live_iteration(self.inner)  # the last pass's, whatever its epoch
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
    :class:`~lightning_resumable_data.ReproducibleShuffleSampler` yields a new order each
    pass. The position is the pass and the offset in it; ``set_skip`` assumes passes of
    ``len(sampler)`` items.

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
