"""``lrd inspect --sources ... --weights ...``: what a resume of a mixture under them would do.

A dry run: a :class:`~lightning_resumable_data.MixtureSampler` is built over sources of the
given sizes with the given weights (the saved seed, budget, temperature and layout), a
source of the checkpoint left out keeps its place weighing 0 (as a ``ResumableDataModule``
resume does), the saved state is loaded into it under the policy, and the change it records
is reported: each source's draws left in the interrupted epoch under the saved weights and
under the new ones, the sources added and removed.

Example:
    >>> from lightning_resumable_data import MixtureDataset, MixtureSampler
    >>> saved = MixtureSampler(MixtureDataset({"web": range(30)}), [1.0], 1, 0,
    ...                        samples_per_epoch=40).state_at(0, 8)
    >>> report = mixture_dry_run(saved, {"web": 30, "math": 10}, {"web": 1, "math": 1})
    >>> report["added"], report["left_after"]
    (['math'], {'web': 16, 'math': 16})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.samplers.data_changes import DataChangePolicy, source_change
from lightning_resumable_data.state import StateMismatchError

__all__ = ["MixtureChange", "mixture_dry_run", "parse_pairs"]

# A dry run's sources (name: size), weights and epoch budget; None keeps the saved one.
MixtureChange = tuple[dict[str, int] | None, dict[str, float] | None, int | None]


def mixture_dry_run(
    sampler_state: Mapping[str, Any],
    sources: Mapping[str, int] | None,
    weights: Mapping[str, float] | None,
    policy: DataChangePolicy | None = None,
    samples_per_epoch: int | None = None,
) -> dict[str, Any]:
    """What a resume of the mixture state over ``sources`` with ``weights`` would do.

    ``None`` keeps the saved sources (or weights, or epoch budget: ``samples_per_epoch``).
    The answer holds ``refused`` (the message
    the resume would raise) when the policy or the state refuses the change.

    Raises:
        CliError: The checkpoint's sampler is not a mixture's, a new source has no weight,
            or a weight names no source.
    """
    from lightning_resumable_data.datasets.mixture import MixtureDataset, RemovedSource
    from lightning_resumable_data.samplers.mixture import MixtureSampler

    if sampler_state.get("kind") != MixtureSampler.KIND:
        raise CliError(
            f"--sources and --weights need a mixture's checkpoint; this one holds a "
            f"{sampler_state.get('kind')!r} state",
            hint="for a single dataset, dry-run with --dataset-length N.",
        )
    fingerprint = sampler_state["fingerprint"]
    saved = dict(zip(fingerprint["sources"], fingerprint["sizes"], strict=True))
    initial = fingerprint["initial"]
    saved_weights = dict(zip(saved, initial["weights"], strict=True))
    wanted = dict(saved if sources is None else sources)
    removed = [n for n in saved if n not in wanted]
    added = [n for n in wanted if n not in saved]
    chosen = {n: saved_weights.get(n) for n in wanted} if weights is None else dict(weights)
    unknown = [n for n in chosen if n not in wanted]
    if unknown:
        raise CliError(
            f"--weights names {unknown}, which are not among the sources {list(wanted)}",
            hint="add them with --sources NAME=SIZE (with every other source), or drop them.",
        )
    missing = [n for n in wanted if chosen.get(n) is None]
    if missing:
        raise CliError(
            f"sources {missing} have no weight", hint="give every source one with --weights."
        )
    out: dict[str, Any] = {"sources": wanted, "added": added, "removed": removed}
    refusal = _refusal(saved, wanted, sampler_state.get("schedule") or [])
    if refusal is not None:  # what ResumableDataModule refuses before the sampler sees it
        return {**out, "refused": refusal}
    # a source left out keeps its place (ResumableDataModule does the same): it weighs 0
    kept = {n: RemovedSource(n, size) if n in removed else range(size) for n, size in saved.items()}
    mix = MixtureDataset({**kept, **{n: range(wanted[n]) for n in added}})
    try:
        sampler = MixtureSampler(
            mix,
            {n: float(chosen.get(n) or 0.0) for n in mix.names},
            num_replicas=int(sampler_state.get("num_replicas", 1)),
            rank=0,
            seed=int(fingerprint["seed"]),
            temperature=float(initial["temperature"]),
            drop_last=bool(fingerprint["drop_last"]),
            samples_per_epoch=int(samples_per_epoch or fingerprint["samples_per_epoch"]),
        )
    except ValueError as error:
        raise CliError(
            f"--sources/--weights: {error}", hint="e.g. --weights web=0.7,code=0.3"
        ) from None
    sampler.data_changes = DataChangePolicy() if policy is None else policy
    try:
        sampler.load_state_dict(dict(sampler_state))
    except StateMismatchError as error:
        return {**out, "refused": str(error)}
    report = sampler.last_reweight
    if report is None:  # the weights in force at the resume position are the new ones
        return {**out, "change": None}
    from lightning_resumable_data.samplers._mixture_changes import describe_reweight

    return {
        **out,
        "epoch": report["epoch"],
        "position": report["position"],
        "left_before": report["left_before"],
        "left_after": report["left_after"],
        "text": describe_reweight(report),
    }


def _refusal(saved: dict[str, int], wanted: dict[str, int], schedule: list[Any]) -> str | None:
    """Why a ``ResumableDataModule`` resume refuses these sources (``None``: it does not).

    :func:`~lightning_resumable_data.samplers.data_changes.source_change` decides, and an
    addition or removal is refused under declared phases.
    """
    kind, problem = source_change(saved, wanted)
    phases = any(
        isinstance(e, dict)
        and e.get("kind") == "declared"
        and (e.get("epoch"), e.get("position")) != (0, 0)
        for e in schedule
    )
    if kind in ("added", "removed") and phases:
        problem = "sources added or removed under declared phases (they weigh every source)"
    if not problem:
        return None
    return (
        f"Cannot resume: the data configuration changed ({problem}). A ResumableDataModule "
        "refuses it (docs/changes.md, 'Not covered yet'); allow_config_change=True accepts "
        "it without exactness."
    )


def parse_pairs(text: str, kind: type[int] | type[float], flag: str) -> dict[str, Any]:
    """``"web=40,code=16"`` as ``{"web": 40, "code": 16}``.

    Example:
        >>> parse_pairs("web=0.5, math=1", float, "--weights")
        {'web': 0.5, 'math': 1.0}
    """
    pairs: dict[str, Any] = {}
    example = "web=40000,code=16000" if kind is int else "web=0.5,code=0.3,math=0.2"
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        name = name.strip()
        try:
            number = kind(value)
        except ValueError:
            number = None
        if number is None or not number >= 0 or number in (float("inf"),) or not name:
            raise CliError(
                f"{flag} {text!r}: {item!r} is not NAME={kind.__name__.upper()} with a "
                "finite value >= 0",
                hint=f"e.g. {flag} {example}",
            )
        if name in pairs:
            raise CliError(f"{flag} {text!r} names {name!r} twice", hint=f"e.g. {flag} {example}")
        pairs[name] = number
    if not pairs:
        raise CliError(f"{flag} {text!r} names no source", hint=f"e.g. {flag} web=1,code=1")
    return pairs
