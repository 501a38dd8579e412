"""``lrd plan``: what a mixture schedule draws from each source, phase by phase.

The config is a YAML or JSON :class:`~lightning_resumable_data.lightning.plan.PlanConfig`:
the sources' sizes, the data module's and the callback's arguments (weights, temperature,
seed, ``samples_per_epoch``, ``phases``) and the layout (``batch_size``, ``world_size``,
``accumulate_grad_batches``, ``max_steps``); the docs' ``lrd plan`` page lists the keys.

The numbers come from the package itself: the data module is built over stand-in datasets
of these sizes, installs the phases where a real run would, and the sampler counts the
samples each source gives between the phase boundaries (epoch boundaries included).
"""

from __future__ import annotations

import importlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.cli._dryrun import quiet
from lightning_resumable_data.cli._errors import DOCS_URL, CliError
from lightning_resumable_data.cli._format import count, percent, table
from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler

__all__ = ["Phase", "Plan", "format_plan", "load_config", "make_plan"]

_FORMAT_URL: Final = f"{DOCS_URL}cli/#lrd-plan"
_EXACT_EPOCHS: Final = 2000  # beyond this, identical epochs are counted once and multiplied


# -- the config ------------------------------------------------------------------------------


def _parse(path: Path) -> object:
    if not path.is_file():
        what = "is a directory, not a config file" if path.is_dir() else "does not exist"
        raise CliError(
            f"{path} {what}", hint=f"pass a YAML or JSON mixture config ({_FORMAT_URL})."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}", hint="pass a UTF-8 text file.") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise CliError(
                f"{path} is not valid JSON: {error.msg} at line {error.lineno}, column "
                f"{error.colno}",
                hint="fix the syntax, or use YAML (.yaml).",
            ) from None
    yaml: Any = importlib.import_module("yaml")  # PyYAML, a dependency of lightning
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or "syntax error"
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CliError(
            f"{path} is not valid YAML: {problem}{where}",
            hint="check the indentation and the colons; JSON files need a .json suffix.",
        ) from None


def load_config(path: Path) -> PlanConfig:
    """Read a plan config.

    Raises:
        CliError: A missing or unparsable file, or a config the package refuses (an unknown
            or missing key, a bad value, phases out of order: the package's own message).
    """
    raw = _parse(path)
    try:
        return PlanConfig.from_mapping(raw)
    except (TypeError, ValueError) as error:
        raise CliError(f"{path}: {error}", hint=f"the config format: {_FORMAT_URL}") from None


# -- the plan --------------------------------------------------------------------------------


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


class _Counter:
    """Samples drawn per source before a global batch index, from the real sampler."""

    def __init__(self, sampler: MixtureSampler, batches: int, step_samples: int, exact: bool):
        self.sampler, self.batches, self.step_samples = sampler, batches, step_samples
        self.exact = exact
        self.special = sorted({e["epoch"] for e in sampler.schedule})
        self._epoch_cache: dict[int, NDArray[np.int64]] = {}

    def _counts(self, epoch: int, consumed: int) -> NDArray[np.int64]:
        counts = self.sampler.source_counts(consumed, epoch)
        return np.asarray(list(counts.values()), dtype=np.int64)

    def _epoch(self, epoch: int) -> NDArray[np.int64]:
        if epoch not in self._epoch_cache:
            self._epoch_cache[epoch] = self._counts(epoch, self.batches * self.step_samples)
        return self._epoch_cache[epoch]

    def _epochs(self, start: int, stop: int) -> NDArray[np.int64]:
        """Samples per source in whole epochs ``[start, stop)``."""
        total = np.zeros(len(self.sampler.mixture.names), dtype=np.int64)
        if self.exact:
            for epoch in range(start, stop):
                total += self._epoch(epoch)
            return total
        # Between schedule changes every epoch has the same plan: count one, multiply.
        cuts = {start, stop} | {e for e in self.special if start < e < stop}
        cuts |= {e + 1 for e in self.special if start < e + 1 < stop}
        points = sorted(cuts)
        for a, b in itertools.pairwise(points):
            total += (b - a) * self._epoch(a)
        return total

    def before(self, batch: int) -> NDArray[np.int64]:
        """Samples per source drawn by the first ``batch`` global batches of the run."""
        epoch, within = divmod(batch, self.batches)
        return self._epochs(0, epoch) + self._counts(epoch, within * self.step_samples)


def _label(phase: MixturePhase) -> str:
    if phase.start_step is not None:
        return f"start_step {phase.start_step}"
    return f"start_epoch {phase.start_epoch}"


