"""``lrd inspect``'s resume part: what a resume under a layout would do, from a dry run.

The dry run is the shadows' (:mod:`._shadow_run`, no torch) where they accept the state,
else the real data module's or loader's (:mod:`._dryrun`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from lightning_resumable_data.cli._dryrun import DryRun, resume_datamodule, resume_loader
from lightning_resumable_data.cli._reading import DataState
from lightning_resumable_data.cli._shadow_run import shadow_resume_datamodule, shadow_resume_loader
from lightning_resumable_data.index.partition import samples_per_rank
from lightning_resumable_data.index.permutation import check_algorithm
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.samplers.schedule import MixturePhase

__all__ = ["resume_report"]


@runtime_checkable
class _Counted(Protocol):
    """A ``DistributedSampler`` (``MixtureSampler`` too), or its shadow: what is counted."""

    drop_last: bool

    def samples_left(self, consumed: int) -> int: ...

    def epoch_size(self, epoch: int | None = None) -> int: ...


def _spec(module: Mapping[str, Any], loader: Mapping[str, Any]) -> PlanConfig:
    """The data module's construction arguments, from its config and the sampler state."""
    config = module["config"]
    fingerprint = loader.get("sampler", {}).get("fingerprint", {})
    phases = tuple(MixturePhase(**phase) for phase in config.get("phases", []))
    if "initial" not in fingerprint:
        return PlanConfig(
            sources=dict(config["sources"]),
            seed=int(config["seed"]),
            shuffle=bool(fingerprint.get("shuffle", True)),
            algorithm=check_algorithm(fingerprint.get("algorithm", "randperm")),
            drop_last=bool(fingerprint.get("drop_last", False)),
            phases=phases,
        )
    names, initial = list(fingerprint["sources"]), fingerprint["initial"]
    return PlanConfig(  # a mixture: the sampler's order of sources is the one
        sources=dict(zip(names, fingerprint["sizes"], strict=True)),
        seed=int(config["seed"]),
        weights=dict(zip(names, initial["weights"], strict=True)),
        temperature=float(initial["temperature"]),
        samples_per_epoch=int(fingerprint["samples_per_epoch"]),
        phases=phases,
    )


def resume_report(
    found: DataState, world_size: int, batch_size: int, accumulate: int
) -> dict[str, Any]:
    """The ``resume`` part of the report: exact, elastic or refused, and the batches left."""
    state = found.loader
    saved_world, saved_batch = int(state["num_replicas"]), int(state["batch_size"])
    changed = [
        f"{what} {a} -> {b}"
        for what, a, b in (
            ("world size", saved_world, world_size),
            ("batch size", saved_batch, batch_size),
        )
        if a != b
    ]
    report: dict[str, Any] = {
        "world_size": world_size,
        "batch_size": batch_size,
        "mode": "elastic" if changed else "exact",
        "changes": changed,
        "ok": True,
        "error": None,
    }
    mode = state.get("fingerprint", {}).get("mode")
    if mode != "position":
        # skip mode skips samples, so only the world size must stay; torchdata replays batches
        kept = "world size" if mode == "skip" else "world size and batch size"
        if changed and (mode != "skip" or saved_world != world_size):
            report |= {
                "ok": False,
                "error": f"the loader resumes in {mode!r} mode, which needs the saved {kept}; "
                "only lightning_resumable_data.DistributedSampler and MixtureSampler states "
                "resume on another world size.",
            }
        return report
    sampler_state = state["sampler"]
    kind = sampler_state["kind"]
    if kind == "ShardedSampler":  # its order needs the shards' sizes, which lrd has not
        return report | {
            "ok": None,
            "error": None,
            "note": "not dry-run: the run reads a DistributedShardedDataset, whose order lrd "
            "rebuilds only from its shards (lrd trace --shards DIR, for token shards); its "
            "position is global, so a resume on any world or batch size goes on from it",
        }
    run: DryRun
    if found.module is not None:
        spec = _spec(found.module, state)
        module_state = dict(found.module, train_loader=state)
        layout = (world_size, batch_size, accumulate)
        run = shadow_resume_datamodule(spec, module_state, *layout) or resume_datamodule(
            spec, module_state, *layout
        )
    else:
        args = (state, kind, sampler_state["fingerprint"], world_size, batch_size)
        run = shadow_resume_loader(*args) or resume_loader(*args)
    report["warnings"] = run.warnings
    if run.loader is None:
        hint = None
        if found.module is not None and "schedule differs" in str(run.error):
            relaxed = dataclasses.replace(spec, allow_config_change=True)
            retry = resume_datamodule(relaxed, module_state, world_size, batch_size, accumulate)
            hint = (
                "phases by start_step are placed at global sample positions computed from "
                f"batch_size x world_size (saved {saved_batch * saved_world}, now "
                f"{batch_size * world_size}), so keeping that product keeps them in place."
            )
            if retry.loader is not None:
                hint += (
                    " ResumableDataModule(allow_config_change=True) resumes: it keeps the "
                    "saved schedule up to the resume point and places later phases for the "
                    "new layout."
                )
        return report | {"ok": False, "error": run.error, "hint": hint}
    loader = run.loader
    sampler = loader.position_sampler
    if not isinstance(sampler, _Counted):  # the kinds build_sampler makes
        return report | {"ok": False, "error": f"unexpected sampler {type(sampler).__name__}"}
    consumed = int(state["consumed"])
    per_rank = sampler.samples_left(consumed)
    epoch = int(state["epoch"])
    remaining = max(sampler.epoch_size(epoch) - consumed, 0)  # less what lrd skip cut
    later = samples_per_rank(sampler.epoch_size(epoch + 1), world_size, sampler.drop_last)

    def batches(samples: int) -> int:
        return samples // batch_size if loader.drop_last else -(-samples // batch_size)

    left = batches(per_rank)
    report |= {
        "epoch": epoch,
        "consumed": consumed,
        "remaining_samples": remaining,
        "samples_per_rank": per_rank,
        "batches_left": left,
        "epoch_batches": loader.batches_yielded + left,
        "batches_done": loader.batches_yielded,
        "batches_per_epoch": batches(later),
        "last_batch": per_rank % batch_size,
        "padding": max(per_rank * world_size - remaining, 0),
        "dropped": max(remaining - per_rank * world_size, 0),
    }
    return report
