"""A ``ResumableDataModule``'s checkpoint entry: its configuration and position, checked on resume.

The entry holds what a resume compares (sources and their sizes, seed, world size, batch
size, phases) and the training loader's position. On resume, a changed world or batch size
resumes elastically; a change of sources, sizes, seed or phases is refused unless the module
allows configuration changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info

from lightning_resumable_data.datasets.mixture import RemovedSource
from lightning_resumable_data.lightning._checks import describe_sources
from lightning_resumable_data.samplers.data_changes import source_change
from lightning_resumable_data.samplers.schedule import phase_dict
from lightning_resumable_data.shards.dataset import DistributedShardedDataset
from lightning_resumable_data.state import StateMismatchError

if TYPE_CHECKING:
    from lightning_resumable_data.lightning.datamodule import ResumableDataModule

__all__ = ["data_config", "load_module_state", "mixture_sources", "module_state"]

_STATE_VERSION = 1


def data_config(dm: ResumableDataModule) -> dict[str, Any]:
    """What a resume compares: sources, sizes, seed, world size, batch size, phases."""
    dataset = dm.train_dataset
    if isinstance(dataset, Mapping):
        sources = {name: len(d) for name, d in mixture_sources(dm).items()}
    else:
        sources = {"": len(dataset)} if dataset is not None else {}  # type: ignore[arg-type]
    num_replicas, _ = dm.world()
    config = {
        "sources": sources,
        "seed": dm.seed,
        "num_replicas": num_replicas,
        "batch_size": dm.batch_size,
        "phases": [phase_dict(p) for p in dm.phases],
    }
    items = dataset.items() if isinstance(dataset, Mapping) else [("", dataset)]
    found = {name: getattr(d, "packing", None) for name, d in items}  # PackedDataset's
    packing = {name: value for name, value in found.items() if isinstance(value, dict)}
    if packing:  # for lrd trace --documents: how each packed source was packed
        keys = bool(getattr(dm, "sample_keys", False))  # else the epoch is set_epoch's
        config["packing"] = {n: {**value, "sample_keys": keys} for n, value in packing.items()}
    return config


def module_state(dm: ResumableDataModule) -> dict[str, Any]:
    """The configuration and the training loader's position (what the model trained on)."""
    state: dict[str, Any] = {"version": _STATE_VERSION, "config": dm.config()}
    if dm.train_loader is not None:
        state["train_loader"] = dm.train_loader.state_dict()
        state["global_step"] = int(getattr(dm.trainer, "global_step", 0))
    return state


def _followed(dm: ResumableDataModule, saved: object, now: Mapping[str, int]) -> bool:
    """Whether a changed size of the single training dataset is left to its sampler."""
    return (
        getattr(dm, "data_changes", None) is not None
        and isinstance(saved, Mapping)
        and list(saved) == list(now) == [""]
        and not isinstance(dm.train_dataset, DistributedShardedDataset)
        and getattr(dm.train_dataset, "packing", None) is None  # a corpus repacks when it grows
    )


def _mixture_change(dm: ResumableDataModule, saved: object, now: Mapping[str, int]) -> str:
    """``"added"``/``"removed"`` if the sampler follows a change of the mixture's sources."""
    policy = getattr(dm, "data_changes", None)
    if policy is None or policy.sources != "at_resume" or not isinstance(saved, Mapping):
        return ""
    if dm.phases or "" in saved:  # the phases weigh every source: refused as a change
        return ""
    return source_change(saved, now)[0]


def _removed(
    dm: ResumableDataModule, saved: object, now: Mapping[str, int]
) -> dict[str, int] | None:
    """The saved mixture's sources in order, with sizes, if only some were removed since."""
    if not isinstance(saved, Mapping) or _mixture_change(dm, saved, now) != "removed":
        return None
    return {str(name): int(size) for name, size in saved.items()}


