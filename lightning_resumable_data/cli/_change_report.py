"""``lrd inspect --dataset-length N``: what a resume over a dataset that changed would do.

A dry run: the sampler the checkpoint's state describes is rebuilt over ``N`` samples under
the policy, the saved state is loaded into it, and the change it records is reported with
its counts (old samples left, removed, added) before anything runs.

Example:
    >>> from lightning_resumable_data import DistributedSampler
    >>> sampler = DistributedSampler(range(10), num_replicas=1, rank=0, seed=0)
    >>> state = sampler.state_at(0, 4)
    >>> report = change_report(state, 15, DataChangePolicy())
    >>> report["left"], report["added"], report["removed"]
    (11, 5, 0)
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._mixture_dryrun import MixtureChange
from lightning_resumable_data.cli._reading import DataState
from lightning_resumable_data.index.changes import DataChange
from lightning_resumable_data.index.partition import samples_per_rank
from lightning_resumable_data.samplers.data_changes import DataChangePolicy
from lightning_resumable_data.state import StateMismatchError

__all__ = [
    "change_report",
    "changed_epoch_length",
    "format_changes",
    "found_changes",
    "sources_added",
]


def change_report(
    sampler_state: Mapping[str, Any],
    new_length: int,
    policy: DataChangePolicy,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """The change a resume over ``new_length`` samples would record, with its counts.

    Raises:
        CliError: The checkpoint's sampler is not a single dataset's, or the policy refuses
            the change (the message says why and which option accepts it).
    """
    from lightning_resumable_data.samplers.distributed import DistributedSampler

    fingerprint = sampler_state.get("fingerprint") or {}
    if sampler_state.get("kind") != DistributedSampler.KIND:
        raise CliError(
            f"--dataset-length needs a single dataset's checkpoint; this one holds a "
            f"{sampler_state.get('kind')!r} state",
            hint="a mixture or a sharded dataset cannot follow changed data yet (docs/changes.md).",
        )
    old = int(fingerprint.get("dataset_length", 0))
    sampler = DistributedSampler(
        range(new_length),
        num_replicas=int(sampler_state.get("num_replicas", 1)),
        rank=0,
        shuffle=bool(fingerprint.get("shuffle", True)),
        seed=int(fingerprint.get("seed", 0)),
        drop_last=bool(fingerprint.get("drop_last", False)),
        algorithm=fingerprint.get("algorithm", "randperm"),
    )
    sampler.data_changes = policy
    try:
        sampler.load_state_dict(dict(sampler_state))
    except StateMismatchError as error:
        raise CliError(str(error), hint="see docs/changes.md for the policy.") from None
    report = sampler.last_change
    if report is None:
        return {"old_length": old, "new_length": new_length, "change": None}
    return {
        "old_length": old,
        "new_length": new_length,
        "epoch": report.change.epoch,
        "position": report.change.position,
        "unread_old": report.unread_before - report.removed,
        "removed": report.removed,
        "added": report.added,
        "left": report.left,
        "trained": _trained(report.left, sampler, batch_size),
        "later_epochs": new_length,
        "text": report.describe(),
    }


def _trained(left: int, sampler: Any, batch_size: int | None) -> int:
    """Samples the saved layout trains of ``left``: pads in, a drop_last tail and batch out."""
    per_rank = samples_per_rank(left, sampler.num_replicas, sampler.drop_last)
    if sampler.drop_last and batch_size:  # the DataModule's loader drops a short batch too
        per_rank -= per_rank % batch_size
    return int(per_rank * sampler.num_replicas)


def found_changes(
    found: DataState,
    new_length: int | None,
    policy: DataChangePolicy | None,
    mixture: MixtureChange | None = None,
) -> dict[str, Any] | None:
    """The changes a checkpoint records, and the dry run of one more to ``new_length``.

    ``mixture``: the sources (name: size) and weights of a mixture's dry run (``None`` in
    either keeps the saved ones; :mod:`~lightning_resumable_data.cli._mixture_dryrun`).
    ``policy`` ``None`` is the default policy; the answer is ``None`` when there is neither.
    """
    sampler_state = found.loader.get("sampler") or {}
    recorded = [
        dict(zip(_FIELDS, entry, strict=True)) for entry in sampler_state.get("changes") or []
    ]
    out: dict[str, Any] = {"recorded": recorded}
    added = sources_added(sampler_state)
    if added:
        out["sources_added"] = added
    if new_length is not None:
        batch_size = found.loader.get("batch_size")
        chosen = DataChangePolicy() if policy is None else policy
        try:
            out["dry_run"] = change_report(sampler_state, new_length, chosen, batch_size)
        except CliError as refused:  # what the resume would say, as the report's answer
            out["dry_run"] = {"new_length": new_length, "refused": refused.message}
    if mixture is not None:
        from lightning_resumable_data.cli._mixture_dryrun import mixture_dry_run

        sources, weights, budget = mixture
        out["dry_run"] = mixture_dry_run(sampler_state, sources, weights, policy, budget)
    return out if recorded or added or "dry_run" in out else None


_FIELDS = DataChange._fields


def sources_added(sampler_state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A mixture's recorded additions: where each took effect and the sources it added.

    Example:
        >>> state = {"fingerprint": {"sources": ["web", "math"]}, "sources_added": [[1, 16, 1]]}
        >>> sources_added(state)
        [{'epoch': 1, 'position': 16, 'sources': ['math']}]
    """
    names = (sampler_state.get("fingerprint") or {}).get("sources") or []
    recorded = sampler_state.get("sources_added") or []
    if not (recorded and isinstance(recorded, list) and isinstance(names, list)):
        return []
    ends = [entry[2] for entry in recorded[1:]] + [len(names)]
    return [
        {"epoch": epoch, "position": position, "sources": names[before:end]}
        for (epoch, position, before), end in zip(recorded, ends, strict=True)
    ]


