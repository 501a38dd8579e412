"""``lrd trace``: the samples an optimizer step trained, on every rank, from a checkpoint.

The checkpoint's ``ResumableDataCallback`` entry holds the run's data history (where every
batch began; :mod:`~lightning_resumable_data.lightning.history`), and its loader state the
sampler's configuration and schedule. The sampler is rebuilt over stand-in data, as
``lrd inspect`` does, and :func:`~lightning_resumable_data.lightning.trace.trace_step`
looks the step's positions up in its order: nothing is read or replayed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._dryrun import build_sampler
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import find_data_state, load_checkpoint
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.trace import TracedBatch, replay_changes, trace_step

__all__ = ["format_trace", "trace"]


def trace(
    path: Path,
    step: int,
    ranks: list[int] | None = None,
    *,
    unsafe_unpickle: bool = False,
) -> dict[str, Any]:
    """What ``lrd trace`` shows, as a JSON-serialisable dict.

    Raises:
        CliError: No data state or no data history in the checkpoint (one written before
            this release, or without a ``ResumableDataCallback``), a sampler ``lrd`` cannot
            rebuild, or a step the history does not cover.
    """
    checkpoint = load_checkpoint(path, unsafe_unpickle=unsafe_unpickle)
    found = find_data_state(checkpoint, str(path))
    saved = (found.callback or {}).get("data_history")
    if saved is None:
        raise CliError(
            f"{path} holds no data history: it was written without a ResumableDataCallback "
            "(Fabric, or a plain loader) or by a release before 0.4",
            hint="a run trained with this release and the callback (a ResumableDataModule "
            "adds one) records it in every checkpoint.",
        )
    sampler_state = found.loader.get("sampler")
    if not isinstance(sampler_state, dict) or "kind" not in sampler_state:
        raise CliError(
            f"the loader state at {found.where} in {path} has no position sampler",
            hint="lrd trace follows this package's samplers (the loader's resume mode 'position').",
        )
    try:
        history = DataHistory.from_state(saved)
        sampler = build_sampler(
            str(sampler_state["kind"]),
            sampler_state["fingerprint"],
            int(found.loader["num_replicas"]),
            sampler_state.get("schedule", ()),
        )
        replay_changes(sampler, history)
        batches = trace_step(sampler, history, step, ranks)
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    return {
        "checkpoint": str(path),
        "step": step,
        "sampler": sampler_state["kind"],
        "batches": [_batch_json(batch) for batch in batches],
    }


def _batch_json(batch: TracedBatch) -> dict[str, Any]:
    ranks = []
    for samples in batch.ranks:
        entry: dict[str, Any] = {
            "rank": samples.rank,
            "positions": samples.positions.tolist(),
            "indices": samples.indices.tolist(),
        }
        if samples.sources is not None and samples.local is not None:
            entry["sources"] = list(samples.sources)
            entry["source_indices"] = samples.local.tolist()
        ranks.append(entry)
    where = batch.batch
    return {
        "epoch": where.epoch,
        "consumed": where.consumed,
        "world_size": where.world,
        "batch_size": where.batch_size,
        "ranks": ranks,
    }


def format_trace(report: dict[str, Any]) -> str:
    """The text ``lrd trace`` prints: per batch of the step, each rank's samples.

    Example:
        >>> print(format_trace({"checkpoint": "c.ckpt", "step": 3, "sampler": "S",
        ...     "batches": [{"epoch": 0, "consumed": 12, "world_size": 1, "batch_size": 2,
        ...     "ranks": [{"rank": 0, "positions": [12, 13], "indices": [7, 1]}]}]}))
        step 3 of c.ckpt (S): 1 batch
        batch 1: epoch 0, from global sample 12, 1 rank x 2 samples
          rank 0: indices 7 1
    """
    batches = report["batches"]
    lines = [
        f"step {report['step']} of {report['checkpoint']} ({report['sampler']}): "
        f"{len(batches)} batch{'es' if len(batches) != 1 else ''}"
    ]
    for number, batch in enumerate(batches, 1):
        ranks = "rank" if batch["world_size"] == 1 else "ranks"
        most = max((len(rank["indices"]) for rank in batch["ranks"]), default=0)
        short = " (the epoch's last, short batch)" if most < batch["batch_size"] else ""
        lines.append(
            f"batch {number}: epoch {batch['epoch']}, from global sample {batch['consumed']}, "
            f"{batch['world_size']} {ranks} x {most if short else batch['batch_size']} "
            f"samples{short}"
        )
        for rank in batch["ranks"]:
            if "sources" in rank:
                pairs = zip(rank["sources"], rank["source_indices"], strict=True)
                shown = " ".join(f"{source}:{index}" for source, index in pairs)
                lines.append(f"  rank {rank['rank']}: source:index {shown}")
            else:
                shown = " ".join(str(i) for i in rank["indices"])
                lines.append(f"  rank {rank['rank']}: indices {shown}")
    return "\n".join(lines)
