"""``lrd inspect``: where the data of a checkpoint stands, and what a resume would do.

This module reports the position (and, for a mixture, the phase in force and the samples
drawn per source); :mod:`._resume_report` says what a resume under a layout would do.

Neither imports torch or Lightning for a checkpoint whose state the package accepts: the
file is read by :mod:`._unpickle` and the dry runs are the shadows' (:mod:`._shadow_run`),
so the command answers in a fraction of a second. Torch and Lightning come in only where
those leave the answer to them (a legacy file, ``--unsafe-unpickle``, a refused resume).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._change_report import changed_epoch_length, found_changes
from lightning_resumable_data.cli._dryrun import mixture_counts
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._format import phase_start
from lightning_resumable_data.cli._inspect_text import format_inspect
from lightning_resumable_data.cli._mixture_dryrun import MixtureChange
from lightning_resumable_data.cli._reading import (
    DataState,
    find_data_state,
    fit_loop_loader,
    load_checkpoint,
)
from lightning_resumable_data.cli._resume_report import resume_report
from lightning_resumable_data.cli._shadow_run import shadow_counts
from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.samplers.data_changes import DataChangePolicy
from lightning_resumable_data.samplers.schedule import entry_key

__all__ = ["DataState", "find_data_state", "format_inspect", "inspect", "load_checkpoint"]


def _match_phases(
    schedule: Sequence[Mapping[str, Any]], phases: Sequence[Mapping[str, Any]], names: list[str]
) -> list[Mapping[str, Any] | None]:
    """The configured phase behind each schedule entry (in order), ``None`` where there is none.

    The first entry is the initial weights, unless a phase at step or epoch 0 replaced them.
    """
    matched: list[Mapping[str, Any] | None] = [None] * len(schedule)
    remaining = list(phases)
    for i, entry in enumerate(schedule):
        if entry.get("kind", "declared") != "declared":
            continue  # decided during training (online) or carried over: no phase behind it
        for j, phase in enumerate(remaining):
            if i == 0 and (phase.get("start_step") or phase.get("start_epoch")):
                break  # only a phase from the very start can stand in for the initial weights
            weights = [float(phase["weights"].get(n, math.nan)) for n in names]
            if weights == list(entry["weights"]) and phase["temperature"] == entry["temperature"]:
                matched[i] = phase
                del remaining[: j + 1]
                break
    return matched


def _accumulate(
    schedule: Sequence[Mapping[str, Any]],
    matched: Sequence[Mapping[str, Any] | None],
    batches: int,
    step_samples: int,
) -> int:
    """``accumulate_grad_batches`` of the saved run, from where its step phases were placed."""
    seen = set()
    for entry, phase in zip(schedule, matched, strict=True):
        step = phase.get("start_step") if phase is not None else None
        if step:
            batch = entry["epoch"] * batches + entry["position"] // step_samples
            if batch % step:
                return 1
            seen.add(batch // step)
    return seen.pop() if len(seen) == 1 else 1


def _phase_label(
    index: int, phase: Mapping[str, Any] | None, kind: str, configured: Sequence[Mapping[str, Any]]
) -> str:
    """How ``lrd inspect`` names schedule entry ``index``: phases by their number (1, 2, ...)."""
    if kind == "online":
        return "online change"
    if kind == "carry":
        return "online weights carried into the epoch"
    if phase is not None:
        return f"phase {configured.index(phase) + 1} ({phase_start(phase)})"
    return "initial weights" if index == 0 else f"weight change {index}"


def _mixture_report(
    loader_state: Mapping[str, Any], module: Mapping[str, Any] | None
) -> tuple[dict[str, Any], int]:
    """The mixture part of the report, and the saved run's ``accumulate_grad_batches``.

    The accumulation is only known from a data module's phases by ``start_step``; else 1.
    """
    sampler_state = loader_state["sampler"]
    fingerprint = sampler_state["fingerprint"]
    names = list(fingerprint["sources"])
    epoch, consumed = int(loader_state["epoch"]), int(loader_state["consumed"])
    schedule = list(sampler_state["schedule"])
    configured = list(module["config"].get("phases", [])) if module is not None else []
    matched = _match_phases(schedule, configured, names)
    index = bisect.bisect_right([entry_key(e) for e in schedule], (epoch, consumed))
    index = max(index - 1, 0)

    def describe(i: int) -> dict[str, Any]:
        entry = schedule[i]
        probs = mixture_probabilities(entry["weights"], entry["temperature"]).tolist()
        phase, kind = matched[i], str(entry.get("kind", "declared"))
        return {
            "index": i,
            "kind": kind,
            "label": _phase_label(i, phase, kind, configured),
            "start_step": phase.get("start_step") if phase is not None else None,
            "start_epoch": phase.get("start_epoch") if phase is not None else None,
            "epoch": int(entry["epoch"]),
            "position": int(entry["position"]),
            "temperature": float(entry["temperature"]),
            "weights": dict(zip(names, map(float, entry["weights"]), strict=True)),
            "shares": dict(zip(names, probs, strict=True)),
        }

    # The epoch's planned totals, from the sampler with the saved schedule (its shadow).
    drawn = sampler_state.get("source_counts")
    unplanned: str | None = None  # why the epoch's totals are unknown
    counted = shadow_counts(fingerprint, schedule, sampler_state, epoch, consumed)
    if counted is not None:
        epoch_totals: dict[str, int] | None = counted[0]
        drawn = drawn if isinstance(drawn, dict) else counted[1]
    else:  # the real sampler (torch): its error says why it refuses
        epoch_totals, drawn, unplanned = mixture_counts(
            fingerprint, schedule, sampler_state, epoch, consumed
        )
    report: dict[str, Any] = {
        "sources": dict(zip(names, map(int, fingerprint["sizes"]), strict=True)),
        "phase": describe(index),
        "next_phase": describe(index + 1) if index + 1 < len(schedule) else None,
        # the declared entries, and the initial weights a phase from step 0 replaced
        "phases": sum(e.get("kind", "declared") == "declared" for e in schedule)
        + (matched[0] is not None),
        "online_changes": sum(e.get("kind") == "online" for e in schedule),
        "drawn": {n: int(v) for n, v in drawn.items()} if isinstance(drawn, dict) else None,
        "epoch_totals": epoch_totals,
        "epoch_totals_unknown": unplanned,
    }
    if module is None:
        return report, 1
    world, batch = int(loader_state["num_replicas"]), int(loader_state["batch_size"])
    batches = max(fingerprint["samples_per_epoch"] // world // batch, 1)
    return report, _accumulate(schedule, matched, batches, world * batch)


def inspect(
    path: Path,
    world_size: int | None = None,
    batch_size: int | None = None,
    *,
    unsafe_unpickle: bool = False,
    dataset_length: int | None = None,
    policy: DataChangePolicy | None = None,
    mixture: MixtureChange | None = None,
) -> dict[str, Any]:
    """Everything ``lrd inspect`` shows, as a JSON-serialisable dict.

    With ``dataset_length``, ``data_changes.dry_run`` says what a resume over that many
    samples would do under ``policy`` (default ``DataChangePolicy()``); with ``mixture``
    (sources with their sizes, weights; ``None`` keeps the saved ones), what a resume of a
    mixture under them would do.

    The file is read as ``weights_only=True`` reads it, tensors as placeholders, unless
    ``unsafe_unpickle`` (see :func:`~lightning_resumable_data.cli._reading.load_checkpoint`).

    Raises:
        CliError: The file is not a checkpoint, holds no state of this package, or needs a
            full unpickle that was not allowed.
    """
    checkpoint = load_checkpoint(path, unsafe_unpickle=unsafe_unpickle, placeholders=True)
    found = find_data_state(checkpoint, str(path))
    try:
        report = _report(path, checkpoint, found, world_size, batch_size)
        changes = found_changes(found, dataset_length, policy, mixture)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise CliError(
            f"the data state at {found.where} in {path} is malformed "
            f"({type(error).__name__}: {error})",
            hint="the checkpoint is truncated, edited, or was written by an incompatible "
            "version of lightning-resumable-data.",
        ) from None
    if changes is not None:
        report["data_changes"] = changes
    return report


def _history_report(found: DataState) -> dict[str, Any] | None:
    """The steps the checkpoint's data history covers (``lrd trace``), or ``None``."""
    saved = (found.callback or {}).get("data_history")
    if saved is None:
        return None
    history = DataHistory.from_state(saved)
    first, last = history.finished_steps or (None, None)
    return {
        "first_step": first,
        "last_step": last,
        "runs": len(history.runs),
        "online_changes": len(history.changes),
        "skipped_steps": [list(steps) for steps in history.skipped_steps],
        "skipped_samples": {str(e): sum(b - a for a, b in r) for e, r in history.skips.items()},
        "quarantined": sorted(history.quarantined),
    }


