"""Steps as positions: which global positions optimizer steps read, and cutting them.

Pure integer arithmetic over a sampler's epoch sizes (no Lightning): where the batches of
optimizer steps ``[A, B)`` lie in the epochs' orders, from where a fit starts, with
``accumulate_grad_batches`` and an epoch's short last step (Lightning steps the optimizer
at an epoch's end), and the cut of those positions from a sampler's order. Used by the
callback's ``skip_steps``, ``lrd skip`` and ``lrd trace`` of steps after a checkpoint.

Example:
    >>> check_skip_steps([(5, 8), range(20, 22)])
    [(5, 8), (20, 22)]
    >>> step_ranges((5, 8), step=2, epoch=0, consumed=2, accumulate=1, batches=lambda e, c: 10 - c)
    [(0, 5, 8)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from lightning_resumable_data.index.skips import to_base

__all__ = [
    "Start",
    "check_new_cuts",
    "check_skip_steps",
    "cut_steps",
    "epoch_batches",
    "step_ranges",
]


def check_skip_steps(value: Iterable[Any]) -> list[tuple[int, int]]:
    """``skip_steps`` as sorted ``(start, stop)`` step ranges; a ``ValueError`` names a bad one."""
    ranges = []
    for item in value:
        pair = (item.start, item.stop) if isinstance(item, range) else item
        if (
            not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
            or not 0 <= pair[0] < pair[1]
            or (isinstance(item, range) and item.step != 1)
        ):
            raise ValueError(
                f"skip_steps: {item!r} is not a step range; give (start, stop) pairs of "
                "optimizer steps with 0 <= start < stop (stop excluded), e.g. "
                "skip_steps=[(41300, 41340)] or [range(41300, 41340)]."
            )
        ranges.append((int(pair[0]), int(pair[1])))
    return sorted(ranges)


def epoch_batches(
    size: int, *, world: int, batch_size: int, drop_last: bool, sampler_drop_last: bool,
    limit: int | None, consumed: int = 0,
) -> int:  # fmt: skip
    """Batches a trainer takes from an epoch of ``size`` positions after ``consumed``.

    ``limit`` is where the trainer ends the epoch, in samples (``limit_train_batches``).

    Example:
        >>> epoch_batches(10, world=2, batch_size=2, drop_last=False, sampler_drop_last=False,
        ...               limit=None)
        3
    """
    left = max(size - consumed, 0)
    per_rank = left // world if sampler_drop_last else -(-left // world)
    batches = per_rank // batch_size if drop_last else -(-per_rank // batch_size)
    if limit is not None:
        batches = min(batches, max(0, math.ceil((limit - consumed) / (world * batch_size))))
    return batches


def step_ranges(
    steps: tuple[int, int],
    *,
    step: int,
    epoch: int,
    consumed: int,
    accumulate: int,
    batches: Callable[[int, int], int],
    step_samples: int = 1,
) -> list[tuple[int, int, int]]:
    """``(epoch, start, stop)``: the positions the optimizer steps ``[A, B)`` would read.

    From a fit at optimizer ``step``, ``consumed`` global samples into ``epoch``: its
    batches read from there, ``step_samples`` each (a resume under another layout may
    start between two batches of this one), and Lightning counts ``consumed //
    step_samples`` of them done. ``batches(e, c)`` is the number of batches left in epoch
    ``e`` after ``c`` samples (an epoch's last step may have fewer than ``accumulate``
    batches, as Lightning steps at an epoch's end). A range ending at an epoch's last
    batch may pass the epoch's size (the caller caps it).

    Raises:
        ValueError: ``A`` is before ``step`` (those steps are trained already).
    """
    first, stop = steps
    if first < step:
        raise ValueError(
            f"Cannot skip steps [{first}, {stop}): the fit starts at step {step}, so step "
            f"{first} is trained already. Resume from a checkpoint written before step "
            f"{first}, or skip from step {step} on."
        )
    found = []
    batch, offset = divmod(consumed, step_samples)  # Lightning's count, and the misalignment
    while step < stop:
        count = batch + batches(epoch, consumed)  # the epoch's batches, as Lightning counts
        base = batch // accumulate  # steps of this epoch before the fit's batch
        steps_left = -(-count // accumulate) - base
        lo = max(batch, (first - step + base) * accumulate)
        hi = min(count, (stop - step + base) * accumulate)
        if lo < hi:
            found.append((epoch, lo * step_samples + offset, hi * step_samples + offset))
        step += max(steps_left, 0)
        epoch, batch, offset, consumed = epoch + 1, 0, 0, 0
        if count == 0:
            break  # an empty epoch: nothing further to walk
    return found


def check_new_cuts(todo: Sequence[tuple[int, int]], done: Sequence[Sequence[int]]) -> None:
    """Refuse a new step range that overlaps one cut before without being it.

    A recorded cut was counted in the steps of the run that made it; the run counts on
    after it, so an edited range (say widened by two steps) cannot be told from a new one.

    Raises:
        ValueError: With both ranges and what to pass instead.
    """
    for first, stop in todo:
        for a, b in done:
            if first < b and a < stop:
                raise ValueError(
                    f"skip_steps ({first}, {stop}) overlaps the cut of steps ({a}, {b}) "
                    "this run made before, but is not it: steps after a cut are counted as "
                    "the run counts them now, so an edited range is ambiguous. Keep the "
                    f"recorded range ({a}, {b}) as it is, and add the further steps as a "
                    "range of their own, counted as the trainer counts steps now."
                )


class Start(NamedTuple):
    """Where a fit starts: its optimizer step and the data position (global samples)."""

    step: int
    epoch: int
    consumed: int
    step_samples: int


def cut_steps(
    sampler: Any,
    requests: Sequence[tuple[int, int]],
    start: Start,
    accumulate: int,
    batches: Callable[[int, int], int],
    epochs: int | None = None,
) -> list[tuple[int, int, int]]:
    """Cut the data of the step ranges ``requests`` from ``sampler``'s order; return the cuts.

    The cuts are returned as ``(epoch, first, stop)`` positions of the epochs' whole orders
    (a cut may span one made before). Every range is counted in the order as it stands
    (before any of these cuts: steps as the run that would train them counts them),
    overlapping ranges are one; the cuts are made from the last, so none moves another.
    ``epochs``: the trainer's ``max_epochs``, if any (an epoch it never reaches may be
    left empty).

    Raises:
        ValueError: A step already trained, or a cut that would leave an epoch no batch
            (Lightning ends a fit at an epoch without batches); nothing is cut then.
    """
    merged: list[tuple[int, int]] = []
    for first, stop in sorted(requests):
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((first, stop))
    cuts: list[tuple[int, int, int]] = []
    for steps in merged:
        for epoch, lo, hi in step_ranges(
            steps,
            step=start.step,
            epoch=start.epoch,
            consumed=start.consumed,
            accumulate=accumulate,
            batches=batches,
            step_samples=start.step_samples,
        ):
            hi = min(hi, sampler.epoch_size(epoch))
            if lo < hi:
                cuts.append((epoch, lo, hi))
    for epoch in sorted({e for e, _, _ in cuts if epochs is None or e < epochs}):
        left = sampler.epoch_size(epoch) - sum(hi - lo for e, lo, hi in cuts if e == epoch)
        if left <= (start.consumed if epoch == start.epoch else 0):
            raise ValueError(
                f"Cannot cut steps {', '.join(f'{a} to {b - 1}' for a, b in merged)}: that "
                f"leaves epoch {epoch} no batch (from where the fit starts), and Lightning "
                "ends a fit at an epoch without batches. Cut fewer steps (all but the "
                "epoch's last), or start the fit from a checkpoint of the next epoch."
            )
    whole = []  # the cuts as positions of the epochs' whole orders, for the record
    for epoch, lo, hi in sorted(cuts):
        first_last = to_base(np.array([lo, hi - 1], dtype=np.int64), sampler.cuts(epoch))
        whole.append((epoch, int(first_last[0]), int(first_last[1]) + 1))
    for epoch, lo, hi in sorted(cuts, reverse=True):
        sampler.skip_positions(epoch, lo, hi)
    return whole
