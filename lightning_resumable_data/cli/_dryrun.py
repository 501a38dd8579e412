"""Dry runs: the package's own objects, built over stand-in datasets, answer the questions.

``lrd`` never re-implements how a loader resumes or where a phase starts: it builds the
real :class:`ResumableDataModule` (or loader and sampler) over ``range(size)`` datasets of
the saved sizes, under the layout asked about, and loads the saved state into it. Whatever
the package would do on a real resume (resume exactly, spread the epoch over new ranks,
or refuse) is what the dry run reports.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import lightning.pytorch as pl

from lightning_resumable_data.datasets.mixture import MixtureDataset
from lightning_resumable_data.index.permutation import PermutationAlgorithm
from lightning_resumable_data.lightning.datamodule import ResumableDataModule
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler

__all__ = [
    "DataSpec",
    "DryRun",
    "build_datamodule",
    "build_loader",
    "quiet",
    "resume_datamodule",
    "resume_loader",
    "stand_in",
]


def stand_in(sources: Mapping[str, int]) -> Sequence[int] | Mapping[str, Any]:
    """Datasets of the given sizes that hold nothing: ``range(size)`` per source.

    A single unnamed source (``{"": n}``, how the data module records one dataset) is a
    plain ``range(n)``.

    Example:
        >>> stand_in({"": 3}), stand_in({"web": 2, "code": 1})
        (range(0, 3), {'web': range(0, 2), 'code': range(0, 1)})
    """
    if list(sources) == [""]:
        return range(sources[""])
    return {name: range(size) for name, size in sources.items()}


@dataclass(frozen=True)
class DataSpec:
    """What a data module was built with, as far as the order and the position depend on it.

    Attributes:
        sources: Source names and sizes (``{"": n}`` for a single dataset), in order.
        seed: Seed of the order.
        shuffle: Shuffle every epoch (single dataset).
        algorithm: Permutation algorithm (single dataset).
        drop_last: Drop the ragged tail (single dataset; the loader's for a mixture).
        weights: Initial mixture weights by source.
        temperature: Initial mixture temperature.
        samples_per_epoch: Global samples in a mixture epoch.
        phases: The mixture phases.
        allow_config_change: The data module's flag of that name.
    """

    sources: Mapping[str, int]
    seed: int = 0
    shuffle: bool = True
    algorithm: PermutationAlgorithm = "randperm"
    drop_last: bool = False
    weights: Mapping[str, float] | None = None
    temperature: float = 1.0
    samples_per_epoch: int | None = None
    phases: Sequence[MixturePhase] = field(default_factory=tuple)
    allow_config_change: bool = False

    @property
    def is_mixture(self) -> bool:
        """Whether the sources are named (a mixture), not one dataset."""
        return list(self.sources) != [""]


@dataclass
class DryRun:
    """A loader built under some layout, with the saved state loaded into it (if it could be).

    Attributes:
        loader: The loader, or ``None`` if building it failed.
        error: Why building or loading failed (the package's own message), else ``None``.
        warnings: Warnings the package issued on the way.
    """

    loader: StatefulDataLoader | None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def quiet() -> Iterator[list[str]]:
    """Collect warnings and silence Lightning's info logs (e.g. "Elastic resume: ...")."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            messages: list[str] = []
            yield messages
            messages.extend(str(w.message) for w in caught)
    finally:
        logging.disable(previous)


def _trainer(world_size: int, accumulate: int) -> pl.Trainer:
    """The few trainer attributes the data module reads (no real trainer is needed)."""
    strategy = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": world_size, "rank": 0})
    fake = SimpleNamespace(strategy=strategy, max_epochs=None, accumulate_grad_batches=accumulate)
    return cast(pl.Trainer, fake)


def build_datamodule(
    spec: DataSpec, world_size: int, batch_size: int, accumulate: int = 1
) -> ResumableDataModule:
    """A :class:`ResumableDataModule` over stand-in datasets, as rank 0 of ``world_size``.

    Raises:
        ValueError: The package refuses the configuration (its message says why).
        TypeError: Ditto.
    """
    module = ResumableDataModule(
        stand_in(spec.sources),
        batch_size=batch_size,
        seed=spec.seed,
        shuffle=spec.shuffle,
        algorithm=spec.algorithm,
        drop_last=spec.drop_last,
        weights=spec.weights,
        temperature=spec.temperature,
        samples_per_epoch=spec.samples_per_epoch,
        allow_config_change=spec.allow_config_change,
    )
    module.trainer = _trainer(world_size, accumulate)
    module.phases = tuple(spec.phases)
    return module


def resume_datamodule(
    spec: DataSpec,
    state: dict[str, Any],
    world_size: int,
    batch_size: int,
    accumulate: int = 1,
) -> DryRun:
    """Resume a data module's saved state under a layout, as ``trainer.fit(ckpt_path=)`` does."""
    with quiet() as caught:
        try:
            module = build_datamodule(spec, world_size, batch_size, accumulate)
            module.load_state_dict(state)
            loader: StatefulDataLoader | None = module.train_dataloader()
            error = None
        except (ValueError, TypeError) as exc:
            loader, error = None, str(exc)
    return DryRun(loader, error, caught)


def build_loader(
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    batch_size: int,
) -> StatefulDataLoader:
    """A :class:`StatefulDataLoader` over stand-in data whose sampler has ``fingerprint``.

    Used for loader states saved without the data module (e.g. in a Fabric checkpoint).

    Raises:
        ValueError: An unknown sampler kind, or a fingerprint the package refuses.
        KeyError: A fingerprint without the expected fields.
    """
    sampler: DistributedSampler
    if kind == MixtureSampler.KIND:
        names, sizes = list(fingerprint["sources"]), list(fingerprint["sizes"])
        mixture = MixtureDataset({n: range(s) for n, s in zip(names, sizes, strict=True)})
        initial = fingerprint["initial"]
        sampler = MixtureSampler(
            mixture,
            initial["weights"],
            world_size,
            0,
            seed=fingerprint["seed"],
            temperature=initial["temperature"],
            drop_last=fingerprint["drop_last"],
            samples_per_epoch=fingerprint["samples_per_epoch"],
        )
        dataset: Any = mixture
    elif kind == DistributedSampler.KIND:
        dataset = range(fingerprint["dataset_length"])
        sampler = DistributedSampler(
            dataset,
            world_size,
            0,
            shuffle=fingerprint["shuffle"],
            seed=fingerprint["seed"],
            drop_last=fingerprint["drop_last"],
            algorithm=fingerprint["algorithm"],
        )
    else:
        raise ValueError(f"lrd cannot rebuild a {kind}.")
    return StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler)


def resume_loader(
    state: dict[str, Any],
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    batch_size: int,
) -> DryRun:
    """Load a loader state into a loader built under a layout."""
    with quiet() as caught:
        loader: StatefulDataLoader | None = None
        try:
            built = build_loader(kind, fingerprint, world_size, batch_size)
            built.load_state_dict(state)
            loader, error = built, None
        except (ValueError, TypeError, KeyError) as exc:
            loader, error = None, str(exc)
    return DryRun(loader, error, caught)
