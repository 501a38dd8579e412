"""``lrd inspect``'s dry runs without torch: the data module's and the loader's, on shadows.

Each function mirrors one dry run of :mod:`._dryrun` step by step (the data module's
argument checks, its ``load_state_dict``, its ``train_dataloader`` with the phases placed
by ``phase_positions``, the loader's restore) on the shadows of :mod:`._shadow`, and
returns ``None`` where it cannot vouch for the answer: whenever anything refuses, or the
case is one the shadows do not cover. The caller then runs the real dry run (importing
torch and Lightning), which says what the package says. So a refused resume is reported
in the package's own words, and an accepted one without importing either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from lightning_resumable_data.cli._dryrun import DryRun
from lightning_resumable_data.cli._shadow import ShadowMixture, ShadowSampler, restore_loader
from lightning_resumable_data.index.permutation import check_algorithm
from lightning_resumable_data.lightning._phases import phase_positions
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers._arguments import check_key_seed, check_non_negative_int
from lightning_resumable_data.samplers.schedule import phase_dict

__all__ = ["shadow_counts", "shadow_resume_datamodule", "shadow_resume_loader", "shadow_sampler"]


def shadow_resume_datamodule(
    spec: PlanConfig, state: Mapping[str, Any], world_size: int, batch_size: int, accumulate: int
) -> DryRun | None:
    """:func:`._dryrun.resume_datamodule`, if the data module accepts the state; else ``None``."""
    try:
        return DryRun(_datamodule(spec, state, world_size, batch_size, accumulate))
    except Exception:  # the real dry run says what refuses it, and how
        return None


def _datamodule(
    spec: PlanConfig, state: Mapping[str, Any], world_size: int, batch_size: int, accumulate: int
) -> Any:
    """``spec.datamodule(...)``, ``load_state_dict(state)``, ``train_dataloader()``."""
    # ResumableDataModule.__init__ over spec.stand_in(): its checks
    if spec.allow_config_change or any(size == 0 for size in spec.sources.values()):
        raise ValueError("not covered: a change allowed, or an empty dataset (refused)")
    if check_non_negative_int("batch_size", batch_size) == 0:
        raise ValueError("batch_size=0")
    seed = check_key_seed(spec.seed)
    check_algorithm(spec.algorithm)
    weights = spec.weights if spec.is_mixture else None
    if weights is not None and not isinstance(weights, Mapping):
        raise TypeError("weights must be a mapping")
    # load_state_dict (load_module_state, with no trainer stage): the configuration
    saved = state.get("config")
    phases = [phase_dict(p) for p in spec.phases]
    now = {"sources": dict(spec.sources), "seed": seed, "phases": phases}
    if not isinstance(saved, Mapping) or any(saved.get(k) != v for k, v in now.items()):
        raise ValueError("the configuration changed: refused")
    loader_state = state.get("train_loader")
    if not isinstance(loader_state, Mapping):
        raise ValueError("not covered: no loader state to restore")
    restored, saved_step = dict(loader_state), int(state.get("global_step", 0))
    # train_dataloader (lightning._loaders.train_loader)
    sampler: ShadowSampler
    if spec.is_mixture:
        sources = dict(spec.sources)
        mixture = ShadowMixture(
            sources,
            dict(weights) if weights else {n: float(s) for n, s in sources.items()},
            world_size,
            seed=seed,
            temperature=spec.temperature,
            samples_per_epoch=spec.samples_per_epoch,
        )
        positions, known = phase_positions(
            spec.phases,
            per_rank=len(mixture),
            num_replicas=mixture.num_replicas,
            batch_size=batch_size,
            drop_last=spec.drop_last,
            trainer=SimpleNamespace(accumulate_grad_batches=accumulate),
            restored=restored,
            saved_step=saved_step,
        )
        if known:
            mixture.allow_schedule_change = True  # the phases were checked unchanged
        for phase, epoch, position in positions:
            mixture.update_weights(phase.weights, phase.temperature, epoch=epoch, position=position)
        sampler, length = mixture, sum(sources.values())
    else:
        if spec.phases:
            raise ValueError("mixture phases need named sources: refused")
        length = len(range(spec.sources[""]))
        sampler = ShadowSampler(
            length,
            world_size,
            shuffle=spec.shuffle,
            seed=seed,
            drop_last=spec.drop_last,
            algorithm=spec.algorithm,
        )
    return restore_loader(sampler, length, restored, batch_size, spec.drop_last)


def shadow_resume_loader(
    state: dict[str, Any],
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    batch_size: int,
) -> DryRun | None:
    """:func:`._dryrun.resume_loader`, if the loader accepts the state; else ``None``."""
    try:
        schedule = state.get("sampler", {}).get("schedule", ())
        sampler = shadow_sampler(kind, fingerprint, world_size, schedule)
        return DryRun(restore_loader(sampler, sampler.dataset_length, state, batch_size))
    except Exception:  # the real dry run says what refuses it, and how
        return None


def shadow_counts(
    fingerprint: Mapping[str, Any],
    schedule: Sequence[Mapping[str, Any]],
    sampler_state: dict[str, Any],
    epoch: int,
    consumed: int,
) -> tuple[dict[str, int], dict[str, int]] | None:
    """A mixture's epoch totals and its draws up to ``consumed``, per source; ``None`` if refused.

    What ``lrd inspect`` asks of a ``MixtureSampler`` of one rank with the saved schedule and
    state loaded (:func:`._dryrun.build_sampler`); on ``None`` the caller asks the real one.
    """
    try:
        sampler = shadow_sampler(ShadowMixture.KIND, fingerprint, 1, schedule)
        assert isinstance(sampler, ShadowMixture)
        sampler.load_state_dict(sampler_state)
        totals = sampler.source_counts(sampler.epoch_length, epoch)
        return totals, sampler.source_counts(consumed, epoch)
    except Exception:  # the real sampler says what refuses it, and how
        return None


def shadow_sampler(
    kind: str,
    fingerprint: Mapping[str, Any],
    world_size: int,
    schedule: Sequence[Mapping[str, Any]] = (),
) -> ShadowSampler:
    """:func:`._dryrun.build_sampler`'s sampler, as a shadow.

    Raises:
        ValueError: An unknown kind, or a fingerprint the sampler refuses.
        KeyError: A fingerprint without the expected fields.
    """
    if kind == ShadowMixture.KIND:
        names, sizes = list(fingerprint["sources"]), list(fingerprint["sizes"])
        initial = fingerprint["initial"]
        mixture = ShadowMixture(
            dict(zip(names, sizes, strict=True)),
            initial["weights"],
            world_size,
            seed=fingerprint["seed"],
            temperature=initial["temperature"],
            drop_last=fingerprint["drop_last"],
            samples_per_epoch=fingerprint["samples_per_epoch"],
        )
        for entry in schedule:
            if entry.get("kind", "declared") == "declared":
                where = {"epoch": entry["epoch"], "position": entry["position"]}
                mixture.update_weights(entry["weights"], entry["temperature"], **where)
        return mixture
    if kind == ShadowSampler.KIND:
        return ShadowSampler(
            len(range(fingerprint["dataset_length"])),
            world_size,
            shuffle=fingerprint["shuffle"],
            seed=fingerprint["seed"],
            drop_last=fingerprint["drop_last"],
            algorithm=fingerprint["algorithm"],
        )
    raise ValueError(f"lrd cannot rebuild a {kind}.")
