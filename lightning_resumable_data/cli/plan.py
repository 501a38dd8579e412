"""``lrd plan``: what a mixture schedule draws from each source, phase by phase.

The config is a YAML or JSON :class:`~lightning_resumable_data.lightning.plan.PlanConfig`:
the sources' sizes, the data module's and the callback's arguments (weights, temperature,
seed, ``samples_per_epoch``, ``phases``) and the layout (``batch_size``, ``world_size``,
``accumulate_grad_batches``, ``max_steps``); the docs' ``lrd plan`` page lists the keys.

The numbers come from the package's own code, without torch or Lightning (so the command
answers in a fraction of a second): the mixture's plan (the same ``MixturePlan`` the
sampler of a real run holds, over the sources' sizes), the phases placed where the data
module places them (``phase_positions``), and the plan's counts of the samples each source
gives between the phase boundaries (epoch boundaries included).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.cli._config import FORMAT_URL, load_config
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._format import phase_start
from lightning_resumable_data.cli._plan_result import Phase, Plan
from lightning_resumable_data.cli._plan_text import format_plan
from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.lightning._phases import phase_positions
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers._arguments import check_key_seed
from lightning_resumable_data.samplers._mixture_config import (
    MixtureConfig,
    SourceSizes,
    epoch_budget,
)
from lightning_resumable_data.samplers._mixture_plan import MixturePlan
from lightning_resumable_data.samplers.schedule import phase_dict

__all__ = ["Draws", "Phase", "Plan", "draws", "format_plan", "load_config", "make_plan"]

_EXACT_EPOCHS: Final = 2000  # beyond this, identical epochs are counted once and multiplied


@dataclass(frozen=True)
class Draws:
    """A run's mixture plan and epoch layout, as the sampler and loader of rank 0 hold them.

    Attributes:
        plan: The schedule of weight changes, the phases installed, and its counts.
        epoch_length: Global samples of an epoch.
        per_rank: Samples a rank reads in an epoch (``len(sampler)``).
        batches: Batches of an epoch on each rank (``len(loader)``).
    """

    plan: MixturePlan
    epoch_length: int
    per_rank: int
    batches: int


def draws(config: PlanConfig) -> Draws:
    """The plan the data module of ``config`` would give its sampler, computed without torch.

    Raises:
        ValueError: A value the data module or the sampler refuses (their own messages).
        TypeError: Ditto.

    Example:
        >>> config = PlanConfig({"web": 60, "code": 40}, batch_size=4, max_steps=10)
        >>> found = draws(config)
        >>> found.batches, found.plan.counts(0, 100).tolist()
        (25, [60, 40])
    """
    sources = SourceSizes(tuple(config.sources), tuple(config.sources.values()))
    epoch_length = epoch_budget(sources, config.samples_per_epoch)
    mixture = MixtureConfig(sources, check_key_seed(config.seed), epoch_length)
    initial = config.weights or {n: float(size) for n, size in config.sources.items()}
    plan = MixturePlan(mixture, mixture.entry(0, 0, initial, config.temperature))
    per_rank = epoch_length // config.world_size  # the mixture sampler drops its ragged tail
    trainer = SimpleNamespace(accumulate_grad_batches=config.accumulate_grad_batches)
    starts, _ = phase_positions(
        config.phases,
        per_rank=per_rank,
        num_replicas=config.world_size,
        batch_size=config.batch_size,
        drop_last=config.drop_last,
        trainer=trainer,
    )
    for phase, epoch, position in starts:  # as MixtureSampler.update_weights before reading
        entry = plan.change(epoch, position, phase.weights, phase.temperature, "declared")
        if not plan.scheduled(entry):
            plan.add(entry, started=False)
    size = config.batch_size
    batches = per_rank // size if config.drop_last else -(-per_rank // size)
    return Draws(plan, epoch_length, per_rank, batches)


class _Counter:
    """Samples drawn per source before a global batch index, from the run's mixture plan."""

    def __init__(self, found: Draws, step_samples: int, exact: bool):
        self.plan, self.batches, self.step_samples = found.plan, found.batches, step_samples
        self.epoch_length = found.epoch_length
        self.exact = exact
        self.special = sorted({e["epoch"] for e in self.plan.schedule})
        self._epoch_cache: dict[int, NDArray[np.int64]] = {}

    def _counts(self, epoch: int, consumed: int) -> NDArray[np.int64]:
        return self.plan.counts(epoch, min(consumed, self.epoch_length)).astype(np.int64)

    def _epoch(self, epoch: int) -> NDArray[np.int64]:
        if epoch not in self._epoch_cache:
            self._epoch_cache[epoch] = self._counts(epoch, self.batches * self.step_samples)
        return self._epoch_cache[epoch]

    def _epochs(self, start: int, stop: int) -> NDArray[np.int64]:
        """Samples per source in whole epochs ``[start, stop)``."""
        total = np.zeros(len(self.plan.config.mixture.names), dtype=np.int64)
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


def _named(names: list[str], values: NDArray[np.generic]) -> dict[str, int]:
    return {name: int(value) for name, value in zip(names, values, strict=True)}


def make_plan(config: PlanConfig, name: str = "config") -> Plan:
    """Plan the config's mixture as its data module would, and count what it draws.

    Raises:
        CliError: The package refuses the configuration (e.g. a batch larger than an epoch).
    """
    acc, max_steps = config.accumulate_grad_batches, config.max_steps or 0
    try:
        if config.max_steps is None or not config.is_mixture:
            raise ValueError("a plan needs max_steps and named sources")
        found = draws(config)
    except (ValueError, TypeError) as error:
        raise CliError(f"{name}: {error}", hint=f"the config format: {FORMAT_URL}") from None
    batches = found.batches  # per epoch, a short last batch included
    step_samples = config.batch_size * config.world_size
    total = max_steps * acc
    epochs = -(-total // batches)
    counter = _Counter(found, step_samples, exact=epochs <= _EXACT_EPOCHS)
    names = list(config.sources)

    # Phase boundaries as global batch indices, where the data module installs them.
    starts = [0] + [
        p.start_step * acc if p.start_step is not None else (p.start_epoch or 0) * batches
        for p in config.phases
    ]
    initial = config.weights or {n: float(size) for n, size in config.sources.items()}
    settings = [(dict(initial), config.temperature, "initial")] + [
        (dict(p.weights), p.temperature, phase_start(phase_dict(p))) for p in config.phases
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
                drawn=_named(names, drawn),
            )
        )
    ragged = found.per_rank % config.batch_size
    if ragged:
        notes.append(
            f"each epoch ends with a short batch of {ragged} samples per rank; it counts as a "
            "step, as in Lightning (make samples_per_epoch a multiple of batch_size x "
            "world_size to avoid it)."
        )
    dropped = found.epoch_length - found.per_rank * config.world_size
    if dropped:
        notes.append(f"{dropped} samples of each epoch's order are left out to even out the ranks.")
    if not counter.exact:
        notes.append(
            f"the run spans {epochs} epochs: epochs with the same weights were counted once "
            "and multiplied, so the counts may be off by a few samples per epoch."
        )
    return Plan(
        name=name,
        config=config,
        max_steps=max_steps,
        batches_per_epoch=batches,
        epoch_length=found.epoch_length,
        phases=tuple(phases),
        drawn=_named(names, cumulative[total]),
        notes=tuple(notes),
        exact=counter.exact,
        boundaries=tuple((-(-edge // acc), _named(names, cumulative[edge])) for edge in edges),
    )
