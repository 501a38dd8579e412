"""A sequential sampler that starts at a given index and saves its position in O(1).

The ``ResumableSequentialSampler`` of llm-pytorch (``llm.datasets.sharded``), speaking this
package's contract (``set_epoch``, ``set_skip``, ``state_dict``, ``load_state_dict``). It is
the natural inner sampler of a Determined-style chain
(:mod:`lightning_resumable_data.samplers.composable`) and the sampler to put under a dataset
that already partitions itself over ranks.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterator, Sized
from typing import Any, Final

import torch.utils.data

from lightning_resumable_data.samplers._arguments import check_non_negative_int, dataset_length
from lightning_resumable_data.state import (
    ResumeWarning,
    StateMismatchError,
    check_state,
    make_state,
)

__all__ = ["ResumableSequentialSampler"]


class ResumableSequentialSampler(torch.utils.data.Sampler[int]):
    """Yield ``start_index, ..., len(data_source) - 1``, then ``0, ..., len - 1`` each time after.

    ``start_index`` is a one-shot resume point: it applies to the first ``__iter__`` only
    (even if ``set_epoch`` is called before it), and every later ``__iter__`` starts at 0.
    Iteration is a plain ``range`` iterator, so the position is read off it in O(1) with no
    per-item bookkeeping and nothing is materialised.

    State keys: ``version``, ``kind``, ``fingerprint`` (``dataset_length``), ``epoch``,
    ``index`` (the next index the sampler yields; ``dataset_length`` once the epoch is done).

    Args:
        data_source: A sized, non-empty dataset.
        start_index: Index the first ``__iter__`` starts from, in ``[0, len(data_source)]``.

    Raises:
        TypeError: ``data_source`` has no ``__len__`` or ``start_index`` is not an int.
        ValueError: ``data_source`` is empty or ``start_index`` is out of range.

    Example:
        >>> sampler = ResumableSequentialSampler(range(5), start_index=3)
        >>> list(sampler), list(sampler)
        ([3, 4], [0, 1, 2, 3, 4])
        >>> it = iter(sampler)
        >>> next(it), sampler.state_dict()["index"]
        (0, 1)
        >>> resumed = ResumableSequentialSampler(range(5))
        >>> resumed.load_state_dict(sampler.state_dict())
        >>> list(resumed)
        [1, 2, 3, 4]
    """

    KIND: Final = "ResumableSequentialSampler"

    def __init__(self, data_source: Sized, start_index: int = 0) -> None:
        self.data_length = dataset_length(data_source, type(self).__name__)
        start_index = check_non_negative_int("start_index", start_index)
        if start_index > self.data_length:
            raise ValueError(
                f"start_index={start_index} must be <= len(data_source)={self.data_length}; "
                "pass the index of the next sample to read (0 to start at the beginning)."
            )
        self.start_index = start_index
        self.epoch = 0
        self._resume_at = start_index  # index the next __iter__ starts from (one-shot)
        self._restored = False  # whether _resume_at came from load_state_dict
        self._skip = 0  # samples the next __iter__ skips (one-shot, set_skip)
        self._live: Iterator[int] | None = None  # the range iterator handed out last

    @property
    def fingerprint(self) -> dict[str, Any]:
        """Everything the order depends on: the dataset length."""
        return {"dataset_length": self.data_length}

    @property
    def index(self) -> int:
        """The next index this sampler yields (the live iterator's, else the next one's)."""
        if self._live is None:
            return min(self._resume_at + self._skip, self.data_length)
        return self.data_length - operator.length_hint(self._live)

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch; moving to another epoch starts it at index 0.

        Setting the epoch it is already at keeps a restored position (Lightning calls
        ``set_epoch`` at the start of every epoch, including the resumed one). The
        constructor's ``start_index`` is kept for the first ``__iter__`` either way.
        """
        epoch = check_non_negative_int("epoch", epoch)
        if epoch == self.epoch:
            return
        if self._restored:
            if self._resume_at:
                warnings.warn(
                    f"set_epoch({epoch}) discards the restored position (epoch {self.epoch}, "
                    f"index {self._resume_at}). If this run should continue epoch "
                    f"{self.epoch}, call set_epoch({self.epoch}) instead.",
                    ResumeWarning,
                    stacklevel=2,
                )
            self._resume_at = 0
            self._restored = False
        self.epoch = epoch
        self._live = None

    def set_skip(self, samples: int) -> None:
        """Skip ``samples`` more indices at the start of the next ``__iter__`` only."""
        self._skip = check_non_negative_int("samples", samples)

    def __iter__(self) -> Iterator[int]:
        # The one-shot position is consumed when iteration really starts (the first
        # ``next``), not here: torch's multi-worker DataLoader calls ``iter`` on its batch
        # sampler twice and discards the first iterator.
        self._live = None
        return self._iterate()

    def _iterate(self) -> Iterator[int]:
        start = min(self._resume_at + self._skip, self.data_length)
        self._resume_at = self._skip = 0
        self._restored = False
        self._live = live = iter(range(start, self.data_length))
        yield from live

    def _end_live_iteration(self) -> None:
        """Drop the live iterator (a wrapper iterates anew): the state is the next start."""
        self._live = None

    def __len__(self) -> int:
        """Return the number of indices in a full epoch: ``len(data_source)``."""
        return self.data_length

    def state_dict(self) -> dict[str, Any]:
        """Return the position: the epoch and the next index, with the fingerprint."""
        return make_state(self.KIND, self.fingerprint, epoch=self.epoch, index=self.index)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a position; the next ``__iter__`` continues from it.

        Raises:
            StateMismatchError: The state is of another version or kind, is malformed, was
                saved with a different dataset length, or its index is past the end.
        """
        check_state(state_dict, self.KIND, self.fingerprint, {"epoch": int, "index": int})
        if state_dict["index"] > self.data_length:
            raise StateMismatchError(
                f"Cannot load this state into {self.KIND}: index={state_dict['index']} is "
                f"past the end of a dataset of {self.data_length} samples. The state is "
                "corrupted or belongs to another dataset."
            )
        self.epoch = state_dict["epoch"]
        self._resume_at = state_dict["index"]
        self._restored = True
        self._skip = 0
        self._live = None
