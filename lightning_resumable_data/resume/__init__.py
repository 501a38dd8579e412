"""How a :class:`~lightning_resumable_data.StatefulDataLoader` saves and restores its position.

One strategy per kind of sampler, chosen once when the loader is built
(:func:`choose_strategy`):

* :class:`PositionResume`: a position sampler (this package's ``DistributedSampler`` and its
  subclasses): one global position, O(1) and elastic;
* :class:`SkipResume`: a sampler with ``set_skip`` (the composable samplers);
* :class:`TorchdataResume`: anything else, through torchdata's own per-rank state.

The resume path walks down the layers once: loader, state check
(:func:`~lightning_resumable_data.state.check_state`), strategy, sampler, index math.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_resumable_data._batching import PositionSampler, SkippableSampler
from lightning_resumable_data.resume.base import (
    Layout,
    Restored,
    RestoredPosition,
    ResumeMode,
    ResumeStrategy,
)
from lightning_resumable_data.resume.position import PositionResume
from lightning_resumable_data.resume.skip import SkipResume
from lightning_resumable_data.resume.torchdata import TorchdataResume
from lightning_resumable_data.resume.torchdata_state import (
    TorchdataPosition,
    read_torchdata_state,
)

__all__ = [
    "Layout",
    "PositionResume",
    "Restored",
    "RestoredPosition",
    "ResumeMode",
    "ResumeStrategy",
    "SkipResume",
    "TorchdataPosition",
    "TorchdataResume",
    "choose_strategy",
    "read_torchdata_state",
]


def choose_strategy(
    sampler: Any,
    layout: Layout,
    strict: bool,
    *,
    batch_sampler: object,
    skips_batches: bool,
    native_state: Callable[[], dict[str, Any]],
    native_load: Callable[[dict[str, Any]], None],
) -> ResumeStrategy:
    """The strategy for a loader whose samples ``sampler`` orders.

    Args:
        sampler: The sampler that orders the samples (``None``: an iterable dataset).
        layout: The loader's layout.
        strict: Refuse a state saved under another configuration (``strict_resume``).
        batch_sampler: The loader's batch sampler (a position strategy caps short epochs).
        skips_batches: The loader has a custom batch sampler, whose ``set_skip`` counts
            batches; a position sampler then resumes by skipping too.
        native_state: torchdata's ``state_dict`` of the loader (the fallback's state).
        native_load: torchdata's ``load_state_dict`` of the loader.

    Example:
        >>> from lightning_resumable_data import DistributedSampler
        >>> sampler = DistributedSampler(range(8), num_replicas=1, rank=0)
        >>> choose_strategy(sampler, Layout("demo", 2, 1, False), True, batch_sampler=None,
        ...     skips_batches=False, native_state=dict, native_load=print).mode
        'position'
    """
    if isinstance(sampler, PositionSampler) and not skips_batches:
        return PositionResume(sampler, layout, strict, batch_sampler)
    if isinstance(sampler, SkippableSampler):
        return SkipResume(sampler, layout, strict, skips_batches)
    return TorchdataResume(sampler, layout, strict, native_state, native_load)
