"""``lrd inspect``: where the data of a checkpoint stands, and what a resume would do."""

from __future__ import annotations

import bisect
import dataclasses
import math
import pickle
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._dryrun import (
    DryRun,
    build_loader,
    quiet,
    resume_datamodule,
    resume_loader,
)
from lightning_resumable_data.cli._errors import EXIT_FAILURE, CliError
from lightning_resumable_data.cli._format import count, percent, table
from lightning_resumable_data.index.mixture import mixture_probabilities
from lightning_resumable_data.index.permutation import check_algorithm
from lightning_resumable_data.lightning.plan import PlanConfig
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler
from lightning_resumable_data.samplers.mixture import MixturePhase, MixtureSampler

__all__ = ["DataState", "find_data_state", "format_inspect", "inspect", "load_checkpoint"]

LOADER_KIND = StatefulDataLoader.KIND
# Sharded checkpoints are directories; these files hold the trainer state in them.
_SHARDED_FILES = ("meta.pt", "checkpoint/mp_rank_00_model_states.pt")
_SKIP_KEYS = frozenset({"state_dict", "optimizer_states", "lr_schedulers", "model", "optimizer"})


# -- reading the checkpoint ------------------------------------------------------------------


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint file (or a sharded checkpoint's metadata file) on the CPU.

    Tensors are memory-mapped where the file allows it, so a large checkpoint is not read
    into memory to look at its data state. The file is unpickled (``weights_only=False``),
    as Lightning itself loads checkpoints: inspect only files you trust.

    Raises:
        CliError: The file is missing, not a checkpoint, or needs modules not installed.
    """
    if path.is_dir():
        found = next((path / name for name in _SHARDED_FILES if (path / name).is_file()), None)
        if found is None:
            raise CliError(
                f"{path} is a directory, not a checkpoint file",
                hint="pass the .ckpt file; for a sharded checkpoint pass DIR/meta.pt (FSDP) "
                "or DIR/checkpoint/mp_rank_00_model_states.pt (DeepSpeed).",
            )
        path = found
    if not path.is_file():
        raise CliError(
            f"no such file: {path}",
            hint="check the path; ModelCheckpoint writes to its dirpath, by default "
            "<default_root_dir>/lightning_logs/version_N/checkpoints/.",
        )
    import torch  # deferred: only this command reads torch files

    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError:  # not the zip format (legacy or not a checkpoint): no mmap
            loaded = torch.load(path, map_location="cpu", weights_only=False)
    except (ModuleNotFoundError, AttributeError) as error:
        raise CliError(
            f"cannot unpickle {path}: {error}",
            hint="the checkpoint holds objects of a module this environment lacks (e.g. "
            "hyperparameters); run lrd in the training environment.",
            code=EXIT_FAILURE,
        ) from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise CliError(
            f"{path} is not a checkpoint torch.load can read ({type(error).__name__}: {first})",
            hint="pass a file written by ModelCheckpoint, trainer.save_checkpoint or fabric.save.",
        ) from None
    if not isinstance(loaded, dict):
        raise CliError(
            f"{path} is not a checkpoint: it holds a {type(loaded).__name__}, not a dict",
            hint="pass a file written by ModelCheckpoint, trainer.save_checkpoint or fabric.save.",
        )
    return loaded


@dataclass
class DataState:
    """The data state found in a checkpoint.

    Attributes:
        where: Where it was found (a key path, e.g. ``"ResumableDataModule"``).
        loader: The training loader's state.
        module: The data module's whole state (with ``config``), if saved by one.
        callback: The ``ResumableDataCallback`` state, if any.
        others: Where other loader states were found (not shown).
    """

    where: str
    loader: dict[str, Any]
    module: dict[str, Any] | None = None
    callback: dict[str, Any] | None = None
    others: tuple[str, ...] = ()


def _is_module_state(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("config"), dict)
        and "sources" in value["config"]
    )


def _is_loader_state(value: object) -> bool:
    return isinstance(value, dict) and value.get("kind") == LOADER_KIND and "epoch" in value


def _loader_states(value: object, where: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every loader state nested in ``value`` (Fabric checkpoints put them under any key)."""
    if _is_loader_state(value):
        yield where, value
    elif depth < 6 and isinstance(value, Mapping):
        for key, item in value.items():
            if key not in _SKIP_KEYS:
                yield from _loader_states(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif depth < 6 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _loader_states(item, f"{where}[{i}]", depth + 1)


def find_data_state(checkpoint: Mapping[str, Any], name: str) -> DataState:
    """Find the data module's state, else a training-loader state, in a loaded checkpoint.

    Lightning stores ``datamodule.state_dict()`` under the class's ``__qualname__``
    (``"ResumableDataModule"``, or a subclass's name), the loader's state in its fit loop,
    and a Fabric checkpoint holds whatever was passed to ``fabric.save``.

    Raises:
        CliError: No state of this package is in the checkpoint.
    """
    callbacks = checkpoint.get("callbacks")
    callback = callbacks.get("ResumableDataCallback") if isinstance(callbacks, dict) else None
    callback = callback if isinstance(callback, dict) else None
    modules = [(k, v) for k, v in checkpoint.items() if _is_module_state(v)]
    modules.sort(key=lambda kv: kv[0] != "ResumableDataModule")
    for key, module in modules:
        if _is_loader_state(module.get("train_loader")):
            return DataState(key, module["train_loader"], module, callback)
    found = list(_loader_states(checkpoint, ""))
    if found:
        where, loader = found[0]
        module = modules[0][1] if modules else None
        return DataState(where, loader, module, callback, tuple(w for w, _ in found[1:]))
    if modules:
        raise CliError(
            f"{name} holds the {modules[0][0]} configuration but no training-loader position: "
            "it was saved before the training loader was built",
            hint="inspect a checkpoint written during trainer.fit.",
        )
    raise CliError(
        f"no lightning-resumable-data state in {name}: was it written with ResumableDataModule?",
        hint="train with trainer.fit(model, datamodule=ResumableDataModule(...)), or put a "
        "StatefulDataLoader in the state you pass to fabric.save.",
    )


# -- the report ------------------------------------------------------------------------------


def _spec(module: Mapping[str, Any], loader: Mapping[str, Any]) -> PlanConfig:
    """The data module's construction arguments, from its config and the sampler state."""
    config = module["config"]
    fingerprint = loader.get("sampler", {}).get("fingerprint", {})
    phases = [MixturePhase(**phase) for phase in config.get("phases", [])]
    if "initial" in fingerprint:  # a mixture: the sampler's order of sources is the one
        names = list(fingerprint["sources"])
        sources = dict(zip(names, fingerprint["sizes"], strict=True))
        initial = fingerprint["initial"]
        return PlanConfig(
            sources=sources,
            seed=int(config["seed"]),
            weights=dict(zip(names, initial["weights"], strict=True)),
            temperature=float(initial["temperature"]),
            samples_per_epoch=int(fingerprint["samples_per_epoch"]),
            phases=tuple(phases),
        )
    return PlanConfig(
        sources=dict(config["sources"]),
        seed=int(config["seed"]),
        shuffle=bool(fingerprint.get("shuffle", True)),
        algorithm=check_algorithm(fingerprint.get("algorithm", "randperm")),
        drop_last=bool(fingerprint.get("drop_last", False)),
        phases=tuple(phases),
    )


def _match_phases(
    schedule: Sequence[Mapping[str, Any]], phases: Sequence[Mapping[str, Any]], names: list[str]
) -> list[Mapping[str, Any] | None]:
    """The configured phase behind each schedule entry (in order), ``None`` where there is none."""
    matched: list[Mapping[str, Any] | None] = [None] * len(schedule)
    remaining = list(phases)
    for i, entry in enumerate(schedule[1:], start=1):
        for j, phase in enumerate(remaining):
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


def _phase_label(index: int, phase: Mapping[str, Any] | None) -> str:
    if index == 0:
        return "initial weights"
    if phase is None:
        return f"weight change {index}"
    if phase.get("start_step") is not None:
        return f"phase {index} (start_step {phase['start_step']})"
    return f"phase {index} (start_epoch {phase['start_epoch']})"


def _mixture_report(
    loader_state: Mapping[str, Any], module: Mapping[str, Any] | None
) -> dict[str, Any]:
    sampler_state = loader_state["sampler"]
    fingerprint = sampler_state["fingerprint"]
    names = list(fingerprint["sources"])
    epoch, consumed = int(loader_state["epoch"]), int(loader_state["consumed"])
    schedule = list(sampler_state["schedule"])
    configured = list(module["config"].get("phases", [])) if module is not None else []
    matched = _match_phases(schedule, configured, names)
    index = bisect.bisect_right([(e["epoch"], e["position"]) for e in schedule], (epoch, consumed))
    index = max(index - 1, 0)

    def describe(i: int) -> dict[str, Any]:
        entry = schedule[i]
        probs = mixture_probabilities(entry["weights"], entry["temperature"]).tolist()
        phase = matched[i]
        return {
            "index": i,
            "label": _phase_label(i, phase),
            "start_step": phase.get("start_step") if phase is not None else None,
            "start_epoch": phase.get("start_epoch") if phase is not None else None,
            "epoch": int(entry["epoch"]),
            "position": int(entry["position"]),
            "temperature": float(entry["temperature"]),
            "weights": dict(zip(names, map(float, entry["weights"]), strict=True)),
            "shares": dict(zip(names, probs, strict=True)),
        }

    # The epoch's planned totals, from the real sampler with the saved schedule.
    epoch_totals: dict[str, int] | None = None
    drawn = sampler_state.get("source_counts")
    with quiet():
        try:
            sampler = build_loader(MixtureSampler.KIND, fingerprint, 1, 1).position_sampler
            assert isinstance(sampler, MixtureSampler)
            sampler.load_state_dict(sampler_state)
            epoch_totals = sampler.source_counts(sampler.epoch_length, epoch)
            if not isinstance(drawn, dict):
                drawn = sampler.source_counts(consumed, epoch)
        except (ValueError, TypeError, KeyError):
            pass
    return {
        "sources": dict(zip(names, map(int, fingerprint["sizes"]), strict=True)),
        "phase": describe(index),
        "next_phase": describe(index + 1) if index + 1 < len(schedule) else None,
        "phases": len(schedule),
        "drawn": {n: int(v) for n, v in drawn.items()} if isinstance(drawn, dict) else None,
        "epoch_totals": epoch_totals,
    }


def _epoch_length(fingerprint: Mapping[str, Any]) -> int:
    """Global samples in an epoch's order (before padding or dropping a ragged tail)."""
    return int(fingerprint.get("samples_per_epoch", fingerprint.get("dataset_length", 0)))


def _resume_report(
    found: DataState, world_size: int, batch_size: int, accumulate: int
) -> dict[str, Any]:
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
        if changed:
            report |= {
                "ok": False,
                "error": f"the loader resumes in {mode!r} mode, which needs the saved world "
                "size and batch size; only lightning_resumable_data.DistributedSampler and "
                "MixtureSampler states resume elastically.",
            }
        return report
    sampler_state = state["sampler"]
    kind = sampler_state["kind"]
    run: DryRun
    if found.module is not None:
        spec = _spec(found.module, state)
        module_state = dict(found.module, train_loader=state)
        run = resume_datamodule(spec, module_state, world_size, batch_size, accumulate)
    else:
        run = resume_loader(state, kind, sampler_state["fingerprint"], world_size, batch_size)
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
    if not isinstance(sampler, DistributedSampler):  # the kinds build_loader makes
        return report | {"ok": False, "error": f"unexpected sampler {type(sampler).__name__}"}
    consumed = int(state["consumed"])
    per_rank = sampler.samples_left(consumed)
    remaining = max(sampler.epoch_length - consumed, 0)

    def batches(samples: int) -> int:
        return samples // batch_size if loader.drop_last else -(-samples // batch_size)

    left = batches(per_rank)
    report |= {
        "epoch": int(state["epoch"]),
        "consumed": consumed,
        "remaining_samples": remaining,
        "samples_per_rank": per_rank,
        "batches_left": left,
        "epoch_batches": loader.batches_yielded + left,
        "batches_done": loader.batches_yielded,
        "batches_per_epoch": batches(len(sampler)),
        "last_batch": per_rank % batch_size,
        "padding": max(per_rank * world_size - remaining, 0),
        "dropped": max(remaining - per_rank * world_size, 0),
    }
    return report


def inspect(
    path: Path, world_size: int | None = None, batch_size: int | None = None
) -> dict[str, Any]:
    """Everything ``lrd inspect`` shows, as a JSON-serialisable dict.

    Raises:
        CliError: The file is not a checkpoint, or holds no state of this package.
    """
    checkpoint = load_checkpoint(path)
    found = find_data_state(checkpoint, str(path))
    try:
        return _report(path, checkpoint, found, world_size, batch_size)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise CliError(
            f"the data state at {found.where} in {path} is malformed "
            f"({type(error).__name__}: {error})",
            hint="the checkpoint is truncated, edited, or was written by an incompatible "
            "version of lightning-resumable-data.",
        ) from None


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
        "warnings": [],
    }
    sampler_state = state.get("sampler") if mode == "position" else None
    mixture = None
    accumulate = 1
    if isinstance(sampler_state, dict):
        consumed = int(state["consumed"])
        fingerprint = dict(sampler_state.get("fingerprint", {}))
        report |= {
            "consumed": consumed,
            "epoch_length": _epoch_length(fingerprint),
            "sampler": {"kind": sampler_state.get("kind"), "fingerprint": fingerprint},
        }
        if sampler_state.get("kind") == MixtureSampler.KIND:
            mixture = _mixture_report(state, found.module)
            if found.module is not None:
                schedule = sampler_state["schedule"]
                names = list(fingerprint["sources"])
                matched = _match_phases(schedule, found.module["config"].get("phases", []), names)
                batches = fingerprint["samples_per_epoch"] // saved_world // saved_batch
                accumulate = _accumulate(
                    schedule, matched, max(batches, 1), saved_world * saved_batch
                )
    else:
        report["sampler"] = {"kind": None, "fingerprint": {}}
    report["mixture"] = mixture
    report["accumulate_grad_batches"] = accumulate
    fit_loop = _fit_loop_loader(checkpoint)
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
    report["resume"] = _resume_report(
        found,
        saved_world if world_size is None else world_size,
        saved_batch if batch_size is None else batch_size,
        accumulate,
    )
    return report


def _fit_loop_loader(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        combined = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    except (KeyError, TypeError):
        return None
    states = [s for s in combined if _is_loader_state(s)] if isinstance(combined, list) else []
    return states[0] if states else None


# -- human-readable output -------------------------------------------------------------------


def _fingerprint_text(fingerprint: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in fingerprint.items() if k not in ("sources", "sizes", "initial")}
    return ", ".join(f"{k} {v}" for k, v in shown.items())


def format_inspect(report: Mapping[str, Any]) -> str:
    """The report of :func:`inspect` as text."""
    lines = [f"checkpoint   {report['checkpoint']}"]
    lines.append(f"data state   {report['found_at']} (loader resume mode: {report['mode']})")
    epoch, trained = report["epoch"], report["batches_trained"]
    step = report["global_step"]
    step_text = f"; global step {step}" if step is not None else ""
    batches = _plural(trained, "batch", "batches")
    if "consumed" in report:
        consumed, length = report["consumed"], report["epoch_length"]
        share = f" ({percent(consumed / length)})" if length else ""
        lines.append(
            f"position     epoch {epoch}: {count(consumed)} of {count(length)} samples consumed"
            f"{share}, {batches} trained{step_text}"
        )
    else:
        lines.append(f"position     epoch {epoch}: {batches} trained{step_text}")
    world, batch = report["world_size"], report["batch_size"]
    lines.append(
        f"saved with   world size {world} x batch size {batch} = {count(world * batch)} samples "
        "per step"
    )
    sampler = report["sampler"]
    if sampler["kind"]:
        lines += _para("sampler", f"{sampler['kind']}: {_fingerprint_text(sampler['fingerprint'])}")
    mixture = report["mixture"]
    if mixture is not None:
        sizes = ", ".join(f"{n} {count(s)}" for n, s in mixture["sources"].items())
        lines.append(f"sources      {sizes}")
        lines.extend(["", *_format_mixture(mixture, report["epoch"])])
    lines.extend(["", *_format_resume(report)])
    for warning in report["warnings"]:
        lines += _para("warning", warning)
    return "\n".join(lines)


def _format_mixture(mixture: Mapping[str, Any], epoch: int) -> list[str]:
    phase = mixture["phase"]
    lines = [
        f"mixture      {phase['label']} in force since sample {count(phase['position'])} of epoch "
        f"{phase['epoch']}, temperature {phase['temperature']:g}"
    ]
    drawn, totals = mixture["drawn"] or {}, mixture["epoch_totals"] or {}
    header = ["source", "weight", "share", f"drawn in epoch {epoch}", "epoch plan"]
    rows = [
        [
            name,
            f"{phase['weights'][name]:g}",
            percent(phase["shares"][name]),
            count(drawn[name]) if name in drawn else "?",
            count(totals[name]) if name in totals else "?",
        ]
        for name in mixture["sources"]
    ]
    lines.extend("  " + row for row in table(header, rows, right=(1, 2, 3, 4)))
    following = mixture["next_phase"]
    if following is not None:
        shares = ", ".join(f"{n} {percent(p)}" for n, p in following["shares"].items())
        lines += _para(
            "next",
            f"{following['label']} from sample {count(following['position'])} of epoch "
            f"{following['epoch']}: {shares}",
        )
    else:
        lines.append(f"next         no further phase ({mixture['phases']} in the schedule)")
    return lines


def _para(label: str, text: str) -> list[str]:
    """``text`` wrapped to 100 columns, after a 13-column ``label``."""
    return textwrap.wrap(
        text, width=100, initial_indent=label.ljust(13), subsequent_indent=" " * 13
    )


def _plural(n: int, word: str, words: str = "") -> str:
    return f"{count(n)} {word if n == 1 else words or word + 's'}"


def _format_resume(report: Mapping[str, Any]) -> list[str]:
    resume = report["resume"]
    world, batch = resume["world_size"], resume["batch_size"]
    layout = f"world size {world} x batch size {batch}"
    if resume["mode"] == "exact":
        layout += " (the saved layout)"
    if not resume["ok"]:
        lines = _para("resume", f"under {layout}: REFUSED.") + _para("", resume["error"])
        if resume.get("hint"):
            lines += _para("", f"HINT: {resume['hint']}")
        return lines
    if "remaining_samples" not in resume:  # not a position-mode state: exact only
        return _para(
            "resume",
            f"under {layout}: exact, after batch {report['batches_trained']} of epoch "
            f"{report['epoch']}.",
        )
    epoch, left = resume["epoch"], resume["remaining_samples"]
    per_rank, batches = resume["samples_per_rank"], resume["batches_left"]
    if resume["mode"] == "exact":
        text = (
            f"under {layout}: exact. The run continues at sample {count(resume['consumed'])} "
            f"of epoch {epoch} with the very batches the interrupted run would have read."
        )
    else:
        text = (
            f"under {layout}: elastic ({', '.join(resume['changes'])}). The remaining "
            f"{_plural(left, 'sample')} of epoch {epoch} are spread over "
            f"{_plural(world, 'rank')} in the same global order, each read once; the batches "
            "differ from those of the saved layout."
        )
    short = resume["last_batch"]
    detail = (
        f"Per rank: {_plural(per_rank, 'sample')} = "
        f"{_plural(batches, 'batch', 'batches')} of {batch}"
        + (f" (the last of {short})" if short and batches else "")
        + f"; epoch {epoch} counts {count(resume['epoch_batches'])} batches in this layout "
        f"({count(resume['batches_done'])} done), later epochs "
        f"{count(resume['batches_per_epoch'])}."
    )
    if resume["padding"]:
        detail += (
            f" {_plural(resume['padding'], 'padding sample')} "
            f"{'repeats an earlier one' if resume['padding'] == 1 else 'repeat earlier ones'} "
            "to even out the ranks (drop_last=False)."
        )
    if resume["dropped"]:
        detail += (
            f" The last {_plural(resume['dropped'], 'sample')} of the epoch's order are left "
            "out to even out the ranks."
        )
    lines = _para("resume", text) + _para("", detail)
    for warning in resume.get("warnings", []):
        lines += _para("", f"note: {warning}")
    return lines
