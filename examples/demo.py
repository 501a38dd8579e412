"""Train, kill -9, resume, verify: the promise of lightning-resumable-data in one minute.

A "training" process reads batches through :class:`StatefulDataLoader` on every
data-parallel rank (ranks simulated in lockstep in one process) and writes a checkpoint of
the loader state after every step, the way a training loop would. The demo:

1. computes what an uninterrupted run reads;
2. starts the training process and kills it with SIGKILL in the middle of epoch 1;
3. resumes from the last checkpoint on the same world size and checks that the batches
   equal the uninterrupted run's, step for step;
4. kills it again and resumes on a different world size (2 -> 3 ranks), checking that every
   sample of the epoch is still read exactly once.

Run: ``make demo`` (or ``python examples/demo.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from lightning_resumable_data import DistributedSampler, StatefulDataLoader

N, BATCH, EPOCHS, SEED = 240, 3, 2, 1234  # 2 ranks consume 6 samples a step


class Tokens(torch.utils.data.Dataset[int]):
    """A stand-in dataset whose sample is its own id, so the log shows what was read."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> int:
        return int(index)


def make_loaders(world: int) -> list[StatefulDataLoader]:
    return [
        StatefulDataLoader(
            Tokens(), batch_size=BATCH, sampler=DistributedSampler(Tokens(), world, rank, seed=SEED)
        )
        for rank in range(world)
    ]


def train(world: int, checkpoint: Path, log: Path, step_delay: float) -> None:
    """Read every epoch in lockstep on ``world`` ranks; checkpoint after every step."""
    loaders = make_loaders(world)
    if checkpoint.exists():
        state = json.loads(checkpoint.read_text())
        for loader in loaders:  # every rank restores rank 0's state
            loader.load_state_dict(state)
    with log.open("a") as out:
        while loaders[0].epoch < EPOCHS:
            epoch = loaders[0].epoch
            for step_batches in zip(*loaders, strict=False):
                ids = [i for batch in step_batches for i in batch.tolist()]
                out.write(json.dumps({"epoch": epoch, "ids": ids}) + "\n")
                out.flush()
                tmp = checkpoint.with_suffix(".tmp")
                tmp.write_text(json.dumps(loaders[0].state_dict()))
                os.replace(tmp, checkpoint)  # atomic: a kill never leaves half a file
                time.sleep(step_delay)


def read_log(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def run_and_kill(world: int, workdir: Path, kill_after_steps: int | None) -> None:
    """Start a training process; SIGKILL it once the log has ``kill_after_steps`` lines."""
    log = workdir / "log.jsonl"
    command = [sys.executable, __file__, "--train", "--world", str(world), "--dir", str(workdir)]
    if kill_after_steps is not None:
        command += ["--step-delay", "0.02"]
    process = subprocess.Popen(command)
    shown = -1
    while process.poll() is None:
        steps = len(log.read_text().splitlines()) if log.exists() else 0
        if steps != shown:
            progress(steps, kill_after_steps or 2 * EPOCHS * N // (2 * BATCH))
            shown = steps
        if kill_after_steps is not None and steps >= kill_after_steps:
            process.send_signal(signal.SIGKILL)
            process.wait()
            print(f"\r   killed with SIGKILL after {steps} logged steps{' ' * 20}")
            return
        time.sleep(0.01)
    print(f"\r   finished after {len(read_log(log))} logged steps{' ' * 20}")
    if process.returncode != 0:
        raise SystemExit(f"training process failed with exit code {process.returncode}")


def progress(done: int, total: int) -> None:
    """A one-line progress bar, redrawn in place on a terminal."""
    if not sys.stdout.isatty():
        return
    width = 30
    filled = width * min(done, total) // max(total, 1)
    print(f"\r  [{'#' * filled}{'.' * (width - filled)}] step {done}", end="", flush=True)


def settle(workdir: Path) -> list[dict[str, Any]]:
    """Keep the log lines that the checkpoint covers (a step logged after it is redone)."""
    state = json.loads((workdir / "checkpoint.json").read_text())
    lines = read_log(workdir / "log.jsonl")
    covered = [line for line in lines if line["epoch"] < state["epoch"]]
    in_epoch = [line for line in lines if line["epoch"] == state["epoch"]]
    covered += in_epoch[: state["batches_yielded"]]
    (workdir / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in covered))
    return covered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--step-delay", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        train(args.world, args.dir / "checkpoint.json", args.dir / "log.jsonl", args.step_delay)
        return

    print("1. uninterrupted reference run (2 ranks)")
    with tempfile.TemporaryDirectory() as tmp:
        reference_dir = Path(tmp)
        run_and_kill(2, reference_dir, None)
        reference = read_log(reference_dir / "log.jsonl")
    steps_per_epoch = len(reference) // EPOCHS

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print("2. interrupted run: SIGKILL in the middle of epoch 1")
        run_and_kill(2, workdir, kill_after_steps=steps_per_epoch + steps_per_epoch // 3)
        before = settle(workdir)
        print(f"   resume from the checkpoint at step {len(before)}, same world size")
        run_and_kill(2, workdir, None)
        resumed = read_log(workdir / "log.jsonl")
    identical = resumed == reference
    print(
        f"   {len(resumed)} steps compared with the uninterrupted run: "
        f"{'IDENTICAL' if identical else 'DIFFERENT'}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        print("3. elastic resume: SIGKILL on 2 ranks, resume on 3 ranks")
        run_and_kill(2, workdir, kill_after_steps=steps_per_epoch // 2)
        before = settle(workdir)
        run_and_kill(3, workdir, None)
        lines = read_log(workdir / "log.jsonl")
    epoch0 = [i for line in lines if line["epoch"] == 0 for i in line["ids"]]
    exactly_once = sorted(epoch0) == list(range(N))
    print(
        f"   epoch 0: {len(epoch0)} samples read on 2 then 3 ranks, each of the {N} "
        f"samples exactly once: {'YES' if exactly_once else 'NO'}"
    )

    verdict = identical and exactly_once
    print(f"\nVerdict: {'PASS' if verdict else 'FAIL'} — nothing replayed, nothing skipped.")
    raise SystemExit(0 if verdict else 1)


if __name__ == "__main__":
    main()
