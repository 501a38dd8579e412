"""``lrd skip``: a copy of a checkpoint whose data state cuts the data of some steps.

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

from lightning_resumable_data.cli._dryrun import build_sampler
from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli._reading import find_data_state, load_checkpoint, loader_states
from lightning_resumable_data.lightning.history import DataHistory
from lightning_resumable_data.lightning.skipping import epoch_batches, step_ranges

__all__ = ["format_skip", "parse_steps", "skip"]


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


def skip(
    path: Path, steps: list[tuple[int, int]], out: Path, *, unsafe_unpickle: bool = False
) -> dict[str, Any]:
    """Write ``out``: ``path`` with the data of ``steps`` cut; return what was cut.

    Raises:
        CliError: No data state or history, a sampler that cannot skip (a mixture), or a
            step the checkpoint has trained already.
    """
    import torch

    if out.resolve() == path.resolve():
        raise CliError("-o must name a new file", hint="keep the original checkpoint")
    checkpoint = load_checkpoint(path, unsafe_unpickle=unsafe_unpickle)
    found = find_data_state(checkpoint, str(path))
    saved = found.loader.get("sampler")
    callback = found.callback
    if not isinstance(saved, dict) or callback is None or "data_history" not in callback:
        raise CliError(
            f"{path} holds no data history or no position sampler",
            hint="lrd skip edits checkpoints of a ResumableDataModule fit (its callback "
            "records the layout the steps are counted in).",
        )
    history = DataHistory.from_state(callback["data_history"])
    loader = found.loader
    world, batch_size = int(loader["num_replicas"]), int(loader["batch_size"])
    last = history.runs[-1] if history.runs else None
    accumulate = int(last[5]) if last else 1
    limit = (int(last[7]) or None) if last else None
    epoch, consumed = int(saved["epoch"]), int(saved["consumed"])
    try:
        sampler = build_sampler(str(saved["kind"]), saved["fingerprint"], world)
        sampler.load_state_dict(saved)
        config = (found.module or {}).get("config", {})

        def batches(e: int) -> int:
            return epoch_batches(
                sampler.epoch_size(e),
                world=world,
                batch_size=batch_size,
                drop_last=bool(config.get("drop_last", False)),
                sampler_drop_last=sampler.drop_last,
                limit=limit,
            )

        cut = []
        for requested in sorted(steps):
            if list(requested) in history.skipped_steps:
                continue
            where = {"step": int(checkpoint.get("global_step", 0)), "epoch": epoch}
            ranges = step_ranges(
                requested,
                **where,
                batch=consumed // (world * batch_size),
                accumulate=accumulate,
                batches=batches,
                step_samples=world * batch_size,
            )
            for cut_epoch, start, stop in ranges:
                stop = min(stop, sampler.epoch_size(cut_epoch))
                if start < stop:
                    sampler.skip_positions(cut_epoch, start, stop)
                    history.note_skips(cut_epoch, sampler.skips[cut_epoch])
                    cut.append({"epoch": cut_epoch, "start": start, "stop": stop})
            history.skipped_steps.append(list(requested))
    except (ValueError, KeyError, TypeError) as error:
        raise CliError(f"{path}: {error}", hint="lrd inspect shows what the file holds.") from None
    skips = sampler.state_at(epoch, consumed).get("skips", [])
    for state in loader_states(checkpoint):
        if isinstance(state.get("sampler"), dict):
            state["sampler"]["skips"] = [list(s) for s in skips]
    callback["data_history"] = history.state_dict(history.steps_done)
    torch.save(checkpoint, out)
    return {
        "checkpoint": str(path),
        "written": str(out),
        "step": int(checkpoint.get("global_step", 0)),
        "layout": {"world_size": world, "batch_size": batch_size, "accumulate": accumulate},
        "steps": [list(s) for s in sorted(steps)],
        "cut": cut,
    }


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
        + ", ".join(f"{a} to {b - 1}" for a, b in done["steps"])
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
