"""Dry runs: the package's own objects, built over stand-in datasets, answer the questions.

``lrd`` never re-implements how a loader resumes or where a phase starts: it builds the
real :class:`ResumableDataModule` (through :meth:`PlanConfig.datamodule`) or loader and
sampler over ``range(size)`` datasets of the saved sizes, under the layout asked about, and
loads the saved state into it. Whatever the package would do on a real resume (resume
exactly, spread the epoch over new ranks, or refuse) is what the dry run reports.

Importing torch and Lightning takes seconds, so ``lrd inspect`` first asks the torch-free
shadows of :mod:`._shadow_run`, and comes here (importing both on first use) only where a
shadow cannot vouch for the answer: a refused resume, or a case the shadows do not cover.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lightning_resumable_data.lightning.plan import PlanConfig

if TYPE_CHECKING:
    from lightning_resumable_data.samplers.distributed import DistributedSampler

__all__ = [
    "DryRun",
    "ResumedLoader",
    "build_sampler",
    "mixture_counts",
    "quiet",
    "resume_datamodule",
    "resume_loader",
]

_MIXTURE, _DISTRIBUTED = "MixtureSampler", "DistributedSampler"  # the samplers' KIND


class ResumedLoader(Protocol):
    """What the report reads of a restored loader: a ``StatefulDataLoader``, or a shadow's."""

    @property
    def position_sampler(self) -> object:
        """The sampler that holds the position."""

    @property
    def drop_last(self) -> bool:
        """Whether the loader drops an epoch's short last batch."""

    @property
    def batches_yielded(self) -> int:
        """Batches of the epoch done, in this layout."""


@dataclass
class DryRun:
    """A loader built under some layout, with the saved state loaded into it (if it could be).

    Attributes:
        loader: The loader, or ``None`` if building it failed.
        error: Why building or loading failed (the package's own message), else ``None``.
        warnings: Warnings the package issued on the way.
    """

    loader: ResumedLoader | None
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


def _dry_run(build: Any, state: dict[str, Any], errors: tuple[type[Exception], ...]) -> DryRun:
    """Build a loader (``build()`` returns something with ``load_state_dict``) and load."""
    with quiet() as caught:
        try:
            built = build()
            built.load_state_dict(state)
            loader = built.train_dataloader() if hasattr(built, "train_dataloader") else built
            return DryRun(loader, None, caught)
        except errors as exc:
            return DryRun(None, str(exc), caught)


def resume_datamodule(
    spec: PlanConfig, state: dict[str, Any], world_size: int, batch_size: int, accumulate: int = 1
) -> DryRun:
    """Resume a data module's saved state under a layout, as ``trainer.fit(ckpt_path=)`` does."""
    return _dry_run(
        lambda: spec.datamodule(world_size, batch_size, accumulate), state, (ValueError, TypeError)
    )


def build_sampler(
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    schedule: Sequence[Mapping[str, Any]] = (),
) -> DistributedSampler:
    """A sampler of ``kind`` over stand-in data, with ``fingerprint``, as rank 0 of the world.

    Used where no data module state says how to build the loader (e.g. a Fabric
    checkpoint), and to count a mixture's epoch under its saved schedule. A mixture's
    declared changes in ``schedule`` (a saved state's) are declared again, as the run that
    saved it did: one at position 0 replaces the initial weights of ``fingerprint``.

    Raises:
        ValueError: An unknown sampler kind, or a fingerprint the package refuses.
        KeyError: A fingerprint without the expected fields.
    """
    from lightning_resumable_data.datasets.mixture import MixtureDataset
    from lightning_resumable_data.samplers.distributed import DistributedSampler
    from lightning_resumable_data.samplers.mixture import MixtureSampler

    if kind == _MIXTURE:
        names, sizes = list(fingerprint["sources"]), list(fingerprint["sizes"])
        dataset = MixtureDataset({n: range(s) for n, s in zip(names, sizes, strict=True)})
        initial = fingerprint["initial"]
        mixture = MixtureSampler(
            dataset,
            initial["weights"],
            world_size,
            0,
            seed=fingerprint["seed"],
            temperature=initial["temperature"],
            drop_last=fingerprint["drop_last"],
            samples_per_epoch=fingerprint["samples_per_epoch"],
        )
        for entry in schedule:  # online changes are the state's own: loaded with it
            if entry.get("kind", "declared") == "declared":
                where = {"epoch": entry["epoch"], "position": entry["position"]}
                mixture.update_weights(entry["weights"], entry["temperature"], **where)
        return mixture
    if kind == _DISTRIBUTED:
        return DistributedSampler(
            range(fingerprint["dataset_length"]),
            world_size,
            0,
            shuffle=fingerprint["shuffle"],
            seed=fingerprint["seed"],
            drop_last=fingerprint["drop_last"],
            algorithm=fingerprint["algorithm"],
        )
    raise ValueError(f"lrd cannot rebuild a {kind}.")