def make_plan(config: PlanConfig, name: str = "config") -> Plan:
    """Build the data module of the config over stand-in data and count what it draws.

    Raises:
        CliError: The package refuses the configuration (e.g. a batch larger than an epoch).
    """
    acc, max_steps = config.accumulate_grad_batches, config.max_steps or 0
    with quiet():
        try:
            if config.max_steps is None or not config.is_mixture:
                raise ValueError("a plan needs max_steps and named sources")
            module = config.datamodule()
            sampler = module.train_dataloader().position_sampler
        except (ValueError, TypeError) as error:
            raise CliError(f"{name}: {error}", hint=f"the config format: {_FORMAT_URL}") from None
    assert isinstance(sampler, MixtureSampler)
    batches = len(module.train_dataloader())  # per epoch, a short last batch included
    step_samples = config.batch_size * config.world_size
    total = max_steps * acc
    epochs = -(-total // batches)
    counter = _Counter(sampler, batches, step_samples, exact=epochs <= _EXACT_EPOCHS)
    names = list(config.sources)

    # Phase boundaries as global batch indices, where the data module installs them.
    starts = [0] + [
        p.start_step * acc if p.start_step is not None else (p.start_epoch or 0) * batches
        for p in config.phases
    ]
    initial = config.weights or {n: float(size) for n, size in config.sources.items()}
    settings = [(dict(initial), config.temperature, "initial")] + [
        (dict(p.weights), p.temperature, _label(p)) for p in config.phases
    ]
    edges = sorted({min(s, total) for s in starts} | {total})
    cumulative = {edge: counter.before(edge) for edge in edges}
    phases, notes = [], []
    for i, (start, (weights, temperature, label)) in enumerate(zip(starts, settings, strict=True)):
        begin = min(start, total)
        end = min(starts[i + 1], total) if i + 1 < len(starts) else total
        if start >= total and i > 0:
            notes.append(f"phase {i} ({label}) starts after max_steps {max_steps}.")
        drawn = cumulative[end] - cumulative[begin] if end > begin else np.zeros(len(names))
        probs = mixture_probabilities([weights[n] for n in names], temperature)
        phases.append(
            Phase(
                index=i,
                label=label,
                start=-(-begin // acc),
                stop=-(-end // acc),
                samples=max(end - begin, 0) * step_samples,
                temperature=temperature,
                weights=weights,
                shares=dict(zip(names, probs.tolist(), strict=True)),
                drawn=dict(zip(names, (int(v) for v in drawn), strict=True)),
            )
        )
    ragged = len(sampler) % config.batch_size
    if ragged:
        notes.append(
            f"each epoch ends with a short batch of {ragged} samples per rank; it counts as a "
            "step, as in Lightning (make samples_per_epoch a multiple of batch_size x "
            "world_size to avoid it)."
        )
    dropped = sampler.epoch_length - len(sampler) * config.world_size
    if dropped:
        notes.append(f"{dropped} samples of each epoch's order are left out to even out the ranks.")
    if not counter.exact:
        notes.append(
            f"the run spans {epochs} epochs: epochs with the same weights were counted once "
            "and multiplied, so the counts may be off by a few samples per epoch."
        )
    drawn_total = counter.before(total)
    return Plan(
        name=name,
        config=config,
        max_steps=max_steps,
        batches_per_epoch=batches,
        epoch_length=sampler.epoch_length,
        phases=tuple(phases),
        drawn=dict(zip(names, (int(v) for v in drawn_total), strict=True)),
        notes=tuple(notes),
        exact=counter.exact,
        boundaries=tuple(
            (-(-edge // acc), dict(zip(names, (int(v) for v in cumulative[edge]), strict=True)))
            for edge in edges
        ),
    )


# -- output ----------------------------------------------------------------------------------


def format_plan(plan: Plan) -> str:
    """The plan as text: a header, the phase table and the source table."""
    c = plan.config
    acc = f" x {c.accumulate_grad_batches} accumulated" if c.accumulate_grad_batches > 1 else ""
    steps_per_epoch = plan.batches_per_epoch / c.accumulate_grad_batches
    lines = [
        f"plan         {plan.name}: {len(c.sources)} sources, {count(plan.max_steps)} steps",
        f"step         batch {c.batch_size} x {c.world_size} ranks{acc} = "
        f"{count(plan.samples_per_step)} samples "
        f"({count(plan.max_steps * plan.samples_per_step)} in all)",
        f"epoch        {count(plan.epoch_length)} samples = {steps_per_epoch:g} steps; the run "
        f"covers {plan.epochs:.2f} epochs",
        "",
    ]
    rows = []
    for phase in plan.phases:
        steps = f"{phase.start}-{phase.stop - 1}" if phase.stop > phase.start else "-"
        for j, name in enumerate(c.sources):
            first = j == 0
            rows.append(
                [
                    str(phase.index) if first else "",
                    phase.label if first else "",
                    steps if first else "",
                    count(phase.samples) if first else "",
                    f"{phase.temperature:g}" if first else "",
                    name,
                    f"{phase.weights[name]:g}",
                    percent(phase.shares[name]),
                    count(phase.drawn[name]),
                ]
            )
    header = ["phase", "start", "steps", "samples", "temp", "source", "weight", "share", "drawn"]
    lines.extend(table(header, rows, right=(3, 6, 7, 8)))
    lines.append("")
    source_rows = [
        [name, count(size), count(plan.drawn[name]), f"{plan.source_epochs(name):.2f}"]
        for name, size in c.sources.items()
    ]
    lines.extend(table(["source", "size", "drawn", "epochs of source"], source_rows, (1, 2, 3)))
    if plan.notes:
        lines.append("")
        lines.extend(f"note: {note}" for note in plan.notes)
    return "\n".join(lines)
