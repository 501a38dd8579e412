"""Mixture phases placed in the training sampler at the exact position of their step or epoch.

A ``start_step`` phase starts with the first batch of that optimizer step, counted as
Lightning counts steps (``accumulate_grad_batches``, a step at every epoch's end,
``limit_train_batches``) in the current layout (batch size x world size). On a resume under
another layout, the phases already passed keep the saved positions (they come with the
restored state) and later ones are placed from the resume point on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lightning_resumable_data.lightning.steps import limited_batches, step_position
from lightning_resumable_data.samplers.schedule import MixturePhase, check_phases

if TYPE_CHECKING:
    from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["phase_positions", "schedule_phases"]


def schedule_phases(
    sampler: MixtureSampler,
    phases: Sequence[MixturePhase],
    *,
    batch_size: int,
    drop_last: bool,
    trainer: Any,
    restored: Mapping[str, Any] | None,
    saved_step: int,
) -> None:
    """Install the phases as weight changes at exact (epoch, position)s, before any read.

    Args:
        sampler: The training sampler (not read yet).
        phases: The phases, in order.
        batch_size: Training samples per batch on each rank.
        drop_last: Whether the loader drops an epoch's ragged last batch.
        trainer: The trainer (``None`` without one): its step counting.
        restored: The loader state about to be restored, or ``None``.
        saved_step: The optimizer step the restored position belongs to.
    """
    positions, known = phase_positions(
        phases,
        per_rank=len(sampler),
        num_replicas=sampler.num_replicas,
        batch_size=batch_size,
        drop_last=drop_last,
        trainer=trainer,
        restored=restored,
        saved_step=saved_step,
    )
    if known:
        sampler.allow_schedule_change = True  # the phases were checked unchanged
    for phase, epoch, position in positions:
        sampler.update_weights(phase.weights, phase.temperature, epoch=epoch, position=position)


def phase_positions(
    phases: Sequence[MixturePhase],
    *,
    per_rank: int,
    num_replicas: int,
    batch_size: int,
    drop_last: bool,
    trainer: Any,
    restored: Mapping[str, Any] | None = None,
    saved_step: int = 0,
) -> tuple[list[tuple[MixturePhase, int, int]], bool]:
    """The ``(phase, epoch, global position)`` each phase still to come starts at.

    Pure arithmetic (``lrd plan`` counts with it, without torch). Also returns whether the
    resume is under a changed layout (the phases already passed are then left out).

    Example:
        >>> phase = MixturePhase(weights={"a": 1.0}, start_step=3)
        >>> [(p.start_step, e, at) for p, e, at in phase_positions(
        ...     [phase], per_rank=10, num_replicas=2, batch_size=4, drop_last=False,
        ...     trainer=None)[0]]
        [(3, 1, 0)]
    """
    check_phases(phases)
    batches = per_rank // batch_size if drop_last else -(-per_rank // batch_size)
    limit = getattr(trainer, "limit_train_batches", 1.0)
    batches = limited_batches(batches, limit if limit is not None else 1.0)
    if batches == 0:
        raise ValueError(
            f"batch_size={batch_size} is larger than a rank's share of a mixture "
            f"epoch ({per_rank}); lower it or raise samples_per_epoch."
        )
    accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
    step_samples = batch_size * num_replicas
    known = _resume_point(restored, saved_step, batch_size, num_replicas, step_samples)
    positions = []
    for phase in phases:
        if phase.start_epoch is not None:
            epoch, position = phase.start_epoch, 0
            if known and (epoch, position) <= (known["epoch"], known["consumed"]):
                continue  # passed: the saved schedule has it
        else:
            assert phase.start_step is not None
            if known and phase.start_step < known["from_step"]:
                continue  # passed: the saved schedule has it
            epoch, position = step_position(
                phase.start_step,
                batches=batches,
                step_samples=step_samples,
                accumulate=accumulate,
                **known,
            )
        positions.append((phase, epoch, position))
    return positions, bool(known)


def _resume_point(
    state: Mapping[str, Any] | None,
    saved_step: int,
    batch_size: int,
    num_replicas: int,
    step_samples: int,
) -> dict[str, int]:
    """Where the resumed step begins, for a resume under a changed layout, else ``{}``."""
    if state is None:
        return {}
    same_layout = (state.get("batch_size"), state.get("num_replicas")) == (
        batch_size,
        num_replicas,
    )
    if same_layout:
        return {}  # the phases land where they did: the schedules must agree exactly
    consumed = int(state["consumed"])
    return {
        "from_step": saved_step,
        "epoch": int(state["epoch"]),
        "batch": consumed // step_samples,
        "consumed": consumed,
    }
