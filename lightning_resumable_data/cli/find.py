"""``lrd find``: every step that trained a sample, and the planned steps that will.

The checkpoint is read as ``lrd trace`` reads it (:func:`~lightning_resumable_data.cli.
trace.load`); :func:`~lightning_resumable_data.lightning.find.find_sample` inverts the
epochs' orders at the sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_resumable_data.cli._errors import CliError
from lightning_resumable_data.cli.trace import load
from lightning_resumable_data.lightning.find import find_sample
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["find", "format_find", "parse_epochs"]


def parse_epochs(text: str) -> tuple[int, int | None]:
    """``--epochs A:B`` as ``(A, B)``: epochs ``A`` to ``B - 1``, like a slice (``A:``, ``:B``).

    Example:
        >>> parse_epochs("1:3"), parse_epochs("2:"), parse_epochs(":1")
        ((1, 3), (2, None), (0, 1))
    """
    try:
        first, stop = text.split(":")
        epochs = (int(first or 0), int(stop) if stop else None)
    except ValueError:
        raise CliError(
            f"--epochs {text!r} is not an epoch range", hint="write A:B (epochs A to B-1), "
            "A: or :B, e.g. --epochs 0:3"
        ) from None  # fmt: skip
    if epochs[0] < 0 or (epochs[1] is not None and epochs[1] <= epochs[0]):
        raise CliError(f"--epochs {text!r} is empty or negative", hint="A:B needs 0 <= A < B")
    return epochs


def find(
    path: Path,
    sample: int,
    *,
    source: str | None = None,
    epochs: tuple[int, int | None] | None = None,
    unsafe_unpickle: bool = False,
    shards: Path | None = None,
) -> dict[str, Any]:
    """What ``lrd find`` shows: every (epoch, step, rank) that trained ``sample`` or will.

    Steps after the checkpoint are planned: the rest of its epoch, or up to the end of
    ``epochs``. A mixture's sample is named by ``source`` and its index there.

    Raises:
        CliError: What :func:`~lightning_resumable_data.cli.trace.load` refuses, a mixture
            without ``source`` (or a source for a single dataset), a sample out of range.
    """
    run = load(path, unsafe_unpickle, shards)
    history, kind = run.history, run.kind
    if source is None and isinstance(run.sampler, MixtureSampler):
        names = ", ".join(run.sampler.mixture.names)
        raise CliError(
            f"{path} was trained over a mixture (sources {names}): a sample is named by its "
            "source and its index there",
            hint=f"pass --source NAME (one of {names}) with --sample I, the index within it.",
        )
    try:
        found = find_sample(
            run.sampler, history, sample, source=source, epochs=epochs,
            position=run.position, drop_last=run.drop_last,
        )  # fmt: skip
    except ValueError as error:
        raise CliError(f"{path}: {error}", hint="lrd trace names a step's samples.") from None
    finished = history.finished_steps
    return {
        "checkpoint": str(path),
        "sample": sample,
        "source": source,
        "sampler": kind,
        "epochs": None if epochs is None else list(epochs),
        "steps_recorded": None if finished is None else list(finished),
        "trained": [vars(occurrence) for occurrence in found],
    }


def format_find(report: dict[str, Any]) -> str:
    """The text ``lrd find`` prints.

    Example:
        >>> print(format_find({"checkpoint": "c.ckpt", "sample": 5, "sampler": "S",
        ...     "steps_recorded": [0, 9], "trained": [
        ...         {"epoch": 0, "step": 1, "rank": 1, "position": 5, "planned": False},
        ...         {"epoch": 1, "step": 12, "rank": 0, "position": 4, "planned": True}]}))
        sample 5 of c.ckpt (S): trained 1 time in steps 0 to 9, planned 1 time after
          epoch 0, step 1, rank 1 (global position 5)
          epoch 1, step 12, rank 0 (global position 4), planned
    """
    trained, steps = report["trained"], report["steps_recorded"]
    done = [hit for hit in trained if not hit.get("planned")]
    times = "1 time" if len(done) == 1 else f"{len(done)} times"
    where = f"steps {steps[0]} to {steps[1]}" if steps else "no recorded step"
    name = report["sample"] if report.get("source") is None else (
        f"{report['source']}:{report['sample']}"
    )  # fmt: skip
    line = (
        f"sample {name} of {report['checkpoint']} ({report['sampler']}): trained {times} in {where}"
    )
    if len(done) < len(trained):
        later = len(trained) - len(done)
        line += f", planned {later} time{'s' if later != 1 else ''} after"
    if report.get("epochs"):
        first, stop = report["epochs"]
        line += (  # without B: the recorded epochs, and planned ones to the checkpoint's end
            f" (epochs {first} on: the recorded ones, and the rest of the checkpoint's epoch)"
            if stop is None
            else f" (epochs {first} to {stop - 1})"
        )
    lines = [line]
    for hit in trained:
        lines.append(
            f"  epoch {hit['epoch']}, step {hit['step']}, rank {hit['rank']} "
            f"(global position {hit['position']}){', planned' if hit.get('planned') else ''}"
        )
    return "\n".join(lines)
