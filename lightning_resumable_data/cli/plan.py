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

import itertools
from typing import Final

import numpy as np
from numpy.typing import NDArray

from lightning_resumable_data.cli._config import FORMAT_URL, load_config
from lightning_resumable_data.cli._dryrun import quiet
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._format import phase_start
from lightning_resumable_data.cli._plan_result import Phase, Plan
from lightning_resumable_data.cli._plan_text import format_plan
from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers.mixture import MixtureSampler
from lightning_resumable_data.samplers.schedule import phase_dict

__all__ = ["Phase", "Plan", "format_plan", "load_config", "make_plan"]

_EXACT_EPOCHS: Final = 2000  # beyond this, identical epochs are counted once and multiplied


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


def _named(names: list[str], values: NDArray[np.generic]) -> dict[str, int]:
    return {name: int(value) for name, value in zip(names, values, strict=True)}


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
            raise CliError(f"{name}: {error}", hint=f"the config format: {FORMAT_URL}") from None
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
    return Plan(
        name=name,
        config=config,
        max_steps=max_steps,
        batches_per_epoch=batches,
        epoch_length=sampler.epoch_length,
        phases=tuple(phases),
        drawn=_named(names, cumulative[total]),
        notes=tuple(notes),
        exact=counter.exact,
        boundaries=tuple((-(-edge // acc), _named(names, cumulative[edge])) for edge in edges),
    )
