"""A :class:`MixtureSampler`'s configuration and its checks: the mixture, the epoch, the weights.

Also the mixture order's law (:data:`ORDER`, saved in the fingerprint) and the laws of
earlier releases that a state may not be resumed under (:func:`check_mixture_state`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from lightning_resumable_data.index.mixture import (
    MAX_SEGMENT,
    check_weights,
    mixture_probabilities,
)
from lightning_resumable_data.samplers._arguments import check_non_negative_int
from lightning_resumable_data.state import StateMismatchError, check_state

__all__ = [
    "ORDER",
    "MixtureConfig",
    "SourceSizes",
    "Sources",
    "Weights",
    "check_mixture_state",
    "check_not_handed_out",
    "epoch_budget",
]

Weights = Mapping[str, float] | Sequence[float]


class Sources(Protocol):
    """What the order of a mixture reads of its sources: their names and sizes, in order."""

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def sizes(self) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True)
class SourceSizes:
    """Named source sizes without the data: what ``lrd plan`` counts draws over (no torch).

    Example:
        >>> SourceSizes(("web", "code"), (3, 1)).sizes
        (3, 1)
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]


ORDER: Final = "bisection-passes/3"  # the law (index.arrangement, index.passes), in the state
# Laws of earlier releases, refused with how to finish such a run.
_RETIRED_ORDERS: Final = {
    "blocks-leaves-feistel/2": (
        "its mixture order ('blocks-leaves-feistel/2') skipped the unread draws of a leaf at "
        "every online weight change and shuffled up to 2**20 positions of draws together; "
        "this release reads each source strictly in passes ('bisection-passes/3'), so "
        "resuming here would continue a different order. Finish that run with version 0.2, "
        "which wrote it (pip install -e . in a checkout of that version), or start a fresh run "
        "(the model weights of the checkpoint can be loaded into it without the data state)"
    ),
}


def epoch_budget(sources: Sources, samples_per_epoch: int | None) -> int:
    """The global samples of an epoch: ``samples_per_epoch``, by default the mixture's size.

    Example:
        >>> epoch_budget(SourceSizes(("web",), (3,)), None)
        3
    """
    size = sum(sources.sizes)
    if size == 0:
        raise ValueError(
            f"every source of the mixture is empty (sources {list(sources.names)}); there "
            "is nothing to draw. Give at least one source samples."
        )
    budget = size if samples_per_epoch is None else samples_per_epoch
    length = check_non_negative_int("samples_per_epoch", budget)
    if not 0 < length <= MAX_SEGMENT:
        raise ValueError(
            f"samples_per_epoch={length:,} must be in [1, 2**53 = "
            f"{MAX_SEGMENT:,}]: float64 weights give exact per-source counts only below "
            "2**53. Use a smaller epoch (e.g. 10**12) and more epochs."
        )
    return length


def check_mixture_state(state_dict: object, kind: str, fingerprint: dict[str, Any]) -> None:
    """Check a state's version, kind, fingerprint and position keys (:func:`check_state`).

    A state written under the mixture order of an earlier release is refused first, with
    how to finish that run.
    """
    saved = state_dict.get("fingerprint") if isinstance(state_dict, Mapping) else None
    order = saved.get("order") if isinstance(saved, Mapping) else None
    if isinstance(order, str) and order in _RETIRED_ORDERS:
        raise StateMismatchError(f"Cannot load this state into {kind}: {_RETIRED_ORDERS[order]}.")
    check_state(
        state_dict,
        kind,
        fingerprint,
        {"epoch": int, "consumed": int, "num_replicas": int},
    )


def check_not_handed_out(epoch: int, position: int, current: int, earliest: int) -> None:
    """Refuse a change at ``position`` of ``epoch`` before ``earliest`` of epoch ``current``.

    ``earliest`` is the first position of the current epoch this rank has not handed out.

    Example:
        >>> check_not_handed_out(0, 5, current=0, earliest=3)
    """
    where = f"update_weights(epoch={epoch}, position={position})"
    if (epoch, position) < (current, earliest):
        raise ValueError(
            f"{where} is too late: this rank has handed positions up to {earliest} of "
            f"epoch {current} to its loader already. The earliest allowed position is "
            f"{earliest} of epoch {current}: pass position >= {earliest}, or "
            "position=None for the earliest."
        )


@dataclass(frozen=True, slots=True)
class MixtureConfig:
    """What a mixture sampler's order depends on besides its schedule: sources, seed, epoch.

    Example:
        >>> config = MixtureConfig(SourceSizes(("web", "code"), (3, 1)), 0, 4)
        >>> config.entry(0, 0, {"web": 3, "code": 1}, 1.0)["weights"]
        [3.0, 1.0]
    """

    mixture: Sources
    seed: int
    epoch_length: int

    def weights_list(self, weights: Weights) -> list[float]:
        """A weight per source, in the mixture's order, after checking them."""
        names = self.mixture.names
        if isinstance(weights, Mapping):
            removed = getattr(self.mixture, "removed", ())  # weigh 0: need not be named
            weights = {**dict.fromkeys(removed, 0.0), **weights}
            unknown = sorted(set(weights) - set(names))
            missing = [n for n in names if n not in weights]
            if unknown or missing:
                raise ValueError(
                    f"weights must name every source of the mixture {list(names)} and no "
                    f"other; unknown: {unknown}, missing: {missing}. Give 0 to leave a source "
                    "out."
                )
            values = [weights[n] for n in names]
        elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
            values = list(weights)
        else:
            raise TypeError(
                f"weights={weights!r} must be a mapping naming every source {list(names)} "
                "(e.g. {'web': 0.7, 'code': 0.3}) or one number per source, in order."
            )
        array = check_weights(values, names)
        empty = [
            n for n, w, s in zip(names, array, self.mixture.sizes, strict=True) if w > 0 and s == 0
        ]
        if empty:
            raise ValueError(
                f"sources {empty} are empty but have weight > 0; give them weight 0 or "
                "add samples to them."
            )
        return [float(w) for w in array]

    def fingerprint(self, drop_last: bool, initial: dict[str, Any]) -> dict[str, Any]:
        """Everything the order depends on besides the epoch and the schedule's changes."""
        return {
            "sources": list(self.mixture.names),
            "sizes": list(self.mixture.sizes),
            "seed": self.seed,
            "samples_per_epoch": self.epoch_length,
            "drop_last": drop_last,
            "initial": initial,
            "order": ORDER,
        }

    def entry(
        self,
        epoch: int,
        position: int,
        weights: Weights,
        temperature: float,
        kind: str = "declared",
    ) -> dict[str, Any]:
        """A schedule entry: these weights from ``position`` of ``epoch`` on, checked."""
        values = self.weights_list(weights)
        mixture_probabilities(values, temperature)  # validates the temperature
        return {
            "epoch": epoch,
            "position": position,
            "weights": values,
            "temperature": float(temperature),
            "plan_end": None,
            "kind": kind,
        }