def mixture_sources(dm: ResumableDataModule) -> dict[str, Any]:
    """``dm``'s training sources, with a placeholder for each one removed since a checkpoint."""
    current: Mapping[str, Any] = dm.train_dataset  # type: ignore[assignment]
    saved: dict[str, int] | None = getattr(dm, "_removed_sources", None)
    if not saved:
        return dict(current)
    return {n: current[n] if n in current else RemovedSource(n, size) for n, size in saved.items()}


def _policy_hint(dm: ResumableDataModule, changed: list[str]) -> str:
    """Where no DataChangePolicy is set, what one would accept exactly."""
    if changed != ["sources"] or getattr(dm, "data_changes", 0) is not None:
        return ""
    return (
        " A dataset that grew or shrank, or a mixture source added or removed, resumes "
        "exactly with "
        "ResumableDataModule(data_changes=DataChangePolicy()) (docs/changes.md)."
    )


def load_module_state(dm: ResumableDataModule, state_dict: dict[str, Any]) -> None:
    """Check a saved entry against ``dm``'s configuration; keep its position for the loader.

    Raises:
        StateMismatchError: The configuration changed and the change was not allowed.
    """
    stage = getattr(getattr(dm.trainer, "state", None), "fn", None)  # None: no trainer
    if stage is not None and stage != TrainerFn.FITTING:
        return
    saved = state_dict.get("config") if isinstance(state_dict, Mapping) else None
    if not isinstance(saved, Mapping):
        raise StateMismatchError(
            "Cannot resume ResumableDataModule: the checkpoint has no data configuration. "
            "It was written without this data module; start a fresh run."
        )
    now = dm.config()
    changed = {
        k: (saved.get(k), now[k]) for k in ("sources", "seed", "phases") if saved.get(k) != now[k]
    }
    if _followed(dm, saved.get("sources"), now["sources"]):
        changed.pop("sources", None)  # the sampler records the change (DataChangePolicy)
    if _mixture_change(dm, saved.get("sources"), now["sources"]) == "added":
        changed.pop("sources", None)  # the sampler records the addition (DataChangePolicy)
    removed = _removed(dm, saved.get("sources"), now["sources"])
    if removed is not None:  # kept in place, weighing 0 from the resume on
        dm._removed_sources = removed
        changed.pop("sources", None)
    if changed.get("phases") and not now["phases"] and not dm.allow_config_change:
        raise StateMismatchError(
            f"Cannot resume: the checkpoint's data position follows mixture phases "
            f"{saved.get('phases')!r}, and this run has none. Add "
            "ResumableDataCallback(phases=[MixturePhase(...), ...]) with the same phases "
            "to the trainer's callbacks."
        )
    if changed and not dm.allow_config_change:
        details = "; ".join(
            describe_sources(a, b) if k == "sources" else f"{k}: saved {a!r}, now {b!r}"
            for k, (a, b) in changed.items()
        )
        exact = _policy_hint(dm, list(changed))
        raise StateMismatchError(
            f"Cannot resume: the data configuration changed ({details}). The resumed run "
            "would not see the batches the interrupted run would have seen."
            + exact
            + " Restore the saved configuration, or pass "
            "ResumableDataModule(allow_config_change=True) to accept the change"
            + (" without that exactness (samples may be replayed or skipped)." if exact else ".")
        )
    loader_state = state_dict.get("train_loader")
    dm._loader_state = dict(loader_state) if isinstance(loader_state, Mapping) else None
    dm._saved_global_step = int(state_dict.get("global_step", 0))
    shape = [
        (k, saved.get(k), now[k]) for k in ("num_replicas", "batch_size") if saved.get(k) != now[k]
    ]
    if shape:
        rank_zero_info(
            "Elastic resume: "
            + ", ".join(f"{k} {a} -> {b}" for k, a, b in shape)
            + ". The rest of the epoch is spread over the new layout; every sample is "
            "still seen once."
        )