def format_changes(found: Mapping[str, Any]) -> str:
    """The changes as ``lrd inspect`` prints them, after its report."""
    lines = []
    for change in found["recorded"]:
        lines.append(
            f"data change  epoch {change['epoch']} at sample {change['position']}: "
            f"{change['old_length']} -> {change['new_length']} samples "
            f"({change['added_stop'] - change['added_start']} added to that epoch)"
        )
    for added in found.get("sources_added", []):
        lines.append(
            f"data change  epoch {added['epoch']} at sample {added['position']}: "
            f"sources added to the mixture: {', '.join(added['sources'])}"
        )
    dry = found.get("dry_run")
    if dry is not None:
        same = (
            "No change: the resume position draws under these already."
            if "sources" in dry
            else None
        )
        text = dry.get("text") or same or f"The dataset has {dry['new_length']} samples: no change."
        if "refused" in dry:
            text = f"refused: {dry['refused']}"
        elif "trained" in dry:
            text += f" In the saved layout the resumed epoch trains {dry['trained']} samples."
        wrapped = textwrap.wrap(text, 87)
        lines += [f"{'dry run' if i == 0 else '':<13}{line}" for i, line in enumerate(wrapped)]
    return "\n".join(lines)


def changed_epoch_length(sampler_state: Mapping[str, Any]) -> int | None:
    """The samples the saved epoch reads where recorded data changes resized it, or ``None``.

    ``None`` too for a state that is not a single dataset's with changes.
    """
    if not sampler_state.get("changes") or sampler_state.get("kind") != "DistributedSampler":
        return None
    from lightning_resumable_data.cli._shadow_run import shadow_sampler

    fingerprint = sampler_state.get("fingerprint") or {}
    try:
        sampler = shadow_sampler("DistributedSampler", fingerprint, 1)
        sampler.load_state_dict({**sampler_state, "num_replicas": 1})
    except (StateMismatchError, KeyError, TypeError, ValueError):
        return None  # the report's resume part says what is wrong with it
    return sampler.epoch_size(sampler.epoch)