def sharded_sampler(
    fingerprint: Mapping[str, Any], world_size: int, shards: Path
) -> tuple[DistributedSampler, Any]:
    """A ``ShardedSampler`` of the token shards in ``shards``, checked against ``fingerprint``.

    Returns the sampler and the sharded dataset (for sample locations).

    Raises:
        ValueError: The shards are not the ones the state was saved over.
    """
    from lightning_resumable_data.shards import DistributedShardedDataset, open_token_shards

    try:
        readers = open_token_shards(shards)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"--shards {shards}: not a folder of token shards ({error}); lrd rebuilds the "
            "order of token shards only (the peers' formats: the Python API)"
        ) from None
    dataset = DistributedShardedDataset(
        readers,
        seed=int(fingerprint.get("seed", 0)),
        shuffle_shards=bool(fingerprint.get("shuffle_shards", True)),
        shuffle_samples=bool(fingerprint.get("shuffle_samples", True)),
    )
    sampler = dataset.sampler(world_size, 0, drop_last=bool(fingerprint.get("drop_last", False)))
    if sampler.fingerprint != dict(fingerprint):
        raise ValueError(
            f"the token shards in {shards} are not the ones this state was saved over "
            f"(saved {dict(fingerprint)}, found {sampler.fingerprint})."
        )
    return sampler, dataset


def resume_loader(
    state: dict[str, Any],
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    batch_size: int,
) -> DryRun:
    """Load a loader state into a loader built under a layout."""
    from lightning_resumable_data.loader import StatefulDataLoader

    def build() -> StatefulDataLoader[Any]:
        schedule = state.get("sampler", {}).get("schedule", ())
        sampler = build_sampler(kind, fingerprint, world_size, schedule)
        return StatefulDataLoader(sampler.dataset, batch_size=batch_size, sampler=sampler)

    return _dry_run(build, state, (ValueError, TypeError, KeyError))


def mixture_counts(
    fingerprint: Mapping[str, Any],
    schedule: list[Any],
    sampler_state: dict[str, Any],
    epoch: int,
    consumed: int,
) -> tuple[dict[str, int] | None, Any, str | None]:
    """The epoch's planned totals, the draws up to ``consumed``, and why totals are unknown.

    From the real ``MixtureSampler`` of one rank with the saved schedule and state: asked
    where its shadow (no torch) refused, so that the error is the sampler's.
    """
    from lightning_resumable_data.samplers.mixture import MixtureSampler

    epoch_totals: dict[str, int] | None = None
    unplanned: str | None = None  # why the epoch's totals are unknown
    drawn = sampler_state.get("source_counts")
    with quiet():
        try:
            sampler = build_sampler(_MIXTURE, fingerprint, 1, schedule)
            assert isinstance(sampler, MixtureSampler)
            sampler.load_state_dict(sampler_state)
            epoch_totals = sampler.source_counts(sampler.epoch_length, epoch)
            if not isinstance(drawn, dict):
                drawn = sampler.source_counts(consumed, epoch)
        except (ValueError, TypeError, KeyError) as error:
            unplanned = f"{type(error).__name__}: {error}"
    return epoch_totals, drawn, unplanned
