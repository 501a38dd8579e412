"""One definition of a run's data plan: what ``lrd plan`` reads and ``lrd inspect`` rebuilds.

A :class:`PlanConfig` holds the arguments of :class:`ResumableDataModule` and
:class:`~lightning_resumable_data.ResumableDataCallback` that the data order depends on
(sources and their sizes, weights, temperature, seed, phases, ...) and the run's layout
(batch size, world size, gradient accumulation, steps). Its phases are the same
:class:`~lightning_resumable_data.MixturePhase` that ``LightningCLI`` parses for the callback.
Every value is checked where it is used (the data module, the sampler, the phase): there is
no second validator, and a config error reads like the error of the real run.
The module imports neither torch nor Lightning (``lrd plan`` reads it);
:meth:`PlanConfig.datamodule` imports them on first use.

Example:
    >>> config = PlanConfig.from_mapping(
    ...     {"sources": {"web": 60, "code": 40}, "batch_size": 4, "max_steps": 10,
    ...      "phases": [{"start_step": 5, "weights": {"web": 1, "code": 1}}]})
    >>> config.phases[0].start_step, len(config.datamodule().train_dataloader())
    (5, 25)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from lightning_resumable_data.index.permutation import PermutationAlgorithm
from lightning_resumable_data.samplers._arguments import check_keywords, check_non_negative_int
from lightning_resumable_data.samplers.schedule import MixturePhase

if TYPE_CHECKING:
    from lightning_resumable_data.lightning.datamodule import ResumableDataModule

__all__ = ["PlanConfig"]


@dataclass(frozen=True)
class PlanConfig:
    """The data side of a run, as far as the order and the position depend on it.

    Attributes:
        sources: Samples per source, in order (``{"": n}`` for a single dataset).
        batch_size: Samples per batch on each rank.
        max_steps: Optimizer steps of the run (``None``: not known).
        world_size: Data-parallel ranks.
        accumulate_grad_batches: Batches per optimizer step.
        seed: Seed of the order.
        weights: Initial mixture weights by source (default: the sizes).
        temperature: Initial mixture temperature.
        samples_per_epoch: Global samples per mixture epoch (default: all sources' sizes).
        phases: The weight changes, as given to ``ResumableDataCallback(phases=...)``.
        shuffle: Shuffle every epoch (single dataset).
        algorithm: Permutation algorithm (single dataset).
        drop_last: Drop the ragged tail (single dataset).
        allow_config_change: The data module's flag of that name.
    """

    sources: Mapping[str, int]
    batch_size: int = 1
    max_steps: int | None = None
    world_size: int = 1
    accumulate_grad_batches: int = 1
    seed: int = 0
    weights: Mapping[str, float] | None = None
    temperature: float = 1.0
    samples_per_epoch: int | None = None
    phases: tuple[MixturePhase, ...] = ()
    shuffle: bool = True
    algorithm: PermutationAlgorithm = "randperm"
    drop_last: bool = False
    allow_config_change: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.sources, Mapping) or not self.sources:
            raise ValueError(
                f"sources={self.sources!r} must be a non-empty mapping of source names to "
                "sizes, e.g. {'web': 1000000, 'code': 200000}."
            )
        for name, size in self.sources.items():
            check_non_negative_int(f"sources[{name!r}]", size)
        for name in ("batch_size", "world_size", "accumulate_grad_batches", "max_steps"):
            value = getattr(self, name)
            if value is not None and check_non_negative_int(name, value) == 0:
                raise ValueError(f"{name}=0 must be >= 1.")

    @classmethod
    def from_mapping(
        cls, raw: object, required: Sequence[str] = ("sources", "batch_size", "max_steps")
    ) -> PlanConfig:
        """A config from plain data (a parsed YAML or JSON file), phases given as mappings.

        Raises:
            TypeError: Not a mapping, an unknown key (the message names the likely one), or
                a value of the wrong type.
            ValueError: A missing key or a bad value (the message says which and why).
        """
        if not isinstance(raw, Mapping):
            raise TypeError(f"the config must be a mapping of keys, got {type(raw).__name__}")
        check_keywords(cls.__init__, cls.__name__, [str(key) for key in raw])
        missing = [key for key in required if key not in raw]
        if missing:
            raise ValueError(f"missing required keys {missing}")
        phases = raw.get("phases") or []
        if not isinstance(phases, list):
            raise TypeError(f"phases must be a list, got {type(phases).__name__}")
        built = []
        for i, phase in enumerate(phases):
            try:
                if not isinstance(phase, Mapping):
                    raise TypeError(f"a phase must be a mapping, got {phase!r}")
                check_keywords(MixturePhase.__init__, "MixturePhase", [str(k) for k in phase])
                built.append(MixturePhase(**phase))
            except (TypeError, ValueError) as error:
                raise type(error)(f"phases[{i}]: {error}") from None
        names = {f.name for f in fields(cls)}
        kwargs = {str(k): v for k, v in raw.items() if k in names and k != "phases"}
        return cls(**kwargs, phases=tuple(built))

    @property
    def is_mixture(self) -> bool:
        """Whether the sources are named (a mixture), not one dataset."""
        return list(self.sources) != [""]

    def stand_in(self) -> Sequence[int] | Mapping[str, Any]:
        """Datasets of the configured sizes that hold nothing: ``range(size)`` per source.

        Example:
            >>> PlanConfig({"": 3}).stand_in(), PlanConfig({"web": 2}).stand_in()
            (range(0, 3), {'web': range(0, 2)})
        """
        if not self.is_mixture:
            return range(self.sources[""])
        return {name: range(size) for name, size in self.sources.items()}

    def datamodule(
        self,
        world_size: int | None = None,
        batch_size: int | None = None,
        accumulate: int | None = None,
    ) -> ResumableDataModule:
        """A :class:`ResumableDataModule` over :meth:`stand_in` data, as rank 0 of the world.

        Args:
            world_size: Data-parallel ranks (default: the config's).
            batch_size: Per-rank batch size (default: the config's).
            accumulate: Batches per optimizer step (default: the config's).

        Raises:
            ValueError: The data module or its sampler refuses the configuration.
            TypeError: Ditto.
        """
        from lightning_resumable_data.lightning.datamodule import ResumableDataModule

        module = ResumableDataModule(
            self.stand_in(),
            batch_size=self.batch_size if batch_size is None else batch_size,
            seed=self.seed,
            shuffle=self.shuffle,
            algorithm=self.algorithm,
            drop_last=self.drop_last,
            weights=self.weights if self.is_mixture else None,
            temperature=self.temperature,
            samples_per_epoch=self.samples_per_epoch,
            allow_config_change=self.allow_config_change,
        )
        world = self.world_size if world_size is None else world_size
        steps = self.accumulate_grad_batches if accumulate is None else accumulate
        module.trainer = _trainer(world, steps)
        module.phases = tuple(self.phases)
        return module


def _trainer(world_size: int, accumulate: int) -> Any:
    """The few trainer attributes the data module reads (no real trainer is needed)."""
    strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": world_size, "rank": 0})
    return SimpleNamespace(
        strategy=strategy, max_epochs=None, accumulate_grad_batches=accumulate, callbacks=None
    )
