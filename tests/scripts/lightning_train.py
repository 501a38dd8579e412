"""A tiny Lightning training run that logs the sample ids of every step, per rank.

Used by the Lightning tests: run it uninterrupted, or have it SIGKILL its whole process
group right after the checkpoint of step ``--kill-after`` was written, then resume it with
``--ckpt``. Every rank appends ``{"step", "epoch", "batch", "ids"}`` lines to
``OUT/ids_rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
from ledger_model import LedgerModel, Samples

from lightning_resumable_data import (
    DistributedSampler,
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
)

N = 96
SOURCES = {"web": 64, "code": 24, "math": 12}


class NoLenSampler(DistributedSampler):
    """A sampler without ``__len__``: Lightning then fetches one batch ahead."""

    def __len__(self) -> int:
        raise TypeError("no length")


class Model(LedgerModel):
    def on_train_start(self) -> None:
        sampler = self.trainer.train_dataloader.sampler  # type: ignore[union-attr]
        # Lightning must neither replace nor wrap our sampler (use_distributed_sampler=True).
        assert isinstance(sampler, DistributedSampler), type(sampler)


class KillAfter(pl.Callback):
    """SIGKILL the whole process group once the checkpoint of step ``step`` is written."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and trainer.global_rank == 0:
            os.killpg(os.getpgid(0), signal.SIGKILL)


class NoLenDataModule(ResumableDataModule):
    def train_dataloader(self) -> Any:
        loader = super().train_dataloader()
        assert isinstance(loader.sampler, DistributedSampler)
        loader.sampler.__class__ = NoLenSampler
        return loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--kill-after", type=int)
    parser.add_argument("--ckpt")
    parser.add_argument("--mixture", action="store_true")
    parser.add_argument("--phase-step", type=int)
    parser.add_argument("--val-every", type=int)
    parser.add_argument("--no-len", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    callbacks: list[pl.Callback] = [
        ModelCheckpoint(
            dirpath=args.out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
    ]
    phases = []
    if args.mixture:
        starts = {"web": 0, "code": 64, "math": 88}
        train: Any = {name: Samples(n, starts[name]) for name, n in SOURCES.items()}
        weights = {"web": 0.6, "code": 0.3, "math": 0.1}
        if args.phase_step is not None:
            phases = [
                MixturePhase(
                    start_step=args.phase_step, weights={"web": 0.1, "code": 0.2, "math": 0.7}
                )
            ]
    else:
        train, weights = Samples(N), None
    callbacks.append(ResumableDataCallback(phases=phases, log_every_n_steps=5))
    if args.kill_after is not None:
        callbacks.append(KillAfter(args.kill_after))
    module_class = NoLenDataModule if args.no_len else ResumableDataModule
    datamodule = module_class(
        train,
        val_dataset=Samples(10) if args.val_every else None,
        batch_size=args.batch_size,
        weights=weights,
        seed=args.seed,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_steps=args.max_steps,
        max_epochs=-1,
        val_check_interval=args.val_every,
        check_val_every_n_epoch=None if args.val_every else 1,
        num_sanity_val_steps=0,
        limit_val_batches=2 if args.val_every else 0,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    trainer.fit(Model(args.out), datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    main()
