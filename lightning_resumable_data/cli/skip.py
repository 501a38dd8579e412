"""``lrd skip`` and ``lrd quarantine``: a copy of a checkpoint whose data state cuts data.

``lrd quarantine CKPT --samples I,J -o NEW`` leaves dataset samples out of every draw from
the checkpoint's position on (every other sample still once per epoch). ``lrd skip``:

The steps are counted as the run that wrote the checkpoint counts them (its world size,
batch size and ``accumulate_grad_batches``, from its data history), from the step the
checkpoint was written at: a fit resumed from the copy trains, at step ``A``, what step
``B`` would have trained, and never reads the data of the steps in between. The cut is
added to the sampler state of every loader state in the file (the data module's and
Lightning's fit loop's), and to the data history, so ``lrd trace``, ``lrd inspect`` and
every later resume, on any layout, keep it
(:meth:`~lightning_resumable_data.DistributedSampler.skip_positions`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._dryrun import build_sampler, sharded_sampler
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import find_data_state, load_checkpoint, loader_states
from lightning_resumable_data.lightning._step_ranges import (
    Start,
    check_new_cuts,
    cut_steps,
    epoch_batches,
)
from lightning_resumable_data.lightning.history import DataHistory

__all__ = [
    "format_quarantine",
    "format_skip",
    "parse_samples",
    "parse_steps",
    "quarantine",
    "skip",
]


def parse_steps(text: str) -> tuple[int, int]:
    """``"A:B"`` as the step range ``(A, B)`` (``B`` excluded).

    Example:
        >>> parse_steps("41300:41340")
        (41300, 41340)
    """
    try:
        first, stop = (int(part) for part in text.split(":"))
    except ValueError:
        raise CliError(
            f"--steps {text!r} is not a step range", hint="write A:B, e.g. --steps 41300:41340"
        ) from None
    if not 0 <= first < stop:
        raise CliError(f"--steps {text!r} is empty or negative", hint="A:B needs 0 <= A < B")
    return first, stop


class _Edit:
    """A checkpoint opened for ``lrd skip`` / ``lrd quarantine``: its sampler and record."""

    def __init__(
        self, path: Path, out: Path, unsafe_unpickle: bool, command: str, shards: Path | None
    ) -> None:
        if out.resolve() == path.resolve():
            raise CliError("-o must name a new file", hint="keep the original checkpoint")
        if not out.parent.is_dir():
            raise CliError(
                f"-o {out}: the folder {out.parent} does not exist", hint="create it first"
            )
        self.path, self.out = path, out
        self.checkpoint = load_checkpoint(path, unsafe_unpickle=unsafe_unpickle)
        found = find_data_state(self.checkpoint, str(path))
        saved, callback = found.loader.get("sampler"), found.callback
        if not isinstance(saved, dict) or callback is None or "data_history" not in callback:
            raise CliError(
                f"{path} holds no data history or no position sampler",
                hint=f"lrd {command} edits checkpoints of a ResumableDataModule fit (its "
                "callback records the layout steps are counted in).",
            )
        self.callback, self.saved, self.loader = callback, saved, found.loader
        self.config = (found.module or {}).get("config", {})
        self.history = DataHistory.from_state(callback["data_history"])
        self.world, self.batch_size = (
            int(found.loader["num_replicas"]),
            int(found.loader["batch_size"]),
        )
        self.epoch, self.consumed = int(saved["epoch"]), int(saved["consumed"])
        self.step = int(self.checkpoint.get("global_step", 0))
        if saved["kind"] == "ShardedSampler":
            if shards is None:
                raise CliError(
                    f"{path} was trained over a DistributedShardedDataset: its order needs "
                    "the shards' sizes",
                    hint="pass --shards DIR for token shards (their index.json).",
                )
            self.sampler = sharded_sampler(saved["fingerprint"], self.world, shards)[0]
        else:
            self.sampler = build_sampler(str(saved["kind"]), saved["fingerprint"], self.world)
        self.sampler.load_state_dict(saved)

    def write(self) -> None:
        """Save the sampler's cuts into every loader state, and the record; write ``out``."""
        import torch

        state = self.sampler.state_at(self.epoch, self.consumed)
        for loader in loader_states(self.checkpoint):
            if isinstance(loader.get("sampler"), dict):
                for key in ("skips", "quarantine"):
                    if key in state:
                        loader["sampler"][key] = state[key]
        self.callback["data_history"] = self.history.state_dict(self.history.steps_done)
        torch.save(self.checkpoint, self.out)


def _edit(path: Path, out: Path, unsafe_unpickle: bool, command: str, shards: Path | None) -> _Edit:
    try:
        return _Edit(path, out, unsafe_unpickle, command, shards)
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None


def parse_samples(text: str) -> list[int]:
    """``"7,36"`` as dataset indices.

    Example:
        >>> parse_samples("7, 36,7")
        [7, 36]
    """
    try:
        samples = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise CliError(
            f"--samples {text!r} is not a list of indices", hint="write I,J,..., e.g. 7,36"
        ) from None
    if not samples or samples[0] < 0:
        raise CliError(f"--samples {text!r} names no index >= 0", hint="e.g. --samples 7,36")
    return samples


