"""Running the training script, picking the checkpoint to resume from, reading the ledger.

Two ways to run ``train.py``: :class:`ForkServer` (one long-lived process that imported
torch and Lightning once and forks a fresh session per run: ~0.5 s a run instead of ~8 s)
and :func:`run_fresh` (a new interpreter with Lightning's standard ``ddp`` launcher, as a
user would start it). Both put the run in a session of its own, so a fault can SIGKILL
its whole process group, and both kill that group on a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SCRIPT = Path(__file__).with_name("train.py")
RUN_TIMEOUT = 120.0  # seconds; a run that takes longer is a hang


def run_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


@dataclass(frozen=True)
class RunResult:
    """How a run ended: ``rc`` is the exit code, or ``-signal`` (``-9``: SIGKILLed)."""

    rc: int
    wall: float
    timed_out: bool
    log: Path

    def tail(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "<no log>"
        return text[-chars:]


class ForkServer:
    """A ``<script> --serve`` process: each :meth:`run` forks a fresh run from it."""

    def __init__(self, script: Path = SCRIPT) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=run_env(),
            text=True,
        )

    def run(self, argv: Sequence[str], log: Path, timeout: float = RUN_TIMEOUT) -> RunResult:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        request = {"argv": list(argv), "log": str(log), "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        # The server enforces ``timeout`` itself; this one only guards against the server
        # dying or hanging (its first answer also waits for its imports).
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 120)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise RuntimeError(f"the fork server did not answer; last run's log:\n{log}")
        answer: dict[str, Any] = json.loads(line)
        return RunResult(int(answer["rc"]), float(answer["wall"]), bool(answer["timed_out"]), log)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_fresh(argv: Sequence[str], log: Path, timeout: float = RUN_TIMEOUT) -> RunResult:
    """Run ``train.py`` in a new interpreter (and a new session), as a user would."""
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=run_env(),
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # a hang, or leftover loader workers
            proc.wait()
    return RunResult(proc.returncode, time.monotonic() - started, timed_out, log)


# -- checkpoints ----------------------------------------------------------------------------


def checkpoint_step(path: Path) -> int:
    """The step in a ``step=<k>.ckpt`` file name."""
    return int(path.stem.split("=")[1].split("-")[0])


@dataclass(frozen=True)
class Resume:
    """The newest checkpoint Lightning completed, the unreadable and avoided newer ones."""

    path: Path | None
    step: int
    skipped: tuple[Path, ...]
    avoided: tuple[Path, ...] = ()


def newest_complete_checkpoint(
    directory: Path, avoid: Callable[[int], bool] = lambda step: False
) -> Resume:
    """Pick the newest checkpoint that loads; delete the newer ones that do not.

    A run killed while writing leaves a truncated file: it is skipped (and deleted, so that
    the resumed run writes that step again under the same name). Complete checkpoints of
    the steps ``avoid`` names are deleted too (see ``campaign.avoid_known_bugs``).
    """
    skipped: list[Path] = []
    avoided: list[Path] = []
    paths = sorted(directory.glob("step=*.ckpt"), key=checkpoint_step, reverse=True)
    for path in paths:
        if avoid(checkpoint_step(path)):
            avoided.append(path)
            path.unlink()
            continue
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
            step = int(checkpoint["global_step"])
        except Exception:  # truncated or empty: whatever torch raises for it
            skipped.append(path)
            path.unlink()
            continue
        if step != checkpoint_step(path):
            raise AssertionError(f"{path} holds global_step={step}")
        return Resume(path, step, tuple(skipped), tuple(avoided))
    return Resume(None, 0, tuple(skipped), tuple(avoided))


# -- the ledger -----------------------------------------------------------------------------

Line = dict[str, Any]


def read_ledger(out: Path) -> dict[int, list[Line]]:
    """Every rank's ledger lines (a torn last line, from a kill mid-write, is dropped)."""
    ledger: dict[int, list[Line]] = {}
    for path in sorted(out.glob("ids_rank*.jsonl")):
        rank = int(path.stem.removeprefix("ids_rank"))
        lines = []
        for text in path.read_text().splitlines(keepends=True):
            if text.endswith("\n"):
                lines.append(json.loads(text))
        ledger[rank] = lines
    return ledger


def truncate_ledger(out: Path, step: int) -> int:
    """Forget the steps from ``step`` on (started, never checkpointed); return lines dropped."""
    dropped = 0
    for rank, lines in read_ledger(out).items():
        kept = [line for line in lines if line["step"] < step]
        path = out / f"ids_rank{rank}.jsonl"
        dropped += len(path.read_text().splitlines()) - len(kept)
        path.write_text("".join(json.dumps(line) + "\n" for line in kept))
    return dropped


@dataclass
class Steps:
    """Sample ids per global step (all ranks, in rank order), and steps seen twice."""

    ids: dict[int, list[int]]
    epochs: dict[int, int]
    duplicates: list[str]


def steps(out: Path) -> Steps:
    per_rank = read_ledger(out)
    duplicates = []
    by_rank: list[dict[int, Line]] = []
    for rank, lines in sorted(per_rank.items()):
        seen: dict[int, Line] = {}
        for line in lines:
            if line["step"] in seen:
                duplicates.append(f"rank {rank} trained step {line['step']} twice")
            seen[line["step"]] = line
        by_rank.append(seen)
    every = sorted({s for rank in by_rank for s in rank})
    ids = {s: [i for rank in by_rank if s in rank for i in rank[s]["ids"]] for s in every}
    epochs = {s: next(rank[s]["epoch"] for rank in by_rank if s in rank) for s in every}
    return Steps(ids, epochs, duplicates)


def compare(reference: Steps, resumed: Steps) -> tuple[int, list[str]]:
    """Samples compared and the mismatches: step by step, ids in order, every rank."""
    mismatches = list(resumed.duplicates)
    for step in sorted(set(reference.ids) | set(resumed.ids)):
        want, got = reference.ids.get(step), resumed.ids.get(step)
        if want != got:
            mismatches.append(f"step {step}: uninterrupted {want}, resumed {got}")
    return sum(len(ids) for ids in resumed.ids.values()), mismatches


def epochs(ledger: Steps, epoch_samples: int) -> list[Counter[int]]:
    """The samples of each complete epoch, from the trained stream in step order.

    Independent of the epoch numbers Lightning reports (they can be off after a resume) and
    of the step size (it changes with the world size): epoch ``e`` is the ``e``-th run of
    ``epoch_samples`` samples, when no layout pads or drops samples.
    """
    stream = [i for step in sorted(ledger.ids) for i in ledger.ids[step]]
    return [
        Counter(stream[start : start + epoch_samples])
        for start in range(0, len(stream) - epoch_samples + 1, epoch_samples)
    ]


def exactly_once(
    resumed: Steps, expected: Sequence[Counter[int]], epoch_samples: int
) -> tuple[int, int, list[str]]:
    """Check each complete epoch against ``expected``; return (epochs, samples, errors)."""
    errors = list(resumed.duplicates)
    got = epochs(resumed, epoch_samples)
    for epoch, (have, want) in enumerate(zip(got, expected, strict=False)):
        if have != want:
            missing, extra = want - have, have - want
            errors.append(f"epoch {epoch}: missing {dict(missing)}, extra {dict(extra)}")
    checked = min(len(got), len(expected))
    return checked, checked * epoch_samples, errors
