"""What ``lrd plan`` computes: the phases of a run, what each draws, and the JSON form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lightning_resumable_data.lightning.plan import PlanConfig

__all__ = ["Phase", "Plan"]


@dataclass(frozen=True)
class Phase:
    """One row group of the plan: a stretch of steps with constant weights.

    Attributes:
        index: 0 for the initial weights, then the phases in order.
        label: ``"initial"``, ``"start_step N"`` or ``"start_epoch N"``.
        start: First step (optimizer steps).
        stop: One past the last step, at most ``max_steps``.
        samples: Global samples read in the phase.
        temperature: Temperature of the weights.
        weights: The weights as configured.
        shares: Probabilities after temperature.
        drawn: Samples drawn from each source in the phase.
    """

    index: int
    label: str
    start: int
    stop: int
    samples: int
    temperature: float
    weights: Mapping[str, float]
    shares: Mapping[str, float]
    drawn: Mapping[str, int]


@dataclass(frozen=True)
class Plan:
    """What a run of the config draws.

    Attributes:
        name: Where the config came from (for messages).
        config: The config.
        max_steps: Optimizer steps of the run.
        batches_per_epoch: Full batches per rank in a mixture epoch.
        epoch_length: Global samples of a mixture epoch.
        phases: The phases, in order.
        drawn: Samples drawn per source over the whole run.
        notes: Facts worth knowing (a ragged epoch end, a phase never reached, ...).
        exact: Whether every epoch was counted (else identical epochs were multiplied).
    """

    name: str
    config: PlanConfig
    max_steps: int
    batches_per_epoch: int
    epoch_length: int
    phases: tuple[Phase, ...]
    drawn: Mapping[str, int]
    notes: tuple[str, ...] = ()
    exact: bool = True
    boundaries: tuple[tuple[int, Mapping[str, int]], ...] = field(default=(), repr=False)

    @property
    def samples_per_step(self) -> int:
        """Global samples of one optimizer step."""
        c = self.config
        return c.batch_size * c.world_size * c.accumulate_grad_batches

    @property
    def epochs(self) -> float:
        """Mixture epochs the run covers."""
        c = self.config
        return self.max_steps * c.accumulate_grad_batches / self.batches_per_epoch

    def source_epochs(self, name: str) -> float:
        """Passes over a source: samples drawn from it over its size."""
        size = self.config.sources[name]
        return self.drawn[name] / size if size else 0.0

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-serialisable data."""
        c = self.config
        return {
            "config": self.name,
            "batch_size": c.batch_size,
            "world_size": c.world_size,
            "accumulate_grad_batches": c.accumulate_grad_batches,
            "max_steps": self.max_steps,
            "samples_per_step": self.samples_per_step,
            "samples_per_epoch": self.epoch_length,
            "batches_per_epoch": self.batches_per_epoch,
            "epochs": self.epochs,
            "exact": self.exact,
            "phases": [
                {
                    "index": p.index,
                    "label": p.label,
                    "steps": [p.start, p.stop],
                    "samples": p.samples,
                    "temperature": p.temperature,
                    "weights": dict(p.weights),
                    "shares": dict(p.shares),
                    "drawn": dict(p.drawn),
                }
                for p in self.phases
            ],
            "sources": {
                n: {"size": s, "drawn": self.drawn[n], "epochs": self.source_epochs(n)}
                for n, s in c.sources.items()
            },
            "notes": list(self.notes),
        }
