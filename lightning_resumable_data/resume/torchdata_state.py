"""Reading a state that torchdata's own ``StatefulDataLoader`` saved.

A job that switches from ``torchdata.stateful_dataloader.StatefulDataLoader`` to this
package's loader mid-run has a checkpoint in torchdata's layout: per-rank iterator state
with the batches yielded in the current pass (``_num_yielded``, or a worker snapshot's step
plus the steps since). Under the same topology (world size, batch size) that count is all
a position needs; torchdata's state holds no epoch (the sampler's ``set_epoch`` decides it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TorchdataPosition", "read_torchdata_state"]

_NUM_YIELDED = "_num_yielded"
_SNAPSHOT = "_snapshot"
_SNAPSHOT_STEP = "_snapshot_step"
_STEPS_SINCE_SNAPSHOT = "_steps_since_snapshot"
_FINISHED = "_iterator_finished"


@dataclass(frozen=True, slots=True)
class TorchdataPosition:
    """What a torchdata state says about the position.

    Attributes:
        batches: Batches the saved pass had yielded.
        finished: Whether that pass had been exhausted (the epoch is over).
    """

    batches: int
    finished: bool


def read_torchdata_state(state: object) -> TorchdataPosition | None:
    """The position in a torchdata ``StatefulDataLoader`` state; ``None`` if it is not one.

    Example:
        >>> read_torchdata_state({"_num_yielded": 3, "_iterator_finished": False})
        TorchdataPosition(batches=3, finished=False)
        >>> read_torchdata_state({"_snapshot": {"_snapshot_step": 4},
        ...                       "_steps_since_snapshot": 1, "_iterator_finished": True})
        TorchdataPosition(batches=5, finished=True)
        >>> read_torchdata_state({"version": 2, "kind": "StatefulDataLoader"}) is None
        True
    """
    if not isinstance(state, Mapping) or "kind" in state:
        return None
    counts: tuple[Any, ...]
    if isinstance(state.get(_SNAPSHOT), Mapping):
        counts = (state[_SNAPSHOT].get(_SNAPSHOT_STEP, 0), state.get(_STEPS_SINCE_SNAPSHOT, 0))
    elif _NUM_YIELDED in state:
        counts = (state[_NUM_YIELDED],)
    else:
        return None
    if not all(_is_count(count) for count in counts):
        return None  # checked before adding: "3" or True is not a batch count
    return TorchdataPosition(batches=sum(counts), finished=bool(state.get(_FINISHED, False)))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
