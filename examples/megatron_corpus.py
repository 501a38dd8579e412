"""Megatron-format corpora, packed into samples, trained on, interrupted and resumed exactly.

What it shows:

* two corpora in Megatron's indexed format (``.bin`` + ``.idx``), written by megatron-core's
  ``IndexedDatasetBuilder`` when it is installed, else by this package's ``write_megatron``
  (the same bytes); any ``preprocess_data.py`` output reads the same way;
* ``open_megatron`` (a memory map, no Megatron import) and ``PackedDataset``: documents
  shuffled per epoch, joined with an EOS token and cut into fixed-length samples, with
  ``position_ids`` restarting per document and ``cu_seqlens`` for variable-length attention
  (``collate_packed`` joins them over the batch);
* a mixture of the two corpora in ``ResumableDataModule`` (weights in tokens: every packed
  sample holds ``seq_len`` tokens), ``sample_keys=True`` so that each sample is packed for
  its own epoch, whichever worker reads it;
* a run resumed from a mid-run checkpoint trains on exactly the batches of the
  uninterrupted run, across the epoch boundary where the packing changes.

Run::

    python examples/megatron_corpus.py            # a few hundred steps
    python examples/megatron_corpus.py --smoke    # a few seconds

It prints ``Verdict: IDENTICAL`` (exit status 0) or ``Verdict: DIFFERENT`` (exit status 1).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from _common import inspect_hint, quiet_lightning, run_folder
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.documents import (
    PackedDataset,
    collate_packed,
    open_megatron,
    write_megatron,
)

VOCAB, EOS, SEQ_LEN = 1000, 0, 64


def write_corpus(prefix: Path, documents: int, seed: int) -> str:
    """Random documents in Megatron's format; returns which writer wrote them."""
    rng = np.random.default_rng(seed)
    docs = [rng.integers(1, VOCAB, int(rng.integers(5, 150))) for _ in range(documents)]
    try:
        with warnings.catch_warnings():  # megatron-core warns about optional GPU packages
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    except ImportError:
        write_megatron(prefix, docs, dtype=np.uint16)
        return "write_megatron"
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=np.uint16)
    for doc in docs:
        builder.add_item(torch.from_numpy(doc))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return "megatron-core's IndexedDatasetBuilder"


class TinyLM(pl.LightningModule):
    """An embedding and a linear head; records the tokens of every step."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)
        self.seen: dict[int, tuple[int, list[int]]] = {}  # step -> (token sum, cu_seqlens)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        ids = batch["input_ids"]
        self.seen[self.global_step] = (int(ids.sum()), batch["cu_seqlens"].tolist())
        logits = self.head(self.embed(ids[:, :-1]))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(
    args: argparse.Namespace, root: Path, data: dict[str, PackedDataset], ckpt: str | None
) -> dict[int, tuple[int, list[int]]]:
    datamodule = ResumableDataModule(
        data,
        weights={"web": 0.7, "code": 0.3},  # samples, and so tokens: all hold SEQ_LEN
        batch_size=args.batch_size,
        seed=7,
        sample_keys=True,
        collate_fn=collate_packed,
        num_workers=args.workers if ckpt else 0,  # another num_workers after the resume
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        max_epochs=-1,
        callbacks=[
            ResumableDataCallback(),
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
    model = TinyLM()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt)
    return model.seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--documents", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.smoke:
        args.documents = 300
    quiet_lightning()
    root = run_folder("megatron_corpus")
    data: dict[str, PackedDataset] = {}
    for number, name in enumerate(("web", "code")):
        prefix = root / "data" / name
        prefix.parent.mkdir(parents=True, exist_ok=True)
        writer = write_corpus(prefix, args.documents // (number + 1), seed=number)
        corpus = open_megatron(prefix)
        data[name] = PackedDataset(corpus, SEQ_LEN, eos_id=EOS, boundaries="cu_seqlens")
        print(
            f"{name}: {len(corpus)} documents, {corpus.num_tokens} tokens ({writer}) -> "
            f"{len(data[name])} samples of {SEQ_LEN} tokens, tail {data[name].tail_tokens}, "
            f"index {data[name].index_nbytes} bytes"
        )
    per_epoch = -(-(len(data["web"]) + len(data["code"])) // args.batch_size)
    if args.smoke:
        args.steps = per_epoch + 6  # across the epoch boundary, where the packing changes
    args.resume_step = max(1, min(args.steps - 5, per_epoch - 3))  # resume late in epoch 0
    print(f"{per_epoch} steps an epoch; the resume starts at step {args.resume_step}")
    reference = fit(args, root / "reference", data, None)
    checkpoint = root / "reference" / "ckpt" / f"step={args.resume_step}.ckpt"
    resumed = fit(args, root / "resumed", data, str(checkpoint))
    later = {step: seen for step, seen in reference.items() if step >= args.resume_step}
    same = resumed == later and bool(later)
    print(
        f"steps {args.resume_step}..{args.steps - 1} after the resume (to epoch "
        f"{(args.steps - 1) // per_epoch}): the batches and their document boundaries "
        f"{'equal' if same else 'DIFFER from'} the uninterrupted run's"
    )
    print(inspect_hint(checkpoint))
    print(f"Verdict: {'IDENTICAL' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
