"""The base of the composable samplers: the contract, one-shot skips and the nested state.

Every composable sampler wraps an *inner* sampler and keeps a position in its own current
iteration. Its state nests the inner sampler's state **as it was when that iteration
began** (the *origin*), not the inner's live state: a wrapper may read ahead (a shard reads
``num_replicas`` items per item it yields, a shuffle reads a whole epoch), so the inner's
live position says nothing exact about the wrapper's. Restoring loads the origin into the
inner and then skips it forward from the wrapper's own position (``set_skip``, O(1), when
the inner supports it; ``itertools.islice`` otherwise). So the outermost position carries
the resume point down the chain, each level converting it into its inner's units.

How a wrapper reaches its inner sampler (protocols, skips, epochs, counting) is
:mod:`~lightning_resumable_data.samplers._inner`; this module re-exports it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, ClassVar, TypeVar

import torch.utils.data

from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.samplers._inner import (
    Cursor,
    Stateful,
    SupportsSetEpoch,
    SupportsSetSkip,
    check_count,
    chunks_of,
    end_live_iteration,
    epoch_target,
    iter_from,
)
from lightning_resumable_data.state import StateMismatchError, check_state, make_state

__all__ = [
    "Batch",
    "Composable",
    "Cursor",
    "Stateful",
    "SupportsSetEpoch",
    "SupportsSetSkip",
    "check_count",
    "chunks_of",
    "end_live_iteration",
    "epoch_target",
    "is_infinite",
    "iter_from",
]

T = TypeVar("T")

Batch = list[int]


def is_infinite(sampler: object) -> bool:
    """Whether ``sampler`` is a composable sampler that never stops (it contains a repeat)."""
    return isinstance(sampler, Composable) and sampler.infinite


class Composable(torch.utils.data.Sampler[T]):
    """Base of the composable samplers: the contract, with the position in own items.

    Subclasses implement :meth:`_iterate`, a generator that starts with :meth:`_begin`
    (which consumes the pending position and records the inner's origin) and yields through
    the :class:`Cursor` it sets as ``self._stream``. They may override the ``_position_*``
    hooks when one int is not the whole position.
    """

    KIND: ClassVar[str]
    _POSITION_KEYS: ClassVar[tuple[str, ...]] = ("position",)
    _FORWARDS_EPOCH: ClassVar[bool] = True

    def __init__(self, inner: Iterable[T]) -> None:
        if not isinstance(inner, Iterable) or isinstance(inner, (str, bytes, Mapping)):
            raise TypeError(
                f"{type(self).__name__} wraps a sampler (an iterable of indices or batches), "
                f"got {type(inner).__name__}. For a dataset, wrap "
                "ResumableSequentialSampler(dataset) instead."
            )
        self.inner = inner
        self.epoch = 0
        self._resume = 0  # own position the next __iter__ starts from (load_state_dict)
        self._skip = 0  # own items the next __iter__ skips on top of it (set_skip)
        self._origin: dict[str, Any] | None = None  # inner's state when the iteration began
        self._started_at = 0  # own position at which the live iteration started
        self._stream: Cursor | None = None

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything this level's order depends on, apart from the epoch and the inner."""
        return {}

    @property
    def infinite(self) -> bool:
        """Whether iteration never ends."""
        return is_infinite(self.inner)

    @property
    def position(self) -> int:
        """Own items of the current iteration consumed (or skipped), as far as known here."""
        if self._stream is None:
            return self._pending_start()
        return self._started_at + self._stream.yielded

    def __iter__(self) -> Iterator[T]:
        # The pending position is consumed when iteration really starts (the first
        # ``next``), not here: torch's multi-worker DataLoader calls ``iter`` on its batch
        # sampler twice and discards the first iterator.
        self._end_live_iteration()
        return self._iterate()

    def _end_live_iteration(self) -> None:
        """Drop the live iteration, the inner's too (the next one iterates it anew)."""
        self._stream = None
        end_live_iteration(self.inner)

    def _iterate(self) -> Iterator[T]:
        raise NotImplementedError

    def __len__(self) -> int:
        """Return the inner sampler's length (of one pass for a repeat, whatever a skip skips).

        Raises:
            TypeError: The inner sampler has no ``__len__``.
        """
        return self._inner_length()

    def _inner_length(self) -> int:
        if not isinstance(self.inner, Sized):
            raise TypeError(
                f"{type(self).__name__} has no length: its inner sampler "
                f"{type(self.inner).__name__} has no __len__."
            )
        return len(self.inner)

    def _pending_start(self) -> int:
        return self._resume + self._skip

    def _begin(self) -> int:
        """Start an iteration: consume the pending position, record the inner's origin."""
        start = self._pending_start()
        self._resume = self._skip = 0
        self._origin = self.inner.state_dict() if isinstance(self.inner, Stateful) else None
        self._started_at = start
        return start

    def _position_state(self) -> dict[str, int]:
        return {"position": self.position}

    def _restore_position(self, state: Mapping[str, Any]) -> None:
        self._resume = state["position"]

    def _forget_position(self) -> None:
        self._resume = 0

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and forward it to the inner sampler.

        Setting the epoch it is already at keeps a restored position (Lightning calls
        ``set_epoch`` at the start of every epoch, including the resumed one); moving to
        another epoch starts that epoch from its beginning.
        """
        epoch = check_non_negative_int("epoch", epoch)
        if epoch != self.epoch:
            self.epoch = epoch
            self._forget_position()
            self._end_live_iteration()
        target = epoch_target(self.inner) if self._FORWARDS_EPOCH else None
        if target is not None:
            target.set_epoch(epoch)

    def set_skip(self, samples: int) -> None:
        """Skip ``samples`` more of this sampler's own items in the next ``__iter__`` only."""
        self._skip = check_count(type(self).__name__, "samples", samples, "items to skip once")

    def state_dict(self) -> dict[str, Any]:
        """Return the epoch, the position and the inner sampler's state (under ``inner``)."""
        state = make_state(self.KIND, self.fingerprint, epoch=self.epoch, **self._position_state())
        if isinstance(self.inner, Stateful):
            live = self._stream is not None and self._origin is not None
            state["inner"] = copy.deepcopy(self._origin) if live else self.inner.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position, the inner sampler's first; the next ``__iter__`` continues it.

        Everything is checked before anything changes: if this state or the nested one is
        refused, neither this sampler nor (for the samplers of this package) the inner one
        has changed.

        Raises:
            StateMismatchError: The state (or the nested one) is of another version or kind,
                is malformed, or was saved with a different configuration.
        """
        required: dict[str, type] = {"epoch": int}
        required.update(dict.fromkeys(self._POSITION_KEYS, int))
        check_state(state_dict, self.KIND, self.fingerprint, required)
        nested = state_dict.get("inner")
        if isinstance(self.inner, Stateful):
            if not isinstance(nested, Mapping):
                raise StateMismatchError(
                    f"Cannot load this state into {self.KIND}: it holds no 'inner' state, but "
                    f"the inner sampler {type(self.inner).__name__} is stateful. It was saved "
                    "from another chain; rebuild the chain that saved it."
                )
            self.inner.load_state_dict(dict(nested))
        elif "inner" in state_dict:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: it holds an 'inner' state, but the "
                f"inner sampler {type(self.inner).__name__} has no load_state_dict. It was "
                "saved from another chain; rebuild the chain that saved it."
            )
        self.epoch = state_dict["epoch"]
        self._restore_position(state_dict)
        self._skip = 0
        self._origin = self._stream = None
