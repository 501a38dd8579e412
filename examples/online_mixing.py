"""Online mixing: the weights follow the per-source loss while training, and resume exactly.

What it shows:

* ``ResumableDataModule({...}, return_source=True)``: each batch comes with the source name
  of every sample, and the model logs its per-source loss with ``log_source_values``;
* a *policy* given to ``ResumableDataCallback(policy=..., policy_every_n_steps=...)``: the
  softmax of the per-source loss, so the sources the model finds hardest are read more.
  Rank 0 decides, every rank applies the change at the same global position (from the
  first step no rank has handed to its loader), and the checkpoint records it;
* the promise: a run resumed from a checkpoint in the middle trains on exactly the batches
  of the uninterrupted run, and its later decisions are the same ones.

The three sources are token sequences of different difficulty: ``web`` repeats one short
pattern, ``code`` a few longer ones, ``math`` many patterns with a stride the model must
learn per sequence. Their losses fall at different speeds, and so do their weights.

Run::

    python examples/online_mixing.py            # a few hundred steps
    python examples/online_mixing.py --smoke    # a few seconds

It prints the weight changes and the realised shares, writes the weights in force and the
sources read at every step to ``runs/online_mixing/online_mixing.json`` (``python
docs/make_plots.py`` draws ``docs/img/online_mixing.png`` from it), and ends with
``Verdict: IDENTICAL`` (exit status 0) or ``Verdict: DIFFERENT``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from _common import inspect_hint, quiet_lightning, run_folder
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.lightning.mixing import (
    MixingStats,
    log_source_values,
    softmax_weights,
)

SOURCES = ("web", "code", "math")
PATTERNS = {"web": 1, "code": 4, "math": 32}  # distinct sequences per source: difficulty
VOCAB = 48
SEQ_LEN = 24


class TokenSource(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``n`` sequences of one source: ``PATTERNS[name]`` arithmetic patterns mod ``VOCAB``."""

    def __init__(self, name: str, n: int) -> None:
        self.number, self.patterns, self.n = SOURCES.index(name), PATTERNS[name], n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        pattern = int(index) % self.patterns
        start, stride = (pattern * 5) % VOCAB, 1 + pattern % 7
        tokens = (start + stride * torch.arange(SEQ_LEN)) % VOCAB
        return {"tokens": tokens, "id": torch.tensor(self.number * 1_000_000 + int(index))}


