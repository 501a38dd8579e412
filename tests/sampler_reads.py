"""Reading samplers of every rank in step: the global stream, and the state after it.

Shared by the data-change tests (``test_data_changes.py``, ``test_mixture_added.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_resumable_data import DistributedSampler


def read(
    group: Sequence[DistributedSampler], state: dict[str, Any] | None, steps: int | None
) -> tuple[list[int], dict[str, Any]]:
    """The global stream of ``steps`` steps of a sample per rank (``None``: all), the state."""
    for sampler in group:
        if state is not None:
            sampler.load_state_dict(state)
    iterators = [iter(s) for s in group]
    stream: list[int] = []
    while steps is None or steps > 0:
        try:
            stream += [next(it) for it in iterators]
        except StopIteration:
            break
        steps = None if steps is None else steps - 1
    first = group[0]
    return stream, first.state_at(first.epoch, min(first.consumed, first.epoch_size()))
