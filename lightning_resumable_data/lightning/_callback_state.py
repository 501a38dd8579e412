"""The callback's phases and checkpoint entry: checked when given, saved, compared on resume.

The entry holds the phases, the training seed and the online mixer's memory. On resume the
saved phases must be this callback's, and a ``ResumableDataModule``'s checkpoint must hold
its data position, unless the DataModule allows configuration changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from lightning_resumable_data.lightning._contract import PhasedDataModule, checkpoint_key
from lightning_resumable_data.samplers.schedule import MixturePhase, check_phases, phase_dict
from lightning_resumable_data.state import StateMismatchError

__all__ = ["callback_state", "check_saved_state", "checked_phases", "require_data_position"]

_STATE_VERSION = 1


def checked_phases(phases: Iterable[object]) -> tuple[MixturePhase, ...]:
    """``phases`` as a tuple, if they are ``MixturePhase`` values of one kind, in order.

    Raises:
        TypeError: A phase is not a ``MixturePhase``.
        ValueError: Phases of both kinds, or not in strictly increasing order.
    """
    checked = tuple(phases)
    for phase in checked:
        if not isinstance(phase, MixturePhase):
            raise TypeError(
                f"phases must be MixturePhase values, got {phase!r}; write "
                "MixturePhase(start_step=..., weights={...})."
            )
    check_phases(cast("tuple[MixturePhase, ...]", checked))
    return cast("tuple[MixturePhase, ...]", checked)


def callback_state(
    phases: Sequence[MixturePhase],
    training_seed: int | None,
    source_metrics: object,
    data_history: object = None,
) -> dict[str, Any]:
    """The callback's checkpoint entry.

    Example:
        >>> sorted(callback_state([], 7, {}))
        ['data_history', 'phases', 'source_metrics', 'training_seed', 'version']
    """
    return {
        "version": _STATE_VERSION,
        "phases": [phase_dict(p) for p in phases],
        "training_seed": training_seed,
        "source_metrics": source_metrics,
        "data_history": data_history,
    }


def check_saved_state(state: object, phases: Sequence[MixturePhase], allowed: bool) -> None:
    """Refuse an entry whose phases are not ``phases``, unless the change is ``allowed``.

    Raises:
        TypeError: ``state`` is not a dict.
        StateMismatchError: The phases changed (or were dropped) and that is not allowed,
            or a newer version of the package wrote the state.
    """
    if not isinstance(state, dict):
        raise TypeError(
            f"ResumableDataCallback.load_state_dict expected the dict its state_dict() "
            f"wrote, got {type(state).__name__}."
        )
    version = state.get("version", _STATE_VERSION)
    if version != _STATE_VERSION:
        raise StateMismatchError(
            f"Cannot resume: the checkpoint's ResumableDataCallback state has version "
            f"{version!r}, and this version of lightning-resumable-data reads version "
            f"{_STATE_VERSION}. Resume with the version of the package that wrote it."
        )
    saved = state.get("phases")
    now = [phase_dict(p) for p in phases]
    if saved == now or allowed:
        return
    if not now:
        raise StateMismatchError(
            f"Cannot resume: the checkpoint's data follows mixture phases {saved}, and this "
            "ResumableDataCallback has none. Pass "
            "ResumableDataCallback(phases=[MixturePhase(...), ...]) with the same phases."
        )
    raise StateMismatchError(
        f"Cannot resume: the mixture phases changed (saved {saved}, now {now}). The "
        "resumed run would not mix what the interrupted run mixed. Restore the saved "
        "phases, or pass ResumableDataModule(allow_config_change=True) to accept the "
        "change."
    )


def require_data_position(checkpoint: dict[str, Any], datamodule: object) -> None:
    """Refuse a checkpoint without a ``ResumableDataModule``'s data position.

    Nothing is required of another DataModule, nor of one that allows configuration changes.

    Raises:
        StateMismatchError: The DataModule's checkpoint entry has no ``train_loader``.
    """
    if not isinstance(datamodule, PhasedDataModule) or datamodule.allow_config_change:
        return
    key = checkpoint_key(datamodule)
    state = checkpoint.get(key)
    if not isinstance(state, dict) or "train_loader" not in state:
        raise StateMismatchError(
            "Cannot resume: the checkpoint holds no data position (no "
            f"{key} state with a train_loader). Resuming would "
            "start the epoch again and replay what was trained. Resume from a checkpoint "
            "written with ResumableDataModule, or pass "
            "ResumableDataModule(allow_config_change=True) to start the data afresh."
        )