class TinyLM(pl.LightningModule):
    """An embedding and a linear head predicting the next token; logs the loss per source."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)
        self.seen: dict[int, list[int]] = {}  # step -> sample ids
        self.sources: dict[int, list[str]] = {}  # step -> source of each sample

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        samples, sources = batch  # return_source=True: [collated samples, source names]
        self.seen[self.global_step] = samples["id"].tolist()
        self.sources[self.global_step] = list(sources)
        tokens = samples["tokens"]
        logits = self.head(self.embed(tokens[:, :-1]))
        per_token = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), tokens[:, 1:], reduction="none"
        )
        losses = per_token.mean(dim=1)  # one loss per sample
        log_source_values(self, "loss", losses.detach(), sources)
        return losses.mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def make_policy(temperature: float) -> Any:
    """Softmax of the per-source loss; ``None`` (keep the weights) until all were logged."""

    def policy(trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats) -> Any:
        losses = stats.metrics.get("loss", {})
        if set(losses) != set(SOURCES):
            return None
        return softmax_weights(losses, temperature=temperature)

    return policy


def fit(
    args: argparse.Namespace, root: Path, ckpt_path: str | None
) -> tuple[TinyLM, ResumableDataModule, ResumableDataCallback]:
    """Train until ``args.steps``, from scratch or from ``ckpt_path``."""
    datamodule = ResumableDataModule(
        {name: TokenSource(name, args.samples // 3) for name in SOURCES},
        batch_size=args.batch_size,
        weights={name: 1.0 for name in SOURCES},
        samples_per_epoch=args.steps * args.batch_size,  # the whole run is one epoch
        return_source=True,
        seed=11,
    )
    callback = ResumableDataCallback(
        log_every_n_steps=0,
        policy=make_policy(args.temperature),
        policy_every_n_steps=args.every,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        callbacks=[
            callback,
            ModelCheckpoint(
                dirpath=root / "ckpt",
                filename="{step}",
                every_n_train_steps=args.resume_step,
                save_top_k=-1,
            ),
        ],
        logger=False,
        enable_progress_bar=not args.smoke,
        enable_model_summary=False,
        default_root_dir=root,
    )
    torch.manual_seed(0)  # the initial parameters (a resume loads them from the checkpoint)
    model = TinyLM()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    return model, datamodule, callback


def record(
    model: TinyLM, datamodule: ResumableDataModule, callback: ResumableDataCallback, batch: int
) -> dict[str, Any]:
    """The weights in force and the sources read at every step, and the changes applied."""
    sampler = datamodule.train_loader.position_sampler  # type: ignore[union-attr]
    steps = [
        {
            "step": step,
            "weights": sampler.weights_at(0, step * batch),  # type: ignore[union-attr]
            "read": dict(Counter(model.sources[step])),
        }
        for step in sorted(model.sources)
    ]
    return {"sources": list(SOURCES), "steps": steps, "changes": callback.mixer.changes}


def report(result: dict[str, Any], every: int) -> None:
    """Print the changes, and the realised shares over the stretches between them."""
    steps = len(result["steps"])
    applied = [
        c["epoch"] * steps + c["position"] // result["batch_size"] for c in result["changes"]
    ]
    starts = [0, *[step for step in applied if step < steps]]  # the run is one epoch
    print(f"   {len(starts) - 1} weight changes, every {every} steps once every loss is known")
    stops = [*starts[1:], steps]
    shown = sorted({0, 1, len(starts) // 2, len(starts) - 1})
    for i in shown:
        lo, hi = starts[i], stops[i]
        if lo >= hi:
            continue
        read: Counter[str] = Counter()
        for line in result["steps"][lo:hi]:
            read.update(line["read"])
        total = sum(read.values())
        weights = result["steps"][lo]["weights"]
        shares = ", ".join(
            f"{n} {read[n] / total:.2f} (weight {weights[n]:.2f})" for n in result["sources"]
        )
        print(f"   steps {lo}..{hi - 1}: {shares}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--samples", type=int, default=3_000, help="samples in all sources")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=10, help="policy period, in steps")
    parser.add_argument("--temperature", type=float, default=0.5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    if args.smoke:
        args.samples, args.batch_size, args.steps, args.every = 300, 16, 40, 5
    args.resume_step = resume = args.steps // 2 + 2  # between two sync points
    quiet_lightning()

    root = run_folder("online_mixing")
    print(f"1. uninterrupted run: {args.steps} steps, the policy every {args.every} steps")
    model, datamodule, callback = fit(args, root / "reference", ckpt_path=None)
    result = record(model, datamodule, callback, args.batch_size)
    result["batch_size"] = args.batch_size
    report(result, args.every)
    path = root / "online_mixing.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"   weights and sources per step: {path}")

    checkpoint = root / "reference" / "ckpt" / f"step={resume}.ckpt"
    print(f"2. resume from {checkpoint.name}")
    resumed, _, resumed_callback = fit(args, root / "resumed", ckpt_path=str(checkpoint))
    expected = {step: ids for step, ids in model.seen.items() if step >= resume}
    same_batches = resumed.seen == expected
    later = [c for c in callback.mixer.changes if c["step"] > resume]
    same_changes = [c["position"] for c in resumed_callback.mixer.changes] == [
        c["position"] for c in later
    ] and all(
        a["weights"] == b["weights"]
        for a, b in zip(resumed_callback.mixer.changes, later, strict=True)
    )
    print(
        f"   steps {resume}..{args.steps - 1}: the batches "
        f"{'equal' if same_batches else 'differ from'} the uninterrupted run's; the "
        f"{len(later)} later weight changes {'equal' if same_changes else 'differ from'} its"
    )
    same = same_batches and same_changes
    print(f"Verdict: {'IDENTICAL' if same else 'DIFFERENT'}")
    print(inspect_hint(checkpoint))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
