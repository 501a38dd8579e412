"""``lrd trace``: what a step trained (``lrd find``, its inverse: :mod:`.find`).

The checkpoint's ``ResumableDataCallback`` entry holds the run's data history (where every
batch began; :mod:`~lightning_resumable_data.lightning.history`), and its loader state the
sampler's configuration and schedule. The sampler is rebuilt over stand-in data, as
``lrd inspect`` does, and :func:`~lightning_resumable_data.lightning.trace.trace_step`
looks the step's positions up in its order: nothing is read or replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._dryrun import build_sampler, sharded_sampler
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import find_data_state, load_checkpoint
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.locations import sample_locations
from lightning_resumable_data.lightning.trace import TracedBatch, replay_changes, trace_step
from lightning_resumable_data.samplers._mixture_added import check_added
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["Loaded", "format_trace", "load", "trace"]


@dataclass
class Loaded:
    """What ``lrd trace``/``find`` read from a checkpoint (and its shards, if given)."""

    history: DataHistory
    sampler: DistributedSampler
    kind: str
    position: tuple[int, int]
    drop_last: bool
    dataset: Any = None  # the sharded dataset of --shards, for sample locations
    module: Any = None  # the data module's saved entry (its config), if any


def load(path: Path, unsafe_unpickle: bool, shards: Path | None = None) -> Loaded:
    """The checkpoint's record, sampler (with the run's schedule), position and drop_last.

    A ``ShardedSampler``'s order needs its shards' sizes: ``shards`` is their folder.

    Raises:
        CliError: No data state or no data history (written before this release, or without
            a ``ResumableDataCallback``), or a sampler ``lrd`` cannot rebuild.
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
            hint="lrd follows this package's samplers (the loader's resume mode 'position').",
        )
    try:
        history = DataHistory.from_state(saved)
        if history.steps_done is None:  # saved after the fit ended: the trainer's count
            done = checkpoint.get("global_step")
            history.steps_done = int(done) if isinstance(done, int) else None
        kind, world = str(sampler_state["kind"]), int(found.loader["num_replicas"])
        dataset = None
        if kind == "ShardedSampler":
            if shards is None:
                raise CliError(
                    f"{path} was trained over a DistributedShardedDataset: its order needs "
                    "the shards' sizes",
                    hint="pass --shards DIR for token shards (their index.json); for the "
                    "peers' formats use the Python API (trace_step with dataset.sampler()).",
                )
            sampler, dataset = sharded_sampler(sampler_state["fingerprint"], world, shards)
        else:
            schedule = sampler_state.get("schedule", ())
            sampler = build_sampler(kind, sampler_state["fingerprint"], world, schedule)
            if isinstance(sampler, MixtureSampler):  # sources appended at a resume
                count = len(sampler.mixture.names)
                sampler._plan.added = check_added(sampler_state, count, sampler.KIND)
            if shards is not None:
                dataset = _located(shards, sampler.epoch_length)
        replay_changes(sampler, history)
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    position = (int(sampler_state.get("epoch", 0)), int(sampler_state.get("consumed", 0)))
    drop_last = bool(((found.module or {}).get("config") or {}).get("drop_last", False))
    return Loaded(history, sampler, kind, position, drop_last, dataset, found.module)


def _located(shards: Path, length: int) -> Any:
    """The token shards of ``shards`` as a sharded dataset of ``length`` samples."""
    from lightning_resumable_data.shards import DistributedShardedDataset, open_token_shards

    try:
        dataset = DistributedShardedDataset(open_token_shards(shards))
    except (OSError, ValueError) as error:
        raise ValueError(f"--shards {shards}: not a folder of token shards ({error})") from None
    if len(dataset) != length:
        raise ValueError(
            f"the token shards in {shards} hold {len(dataset)} samples; the run's dataset "
            f"had {length}: they are not its data."
        )
    return dataset


def trace(
    path: Path,
    step: int,
    ranks: list[int] | None = None,
    *,
    unsafe_unpickle: bool = False,
    shards: Path | None = None,
) -> dict[str, Any]:
    """What ``lrd trace`` shows, as a JSON-serialisable dict.

    Raises:
        CliError: What :func:`load` refuses, or a step the history does not cover.
    """
    run = load(path, unsafe_unpickle, shards)
    try:
        batches = trace_step(
            run.sampler, run.history, step, ranks, position=run.position, drop_last=run.drop_last
        )
    except ValueError as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    return {
        "checkpoint": str(path),
        "step": step,
        "sampler": run.kind,
        "planned": any(batch.planned for batch in batches),
        "batches": [_batch_json(batch, run.dataset) for batch in batches],
    }


def _batch_json(batch: TracedBatch, dataset: Any = None) -> dict[str, Any]:
    ranks = []
    for samples in batch.ranks:
        entry: dict[str, Any] = {
            "rank": samples.rank,
            "positions": samples.positions.tolist(),
            "indices": samples.indices.tolist(),
        }
        if dataset is not None:
            located = sample_locations(dataset, samples.indices.tolist())
            entry["locations"] = [vars(location) for location in located]
        if samples.sources is not None and samples.local is not None:
            entry["sources"] = list(samples.sources)
            entry["source_indices"] = samples.local.tolist()
        ranks.append(entry)
    where = batch.batch
    return {
        "epoch": where.epoch,
        "consumed": where.consumed,
        "start": batch.start if batch.start >= 0 else where.consumed,
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
    if report.get("planned"):
        lines[0] += (
            " (planned: after the checkpoint, as its layout would read it if nothing changes:"
            " no resume on another layout, no online weight change)"
        )
    for number, batch in enumerate(batches, 1):
        ranks = "rank" if batch["world_size"] == 1 else "ranks"
        most = max((len(rank["indices"]) for rank in batch["ranks"]), default=0)
        short = " (the epoch's last, short batch)" if most < batch["batch_size"] else ""
        lines.append(
            f"batch {number}: epoch {batch['epoch']}, from global sample "
            f"{batch.get('start', batch['consumed'])}, "
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
            for at in rank.get("locations", ()):
                size = at.get("byte_length")
                span = f", bytes {at['byte_offset']}+{size}" if size is not None else ""
                lines.append(f"    {at['index']}: {at['shard']} row {at['row']}{span}")
    return "\n".join(lines)
