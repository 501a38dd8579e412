"""LM-style pretraining over three named sources, with a two-phase mixture schedule.

What it shows:

* ``ResumableDataModule({"web": ..., "code": ..., "math": ...})``: a mapping of named
  sources becomes a ``MixtureDataset`` sampled by a ``MixtureSampler``;
* the schedule as two ``MixturePhase`` objects given to ``ResumableDataCallback``: a
  pretraining mix from step 0, an annealing mix (more ``math``) from a later step. Each
  phase starts at exactly its step on every rank, however far the workers prefetch;
* the callback's logging of the weights in force and the samples drawn per source
  (``data/weight/<source>``, ``data/drawn/<source>``), written here by a ``CSVLogger``;
* the promise: a run resumed from the checkpoint of a step just before the phase change
  trains on exactly the batches of the uninterrupted run, across the change.

Each source's samples are token sequences from the source's own range of the vocabulary, so
every batch tells which source each sample came from.

Run::

    python examples/mixture_pretraining.py            # a few hundred steps
    python examples/mixture_pretraining.py --smoke    # a few seconds

It prints the share of each source per phase against the phase's weights, the counts the
callback logged, and ``Verdict: IDENTICAL`` (exit status 0) or ``Verdict: DIFFERENT``.
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import torch
from _common import inspect_hint, quiet_lightning, run_folder
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lightning_resumable_data import MixturePhase, ResumableDataCallback, ResumableDataModule

SOURCES = ("web", "code", "math")
VOCAB_PER_SOURCE = 64  # source s uses tokens [s * 64, (s + 1) * 64)
SEQ_LEN = 32


class TokenSource(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``n`` pseudo-documents of one source: a token sequence with a learnable pattern."""

    def __init__(self, source: int, n: int) -> None:
        self.source, self.n = source, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = (int(index) * 7) % VOCAB_PER_SOURCE
        tokens = (start + torch.arange(SEQ_LEN) * (self.source + 1)) % VOCAB_PER_SOURCE
        return {
            "tokens": tokens + self.source * VOCAB_PER_SOURCE,
            "source": torch.tensor(self.source),
            "id": torch.tensor(self.source * 1_000_000 + int(index)),
        }


class TinyLM(pl.LightningModule):
    """An embedding and a linear head predicting the next token; records what it read."""

    def __init__(self) -> None:
        super().__init__()
        vocab = VOCAB_PER_SOURCE * len(SOURCES)
        self.embed = torch.nn.Embedding(vocab, 32)
        self.head = torch.nn.Linear(32, vocab)
        self.seen: dict[int, list[int]] = {}  # step -> sample ids
        self.sources: dict[int, list[int]] = {}  # step -> source of each sample

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen[self.global_step] = batch["id"].tolist()
        self.sources[self.global_step] = batch["source"].tolist()
        tokens = batch["tokens"]
        logits = self.head(self.embed(tokens[:, :-1]))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def phases(anneal_step: int) -> list[MixturePhase]:
    """The mixture schedule: a pretraining mix, then an annealing mix with more math."""
    return [
        MixturePhase(start_step=0, weights={"web": 0.6, "code": 0.3, "math": 0.1}),
        MixturePhase(start_step=anneal_step, weights={"web": 0.2, "code": 0.3, "math": 0.5}),
    ]


def fit(args: argparse.Namespace, root: Path, ckpt_path: str | None) -> TinyLM:
    """Pretrain until ``args.steps``, from scratch or from ``ckpt_path``.

    A checkpoint is written every ``args.resume_step`` steps (the one the resume uses).
    """
    sizes = {"web": args.samples * 6 // 10, "code": args.samples * 3 // 10}
    sizes["math"] = args.samples - sum(sizes.values())
    datamodule = ResumableDataModule(
        {name: TokenSource(s, sizes[name]) for s, name in enumerate(SOURCES)},
        batch_size=args.batch_size,
        seed=7,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        max_epochs=-1,
        callbacks=[
            ResumableDataCallback(phases(args.anneal_step), log_every_n_steps=args.log_every),
            ModelCheckpoint(
                dirpath=root / "ckpt",
                filename="{step}",
                every_n_train_steps=args.resume_step,
                save_top_k=-1,
            ),
        ],
        logger=CSVLogger(root, name="logs", version=0),
        log_every_n_steps=args.log_every,
        enable_progress_bar=not args.smoke,
        enable_model_summary=False,
        default_root_dir=root,
    )
    model = TinyLM()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    return model


def report_shares(model: TinyLM, anneal_step: int) -> None:
    """Print each phase's realised share of every source next to its weights."""
    schedule = phases(anneal_step)
    starts = [phase.start_step or 0 for phase in schedule] + [max(model.sources) + 1]
    for number, phase in enumerate(schedule):
        steps = range(starts[number], starts[number + 1])
        drawn = Counter(SOURCES[s] for step in steps for s in model.sources[step])
        total = sum(drawn.values())
        shares = ", ".join(
            f"{name} {drawn[name] / total:.2f} (weight {phase.weights[name]:.1f})"
            for name in SOURCES
        )
        print(f"   phase {number} (steps {steps.start}..{steps.stop - 1}): {shares}")


def report_logged(root: Path) -> None:
    """Print the last per-source counts the callback logged."""
    with (root / "logs" / "version_0" / "metrics.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row.get("data/drawn/web")]
    last = rows[-1]
    drawn = ", ".join(f"{name} {float(last[f'data/drawn/{name}']):.0f}" for name in SOURCES)
    weights = ", ".join(f"{name} {float(last[f'data/weight/{name}']):.2f}" for name in SOURCES)
    print(f"   logged at step {last['step']}: drawn this epoch: {drawn}; weights: {weights}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--samples", type=int, default=20_000, help="samples in all sources")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--anneal-step", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    if args.smoke:
        args.samples, args.batch_size, args.steps, args.anneal_step = 400, 16, 30, 20
        args.log_every = 5
    args.resume_step = resume = args.anneal_step - 2  # two steps before the phase change
    quiet_lightning()

    root = run_folder("mixture_pretraining")
    print(f"1. uninterrupted run: {args.steps} steps, annealing from step {args.anneal_step}")
    reference = fit(args, root / "reference", ckpt_path=None)
    report_shares(reference, args.anneal_step)
    report_logged(root / "reference")
    checkpoint = root / "reference" / "ckpt" / f"step={resume}.ckpt"
    print(f"2. resume from {checkpoint.name}, before the phase change")
    resumed = fit(args, root / "resumed", ckpt_path=str(checkpoint))

    expected = {step: ids for step, ids in reference.seen.items() if step >= resume}
    same = resumed.seen == expected
    print(
        f"   steps {resume}..{args.steps - 1}, across the phase change: the batches "
        f"{'equal' if same else 'differ from'} the uninterrupted run's"
    )
    print(f"Verdict: {'IDENTICAL' if same else 'DIFFERENT'}")
    print(inspect_hint(checkpoint))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