def skip(
    path: Path,
    steps: list[tuple[int, int]],
    out: Path,
    *,
    unsafe_unpickle: bool = False,
    shards: Path | None = None,
) -> dict[str, Any]:
    """Write ``out``: ``path`` with the data of ``steps`` cut; return what was cut.

    Raises:
        CliError: No data state or history, a sampler that cannot skip (a mixture), or a
            step the checkpoint has trained already.
    """
    edit = _edit(path, out, unsafe_unpickle, "skip", shards)
    history, sampler = edit.history, edit.sampler
    last = history.runs[-1] if history.runs else None
    accumulate = int(last[5]) if last else 1
    limit = (int(last[7]) or None) if last else None
    step_samples = edit.world * edit.batch_size

    def batches(e: int, at: int) -> int:
        return epoch_batches(
            sampler.epoch_size(e),
            world=edit.world,
            batch_size=edit.batch_size,
            drop_last=bool(edit.config.get("drop_last", False)),
            sampler_drop_last=sampler.drop_last,
            limit=limit,
            consumed=at,
        )

    todo = [requested for requested in steps if list(requested) not in history.skipped_steps]
    start = Start(edit.step, edit.epoch, edit.consumed, step_samples)
    try:
        check_new_cuts(todo, history.skipped_steps)
        cuts = cut_steps(sampler, todo, start, accumulate, batches)
    except ValueError as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    for cut_epoch in sorted(sampler.skips):
        history.note_skips(cut_epoch, sampler.skips[cut_epoch])
    history.skipped_steps.extend(list(requested) for requested in todo)
    cut = [{"epoch": e, "start": lo, "stop": hi} for e, lo, hi in cuts]
    edit.write()
    return {
        "checkpoint": str(path),
        "written": str(out),
        "step": edit.step,
        "layout": {
            "world_size": edit.world,
            "batch_size": edit.batch_size,
            "accumulate": accumulate,
        },
        "steps": [list(s) for s in sorted(steps)],
        "cut": cut,
    }


def quarantine(
    path: Path,
    samples: list[int],
    out: Path,
    *,
    unsafe_unpickle: bool = False,
    shards: Path | None = None,
) -> dict[str, Any]:
    """Write ``out``: ``path`` with dataset ``samples`` left out of every later draw.

    Raises:
        CliError: No data state or history, a sampler that cannot (a mixture), or a
            sample outside the dataset.
    """
    edit = _edit(path, out, unsafe_unpickle, "quarantine", shards)
    new = sorted(set(samples) - edit.history.quarantined)
    if new:
        try:
            edit.sampler.quarantine(new)
        except ValueError as error:
            raise CliError(f"{path}: {error}", hint="give dataset indices") from None
        edit.history.quarantine.append(edit.sampler.quarantined[-1])
    edit.write()
    return {
        "checkpoint": str(path),
        "written": str(out),
        "step": edit.step,
        "epoch": edit.epoch,
        "quarantined": new,
        "already": sorted(set(samples) & edit.history.quarantined - set(new)),
    }


def _steps(first: int, stop: int) -> str:
    return f"{first}" if stop == first + 1 else f"{first} to {stop - 1}"


def format_quarantine(done: dict[str, Any]) -> str:
    """``lrd quarantine``'s report as text.

    Example:
        >>> print(format_quarantine({"checkpoint": "a.ckpt", "written": "b.ckpt", "step": 40,
        ...     "epoch": 1, "quarantined": [7, 36], "already": []}))
        wrote b.ckpt: a.ckpt (step 40, epoch 1) with samples 7, 36 left out of every later draw
        resume from it: trainer.fit(model, datamodule=dm, ckpt_path="b.ckpt")
    """
    shown = ", ".join(map(str, done["quarantined"])) or "none new"
    lines = [
        f"wrote {done['written']}: {done['checkpoint']} (step {done['step']}, epoch "
        f"{done['epoch']}) with samples {shown} left out of every later draw"
    ]
    if done["already"]:
        lines.append(f"  already quarantined: {', '.join(map(str, done['already']))}")
    lines.append(
        f'resume from it: trainer.fit(model, datamodule=dm, ckpt_path="{done["written"]}")'
    )
    return "\n".join(lines)


def format_skip(done: dict[str, Any]) -> str:
    """``lrd skip``'s report as text.

    Example:
        >>> print(format_skip({"checkpoint": "a.ckpt", "written": "b.ckpt", "step": 40,
        ...     "layout": {"world_size": 2, "batch_size": 4, "accumulate": 1},
        ...     "steps": [[41, 43]], "cut": [{"epoch": 0, "start": 8, "stop": 24}]}))
        wrote b.ckpt: a.ckpt (step 40; 2 ranks x batch 4, accumulating 1) with the data of
          steps 41 to 42 cut: epoch 0, positions 8 to 23 (16 samples)
        resume from it: trainer.fit(model, datamodule=dm, ckpt_path="b.ckpt")
    """
    layout = done["layout"]
    lines = [
        f"wrote {done['written']}: {done['checkpoint']} (step {done['step']}; "
        f"{layout['world_size']} rank{'s' if layout['world_size'] != 1 else ''} x batch "
        f"{layout['batch_size']}, accumulating "
        f"{layout['accumulate']}) with the data of",
        "  steps "
        + ", ".join(_steps(a, b) for a, b in done["steps"])
        + " cut: "
        + "; ".join(
            f"epoch {c['epoch']}, positions {c['start']} to {c['stop'] - 1} "
            f"({c['stop'] - c['start']} samples)"
            for c in done["cut"]
        ),
    ]
    if not done["cut"]:
        lines[-1] = "  nothing new to cut: those steps are cut in it already"
    lines.append(
        f'resume from it: trainer.fit(model, datamodule=dm, ckpt_path="{done["written"]}")'
    )
    return "\n".join(lines)