def _report(
    path: Path,
    checkpoint: Mapping[str, Any],
    found: DataState,
    world_size: int | None,
    batch_size: int | None,
) -> dict[str, Any]:
    state = found.loader
    saved_world, saved_batch = int(state["num_replicas"]), int(state["batch_size"])
    epoch, trained = int(state["epoch"]), int(state["batches_yielded"])
    mode = str(state["fingerprint"]["mode"])
    report: dict[str, Any] = {
        "checkpoint": str(path),
        "found_at": found.where,
        "other_loader_states": list(found.others),
        "global_step": checkpoint.get("global_step"),
        "lightning_epoch": checkpoint.get("epoch"),
        "epoch": epoch,
        "batches_trained": trained,
        "world_size": saved_world,
        "batch_size": saved_batch,
        "mode": mode,
        "callback": found.callback is not None,
        "history": _history_report(found),
        "warnings": [],
    }
    sampler_state = state.get("sampler") if mode == "position" else None
    mixture, accumulate = None, 1
    if isinstance(sampler_state, dict):
        consumed = int(state["consumed"])
        fingerprint = dict(sampler_state.get("fingerprint", {}))
        report |= {
            "consumed": consumed,
            # the epoch's global order, before padding or dropping a ragged tail
            "epoch_length": int(
                fingerprint.get("samples_per_epoch", fingerprint.get("dataset_length", 0))
            ),
            "sampler": {"kind": sampler_state.get("kind"), "fingerprint": fingerprint},
        }
        changed = changed_epoch_length(sampler_state)  # an epoch that data changes resized
        if changed is not None:
            report["epoch_length"] = changed
        if sampler_state.get("kind") == "MixtureSampler":
            mixture, accumulate = _mixture_report(state, found.module)
    else:
        report["sampler"] = {"kind": None, "fingerprint": {}}
    report["mixture"] = mixture
    report["accumulate_grad_batches"] = accumulate
    fit_loop = fit_loop_loader(checkpoint)
    if fit_loop is not None and found.module is not None and fit_loop != state:
        report["warnings"].append(
            "the fit loop's copy of the loader state differs from the data module's; "
            "Lightning applies the fit loop's copy last, so its position wins on resume."
        )
    if found.module is None:
        report["warnings"].append(
            "no ResumableDataModule state: the configuration (phases included) is not "
            "checked; only the loader's own state is."
        )
    elif found.module["config"].get("phases") and found.callback is None:
        report["warnings"].append(
            "the data module has phases but no ResumableDataCallback state was saved."
        )
    report["resume"] = resume_report(
        found,
        saved_world if world_size is None else world_size,
        saved_batch if batch_size is None else batch_size,
        accumulate,
    )
    return report
