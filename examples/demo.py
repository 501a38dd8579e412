"""Train, kill -9, resume, verify: the promise of lightning-resumable-data in about a minute.

1. Writes small token shards for three sources (web, code, math).
2. Trains a tiny language model with dropout with ``Trainer`` + ``ResumableDataModule`` and
   a two-phase mixture (``ResumableDataCallback``) under two-process DDP on CPU,
   uninterrupted.
3. Trains it again, kills the whole job with SIGKILL in the middle of the epoch (after the
   checkpoint of step 9, just before the phase change at step 10), and resumes it with
   ``trainer.fit(..., ckpt_path=...)``.
4. Compares the two runs batch by batch and their final parameters (``torch.equal``), on
   every rank, and prints the verdict. The callback reseeds the global RNGs at every batch
   from (seed, step, rank), so dropout draws the same masks after the resume.

Run: ``make demo`` (or ``python examples/demo.py``). The shards, logs and checkpoints stay in
``runs/demo/``; the last line is the ``lrd inspect`` command for the resumed-from checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import inspect_hint, run_folder

SOURCES = {"web": 640, "code": 320, "math": 160}  # token sequences per source
SEQ_LEN, VOCAB, BATCH, STEPS, KILL_AFTER = 16, 64, 8, 24, 9
WEIGHTS = {"web": 0.6, "code": 0.3, "math": 0.1}
PHASE_STEP, PHASE = 10, {"web": 0.2, "code": 0.3, "math": 0.5}  # then anneal towards math


def write_shards(root: Path) -> None:
    """Synthetic token streams, each source with its own token range, 2+ shards each."""
    from lightning_resumable_data import write_token_shards

    rng = np.random.default_rng(0)
    for number, (name, sequences) in enumerate(SOURCES.items()):
        low = number * VOCAB // 3
        tokens = rng.integers(low, low + VOCAB // 3, size=sequences * SEQ_LEN)
        write_token_shards(
            root / name, [tokens], seq_len=SEQ_LEN, tokens_per_shard=SEQ_LEN * sequences // 2
        )


class TokenSource(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """One mixture source: samples of its token shards, tagged with their mixture id."""

    def __init__(self, directory: Path, offset: int) -> None:
        from lightning_resumable_data import open_token_shards

        self.readers = open_token_shards(directory, preload=False)  # memmap, nothing loaded
        self.starts = np.cumsum([0] + [len(r) for r in self.readers])
        self.offset = offset

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        shard = int(np.searchsorted(self.starts, index, side="right")) - 1
        tokens = self.readers[shard].read(int(index) - int(self.starts[shard]))
        return {
            "tokens": torch.as_tensor(tokens.astype(np.int64)),
            "id": torch.tensor(self.offset + int(index)),
        }


def train(root: Path, out: Path, checkpoint: str | None, kill_after: int | None) -> None:
    """One training run (launched by this script as a subprocess)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lightning_resumable_data import MixturePhase, ResumableDataCallback, ResumableDataModule

    class TinyLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 32)
            self.dropout = torch.nn.Dropout(0.1)  # keyed: the same masks after the resume
            self.head = torch.nn.Linear(32, VOCAB)

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            with (out / f"rank{self.global_rank}.jsonl").open("a") as f:
                f.write(json.dumps({"step": self.global_step, "ids": batch["id"].tolist()}) + "\n")
            tokens = batch["tokens"]
            logits = self.head(self.dropout(self.embed(tokens[:, :-1])))
            loss: torch.Tensor = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1)
            )
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

        def on_fit_end(self) -> None:
            params = {name: p.detach().clone() for name, p in self.named_parameters()}
            torch.save(params, out / f"params_rank{self.global_rank}.pt")

    class KillAfter(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step == kill_after and trainer.global_rank == 0:
                os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole job, no cleanup

    offsets = np.cumsum([0, *SOURCES.values()]).tolist()
    sources = {name: TokenSource(root / name, offsets[i]) for i, name in enumerate(SOURCES)}
    datamodule = ResumableDataModule(
        sources, weights=WEIGHTS, batch_size=BATCH, seed=7, samples_per_epoch=sum(SOURCES.values())
    )
    callbacks: list[pl.Callback] = [
        ResumableDataCallback(phases=[MixturePhase(start_step=PHASE_STEP, weights=PHASE)]),
        ModelCheckpoint(
            dirpath=out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
    ]
    if kill_after is not None:
        callbacks.append(KillAfter())
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=STEPS,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
    )
    pl.seed_everything(0, verbose=False)  # the same initial weights in every run
    trainer.fit(TinyLM(), datamodule=datamodule, ckpt_path=checkpoint)


def launch(
    root: Path,
    out: Path,
    title: str,
    *,
    checkpoint: str | None = None,
    kill_after: int | None = None,
) -> None:
    """Run a training subprocess with a progress bar; expect SIGKILL if ``kill_after``."""
    from tqdm import tqdm

    command = [sys.executable, __file__, "--train", "--root", str(root), "--out", str(out)]
    if checkpoint:
        command += ["--ckpt", checkpoint]
    if kill_after is not None:
        command += ["--kill-after", str(kill_after)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    log = out / "rank0.jsonl"
    interactive = sys.stdout.isatty()  # a log file gets one line per run, not redraws
    with tqdm(total=STEPS, desc=title, unit="step", ncols=100, disable=not interactive) as bar:
        bar.set_postfix_str("starting 2 processes (imports take ~15 s)")
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        while process.poll() is None:
            bar.n = max(len(log.read_text().splitlines()) if log.exists() else 0, bar.n)
            if bar.n:
                bar.set_postfix_str("saving and exiting" if bar.n == STEPS else "training")
            bar.refresh()
            time.sleep(0.2)
        bar.n = max(len(log.read_text().splitlines()) if log.exists() else 0, bar.n)
        bar.refresh()
    stderr = process.stderr.read() if process.stderr else ""
    if not interactive:
        print(f"{title}: {bar.n}/{STEPS} steps")
    if kill_after is not None and process.returncode == -signal.SIGKILL:
        return
    if process.returncode != 0:
        raise SystemExit(f"{title} failed (exit code {process.returncode}):\n{stderr[-3000:]}")


def read_steps(out: Path, before: int | None = None) -> dict[int, list[int]]:
    """Ids per step, all ranks together; with ``before``, drop steps at or after it."""
    steps: dict[int, list[int]] = {}
    for path in sorted(out.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if before is None or entry["step"] < before:
                steps.setdefault(entry["step"], []).extend(entry["ids"])
    return steps


def source_of(sample_id: int) -> str:
    offsets = np.cumsum([0, *SOURCES.values()])
    return list(SOURCES)[int(np.searchsorted(offsets, sample_id, side="right")) - 1]


def final_parameters(a: Path, b: Path) -> tuple[int, int, str]:
    """Tensors compared and bit-identical (``torch.equal``) over every rank, and a note."""
    compared = equal = 0
    for path in sorted(a.glob("params_rank*.pt")):
        other = b / path.name
        if not other.exists():
            return compared, equal, f"the resumed run wrote no {path.name}"
        x, y = torch.load(path), torch.load(other)
        compared += len(x)
        equal += sum(torch.equal(x[k], y[k]) for k in x if k in y)
    return compared, equal, "" if compared else "the uninterrupted run wrote no parameters"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ckpt", help=argparse.SUPPRESS)
    parser.add_argument("--kill-after", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        train(args.root, args.out, args.ckpt, args.kill_after)
        return

    started = time.perf_counter()
    root = run_folder("demo")  # kept: shards, logs and checkpoints, for a look after
    write_shards(root / "shards")
    print(
        f"Wrote token shards for {len(SOURCES)} sources: "
        + ", ".join(f"{n} ({s} sequences)" for n, s in SOURCES.items())
    )
    print(
        f"Training {STEPS} steps on 2 DDP processes (CPU, gloo), 3 times: uninterrupted, killed "
        f"with SIGKILL after the checkpoint of step {KILL_AFTER}, and resumed from that "
        f"checkpoint. The mixture's weights change at step {PHASE_STEP} (a phase)."
    )
    (root / "a").mkdir()
    (root / "b").mkdir()
    launch(root / "shards", root / "a", "uninterrupted run  ")
    launch(root / "shards", root / "b", "run killed -9     ", kill_after=KILL_AFTER)
    checkpoint = root / "b" / "ckpt" / f"step={KILL_AFTER}.ckpt"
    if not checkpoint.exists():
        raise SystemExit(f"the interrupted run wrote no checkpoint at step {KILL_AFTER}")
    for log in (root / "b").glob("rank*.jsonl"):  # a rank may have begun the next step
        kept = [
            line for line in log.read_text().splitlines() if json.loads(line)["step"] < KILL_AFTER
        ]
        log.write_text("".join(line + "\n" for line in kept))
    launch(root / "shards", root / "b", "resumed (ckpt_path)", checkpoint=str(checkpoint))
    reference, resumed = read_steps(root / "a"), read_steps(root / "b")
    compared, equal, missing = final_parameters(root / "a", root / "b")

    same = [reference[s] == resumed.get(s) for s in reference]
    identical = len(reference) == STEPS and all(same) and len(resumed) == STEPS
    print(
        f"\nCompared {len(reference)} steps x {len(reference[0])} samples (2 ranks x "
        f"{BATCH}): {sum(same)} identical, {len(same) - sum(same)} different."
    )
    phases = (
        (f"before the phase (steps 0-{PHASE_STEP - 1})", range(0, PHASE_STEP)),
        (f"from the phase on (steps {PHASE_STEP}-{STEPS - 1})", range(PHASE_STEP, STEPS)),
    )
    for label, steps in phases:
        ref = Counter(source_of(i) for s in steps for i in reference[s])
        res = Counter(source_of(i) for s in steps for i in resumed.get(s, []))
        shown = ", ".join(f"{n} {ref[n]}/{res[n]}" for n in SOURCES)
        print(f"  samples per source {label} (uninterrupted/resumed): {shown}")
    params_same = compared > 0 and equal == compared
    print(
        f"  final parameters (2 ranks, {compared} tensors): "
        + (
            "bit-identical (torch.equal)"
            if params_same
            else missing or f"{compared - equal} of {compared} tensors differ"
        )
    )
    if identical and params_same:
        verdict = "IDENTICAL: nothing replayed, nothing skipped; final parameters bit-identical"
    elif identical:
        verdict = "DATA IDENTICAL, but the final parameters differ"
    else:
        verdict = "DIFFERENT"
    print(
        f"\nVerdict: {verdict} (killed with SIGKILL after step {KILL_AFTER}, resumed "
        f"with ckpt_path; {time.perf_counter() - started:.0f} s for the three runs and the check)"
    )
    print(inspect_hint(checkpoint))
    raise SystemExit(0 if identical and params_same else 1)


if __name__ == "__main__":
    main()
