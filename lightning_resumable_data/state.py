"""The state contract shared by every sampler and loader of this package.

A state dict is plain JSON-serialisable data::

    {
        "version": 2,                 # STATE_VERSION, checked on load
        "kind": "DistributedSampler", # which class wrote it
        "fingerprint": {...},         # everything the order depends on (seed, sizes, ...)
        ...                           # the position: epoch, consumed, nested states
    }

Loading checks the version, the kind, the presence and type of the position keys and the
fingerprint *before* touching any attribute, so a refused state leaves the object as it
was. Mismatches raise :class:`StateMismatchError` (a ``ValueError``) that names each
differing value, saved and current, and says how to fix it.

Example:
    >>> state = make_state("Demo", {"seed": 0}, epoch=1)
    >>> check_state(state, "Demo", {"seed": 0}, {"epoch": int})
    >>> check_state(state, "Demo", {"seed": 1}, {"epoch": int})
    Traceback (most recent call last):
    ...
    lightning_resumable_data.state.StateMismatchError: Cannot load this state into Demo: ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "STATE_VERSION",
    "DataPositionError",
    "Fingerprint",
    "ResumeWarning",
    "StateMismatchError",
    "check_state",
    "make_state",
]

STATE_VERSION: Final = 2
# What each older version's orders lack, for the error that refuses to load it.
_RETIRED: Final[Mapping[int, str]] = {
    1: (
        "version 1 was written by lightning-resumable-data 0.1; in 0.2 the 'feistel' order, "
        "the mixture order, the shard orders and the sample keys (SampleKey.rng, "
        "worker_seed) changed (a statistically sound shuffle at every n and fixed-width "
        "keys), while the 'randperm' order is unchanged. Resuming it here would continue a "
        "different order. Finish that run with version 0.1, which wrote it (pip install -e . "
        "in a checkout of that version), or start a fresh run"
    ),
}

Fingerprint = Mapping[str, Any]


class StateMismatchError(ValueError):
    """A state dict that cannot be loaded: wrong version, kind, shape or fingerprint."""


class ResumeWarning(UserWarning):
    """A resume that works but may not be what the user intended."""


class DataPositionError(RuntimeError):
    """The batch a trainer is about to train is not the one its progress counters imply.

    Raised by :class:`~lightning_resumable_data.ResumableDataCallback`'s run-time check (on
    by default): training on would replay or skip data. The message names the global step,
    the expected and the actual data position.
    """


def make_state(kind: str, fingerprint: Fingerprint, **position: Any) -> dict[str, Any]:
    """Build a versioned state dict.

    Example:
        >>> make_state("Demo", {"seed": 0}, epoch=2)
        {'version': 2, 'kind': 'Demo', 'fingerprint': {'seed': 0}, 'epoch': 2}
    """
    return {"version": STATE_VERSION, "kind": kind, "fingerprint": dict(fingerprint), **position}


def _type_name(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__


def check_state(
    state: object,
    kind: str,
    fingerprint: Fingerprint,
    required: Mapping[str, type | tuple[type, ...]],
) -> None:
    """Raise unless ``state`` was written by ``kind`` with the same ``fingerprint``.

    Args:
        state: The candidate state dict.
        kind: The loading class's kind.
        fingerprint: The loading object's current fingerprint.
        required: Position keys the state must hold, with their types. ``int`` keys must be
            non-negative.

    Raises:
        TypeError: ``state`` is not a mapping.
        StateMismatchError: Anything else that prevents an exact resume.
    """
    prefix = f"Cannot load this state into {kind}:"
    if not isinstance(state, Mapping):
        raise TypeError(
            f"{prefix} expected a dict from {kind}.state_dict(), got {type(state).__name__}."
        )
    version = state.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version in _RETIRED:
        raise StateMismatchError(
            f"{prefix} it has version={version}, this library reads version={STATE_VERSION}: "
            f"{_RETIRED[version]}."
        )
    if version != STATE_VERSION:
        raise StateMismatchError(
            f"{prefix} it has version={version!r}, this library reads version={STATE_VERSION}. "
            "Load it with the library version that wrote it, or start a fresh run."
        )
    saved_kind = state.get("kind")
    if saved_kind != kind:
        raise StateMismatchError(
            f"{prefix} it was written by kind={saved_kind!r}. Load each state into the same "
            "kind of object that wrote it."
        )
    saved = state.get("fingerprint")
    if not isinstance(saved, Mapping):
        raise StateMismatchError(f"{prefix} it has no 'fingerprint' dict; it is corrupted.")
    changed = [
        key
        for key in sorted(set(saved) | set(fingerprint))
        if _normalise(saved.get(key)) != _normalise(fingerprint.get(key))
    ]
    differences = [
        f"{key}: saved {_shown(key, saved)}, now {_shown(key, fingerprint)}" for key in changed
    ]
    if differences:
        raise StateMismatchError(
            f"{prefix} the order it resumes depends on values that changed ("
            + "; ".join(differences)
            + "). Resuming would replay or skip samples. Rebuild it with the saved values, "
            "or start a fresh run" + "".join(_HINTS.get(key, "") for key in changed) + "."
        )
    for key, expected in required.items():
        value = state.get(key)
        wrong_int = expected is int and (isinstance(value, bool) or not isinstance(value, int))
        if key not in state or wrong_int or not isinstance(value, expected):
            raise StateMismatchError(
                f"{prefix} key {key!r} is {'missing' if key not in state else repr(value)}; "
                f"expected {_type_name(expected)}. The state is truncated or corrupted."
            )
        if isinstance(value, int) and value < 0:
            raise StateMismatchError(f"{prefix} key {key!r}={value} must be >= 0.")


_HINTS: Final = {  # what to do about a changed fingerprint value, where a word helps
    "initial": " (new weights start exactly at the resume point with "
    "data_changes=DataChangePolicy(sources='at_resume'), a ResumableDataModule's default, or "
    "sampler.data_changes = DataChangePolicy(); a change of phases needs "
    "allow_config_change=True: docs/changes.md)",
    "dataset_length": " (a dataset that grew or shrank is followed exactly with "
    "sampler.data_changes = DataChangePolicy() before loading, as ResumableDataModule does by "
    "default: docs/changes.md)",
    "mode": " (build the loader over the sampler it was saved with: 'position' is a sampler "
    "of this package, e.g. sampler=DistributedSampler(...); 'torchdata' is torch's own "
    "sampling, shuffle=True or a torch sampler)",
}


def _shown(key: str, fingerprint: Mapping[str, Any]) -> str:
    """A fingerprint value as the message shows it; a mixture's default weights in words.

    Example:
        >>> _shown("initial", {"sizes": [4, 2], "initial": {"weights": [4.0, 2.0]}})
        'no weights (proportional to the source sizes [4, 2])'
    """
    value = fingerprint.get(key, "<missing>")
    sizes = fingerprint.get("sizes")
    proportional = (
        key == "initial"
        and isinstance(value, Mapping)
        and isinstance(sizes, list)
        and _normalise(value.get("weights")) == _normalise([float(s) for s in sizes])
    )
    return f"no weights (proportional to the source sizes {sizes})" if proportional else repr(value)


def _normalise(value: object) -> object:
    """Compare fingerprints as JSON would see them (tuples and lists alike)."""
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _normalise(v) for k, v in value.items()}
    return value
