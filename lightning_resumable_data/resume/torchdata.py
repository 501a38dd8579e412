"""Resuming any other sampler, or an iterable dataset: torchdata's own per-rank state.

The fallback for a sampler with neither a global position nor ``set_skip``: torchdata's
``StatefulDataLoader`` state, which resumes by replaying the sampler up to the saved
position (O(position)) and does not survive a change of world size or ``num_workers``. A
one-time warning says so at the first restore.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from lightning_resumable_data._progress import CountingIterator, Progress
from lightning_resumable_data.resume.base import Layout, Restored, ResumeStrategy
from lightning_resumable_data.resume.torchdata_state import (
    TorchdataPosition,
    read_torchdata_state,
)
from lightning_resumable_data.state import StateMismatchError

__all__ = ["TorchdataResume"]

# The keys of our own layout; everything else at a state's top level is torchdata's.
_OURS: Final = (
    *("version", "kind", "fingerprint", "epoch", "batches_yielded", "batch_size"),
    *("num_replicas", "torchdata"),
)


class TorchdataResume(ResumeStrategy):
    """The strategy that leaves the position to torchdata's loader.

    torchdata's behaviour exactly: the user's ``set_epoch`` stands, and torch's global RNG
    (or the user's ``generator``) drives the shuffle and the worker seeds. Its state keeps
    torchdata's keys (``_snapshot``, ``_num_yielded``, ...) at the top level, so torchdata's
    own loader can load it too.

    Args:
        sampler: The sampler (``None`` for an iterable dataset).
        layout: The loader's layout.
        strict: Unused: torchdata checks nothing.
        native_state: torchdata's ``state_dict`` of the loader.
        native_load: torchdata's ``load_state_dict`` of the loader.
    """

    mode: ClassVar = "torchdata"
    seeds_workers: ClassVar[bool] = False

    def __init__(
        self,
        sampler: Any,
        layout: Layout,
        strict: bool,
        native_state: Callable[[], dict[str, Any]],
        native_load: Callable[[dict[str, Any]], None],
    ) -> None:
        super().__init__(sampler, layout, strict)
        self._native_state, self._native_load = native_state, native_load
        self._warned = False

    def begin(self, progress: Progress, iterator: CountingIterator) -> None:
        """Nothing: the user's ``set_epoch`` and torch's RNG decide (torchdata's rule)."""

    def save(
        self,
        progress: Progress,
        batches: int,
        fingerprint: Mapping[str, Any],
        current: bool = True,
    ) -> dict[str, Any]:
        """The torchdata state at the top level, with our position entries beside it."""
        return {**self._native_state(), **super().save(progress, batches, fingerprint, current)}

    def restore(self, state: dict[str, Any]) -> Restored:
        """Hand torchdata its part of the state (this replays the sampler: warned once)."""
        self._warn_replay()
        inner = state.get("torchdata")  # the layout of earlier versions: nested
        if not isinstance(inner, dict):
            inner = {key: value for key, value in state.items() if key not in _OURS}
        if read_torchdata_state(inner) is None:
            raise StateMismatchError(
                f"Cannot load this state into {self.layout.kind}: it resumes through "
                "torchdata (its sampler has no position) but holds no torchdata iterator "
                "state ('_num_yielded' or '_snapshot'). It is truncated, or was saved by a "
                "loader with a position sampler: use the same sampler as the run that saved it."
            )
        self._native_load(inner)
        return Restored(Progress(epoch=state["epoch"], batches_yielded=state["batches_yielded"]))

    def restore_torchdata(
        self, state: dict[str, Any], position: TorchdataPosition, epoch: int
    ) -> Restored:
        """A state torchdata's loader saved: handed to torchdata unchanged (replays: warned)."""
        self._warn_replay()
        progress = Progress(epoch=epoch)
        self._native_load(state)
        return Restored(progress)

    def _warn_replay(self) -> None:
        if self._warned:
            return
        self._warned = True
        name = "this iterable dataset" if self.sampler is None else type(self.sampler).__name__
        warnings.warn(
            f"{self.layout.kind} resumes {name} through torchdata's per-rank state: it "
            "replays the sampler up to the saved position (O(position)) and cannot change "
            "world size or num_workers. Use lightning_resumable_data.DistributedSampler for "
            "an O(1), elastic resume.",
            UserWarning,
            stacklevel=4,
        )
