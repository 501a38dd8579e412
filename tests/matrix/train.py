"""A small Lightning run under one Trainer setting that logs every batch's sample ids.

Used by ``tests/matrix/test_trainer_settings.py``. Every rank appends one line per training
batch, ``{"step", "epoch", "batch", "ids"}``, to ``OUT/ids_rank<r>.jsonl`` (the *ledger*).
Checkpoints: ``OUT/ckpt/step=<k>.ckpt`` after every optimizer step, and
``OUT/ckpt/epoch=<e>-end.ckpt`` at every epoch end (``save_on_train_epoch_end``), and with
``--validate`` ``OUT/ckpt/step=<k>-val.ckpt`` at every validation end. A run
resumed with ``--ckpt`` writes its own ledger in its own ``--out``. ``--serve`` turns the
module into a fork server (see ``faults/forkserve.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
from faults.forkserve import serve
from ledger_model import LedgerModel as Model
from ledger_model import Samples

from lightning_resumable_data import (
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    ResumeWarning,
)

N = 64
SOURCES = {"web": (0, 40), "code": (40, 16), "math": (56, 8)}  # name: (first id, size)


class BarRecorder(pl.Callback):
    """Writes the progress bar's total, count and title after every training batch."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        bar = trainer.progress_bar_callback.train_progress_bar  # type: ignore[union-attr]
        line = {"total": bar.total, "n": bar.n, "title": bar.desc}
        with (self.out / "bar.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")


def checkpoints(out: Path) -> list[pl.Callback]:
    """``OUT/ckpt/step=<k>.ckpt`` after every optimizer step, ``epoch=<e>-end.ckpt`` at ends."""
    return [
        ModelCheckpoint(
            dirpath=out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
        ModelCheckpoint(
            dirpath=out / "ckpt",
            filename="{epoch}-end",
            every_n_epochs=1,
            save_top_k=-1,
            save_on_train_epoch_end=True,
        ),
    ]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--limit-train-batches", type=float, default=1.0)
    parser.add_argument("--reload", type=int, default=0)
    parser.add_argument("--val-check-interval", type=float, default=1.0)
    parser.add_argument("--check-val-every", type=int, default=1)
    parser.add_argument("--sanity", type=int, default=0)
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--phase-step", type=int, help="a mixture with a phase at this step")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--progress-bar", action="store_true", help="log its total and title")
    parser.add_argument("--ckpt")
    parser.add_argument("--refit-max-steps", type=int, help="then fit again to this many steps")
    return parser.parse_args(argv)


def strategy(devices: int) -> str:
    """DDP as torchrun launched it; else forked processes from this one (or none)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "ddp"
    return "ddp_fork" if devices > 1 else "auto"


def main(argv: Sequence[str]) -> None:
    warnings.simplefilter("error", ResumeWarning)  # a resume that warns is a failed cell
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train: Any = Samples(N)
    weights, samples_per_epoch, phases = None, None, []
    if args.phase_step is not None:
        train = {name: Samples(size, start) for name, (start, size) in SOURCES.items()}
        weights = {"web": 0.5, "code": 0.3, "math": 0.2}
        samples_per_epoch = N
        phases = [
            MixturePhase(start_step=args.phase_step, weights={"web": 0.2, "code": 0.3, "math": 0.5})
        ]
    callbacks: list[pl.Callback] = [*checkpoints(args.out)]
    if args.validate:  # and one at every validation end, mid-epoch ones included
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.out / "ckpt",
                filename="{step}-val",
                monitor="val",
                save_top_k=-1,
                save_on_train_epoch_end=False,
            )
        )
    callbacks.append(ResumableDataCallback(phases=phases, log_every_n_steps=0))
    if args.progress_bar:
        callbacks.append(BarRecorder(args.out))
    datamodule = ResumableDataModule(
        train,
        val_dataset=Samples(10) if args.validate else None,
        batch_size=args.batch_size,
        weights=weights,
        samples_per_epoch=samples_per_epoch,
        seed=3,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    limit = args.limit_train_batches
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy(args.devices),
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        limit_train_batches=int(limit) if limit > 1 else limit,
        reload_dataloaders_every_n_epochs=args.reload,
        val_check_interval=args.val_check_interval,
        check_val_every_n_epoch=args.check_val_every,
        num_sanity_val_steps=args.sanity,
        limit_val_batches=2 if args.validate else 0,
        accumulate_grad_batches=args.accumulate,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=args.progress_bar,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    model = Model(args.out)
    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)
    if args.refit_max_steps is not None:  # the same trainer, more steps: training continues
        trainer.fit_loop.epoch_loop.max_steps = args.refit_max_steps
        trainer.fit(model, datamodule=datamodule)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
