"""A small Lightning run whose parameters depend on every random draw of training.

Used by ``tests/matrix/test_training_randomness.py``. The model has dropout and noise
injection from torch, NumPy's global RNG and ``random``; the dataset augments each sample
from its ``SampleKey.rng()``; ``val_check_interval=0.5`` with a validation step that draws
from the global generators too (it must not disturb training). Writes
``OUT/params_rank<r>.pt`` (every parameter, at the end of ``fit``), checkpoints
``OUT/ckpt/step=<k>.ckpt`` after every optimizer step and ``OUT/ckpt/epoch=<e>-end.ckpt``
at every epoch end, and a ledger of sample ids (``OUT/ids_rank<r>.jsonl``). ``--kill-at k``
SIGKILLs the whole run at the start of step ``k``. ``--serve`` turns the module into a fork
server (see ``faults/forkserve.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
import torch.multiprocessing  # imported once by the fork server

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
from faults.forkserve import serve

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule, SampleKey
from lightning_resumable_data.seeding import GENERATORS
from matrix.train import checkpoints

N, FEATURES = 64, 8


class Augmented(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Sample ``i``: a fixed feature vector plus keyed noise (training) or none."""

    def __init__(self, n: int) -> None:
        self.x = torch.from_numpy(np.random.default_rng(0).normal(size=(n, FEATURES)))
        self.x = self.x.float()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        x = self.x[int(index)]
        if isinstance(index, SampleKey):  # training: keyed, resume-proof augmentation
            x = x + torch.from_numpy(index.rng().normal(scale=0.1, size=FEATURES)).float()
        return {"id": torch.tensor(int(index)), "x": x}


class Model(pl.LightningModule):
    def __init__(self, out: Path, kill_at: int | None, torch_only: bool = False) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 32),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.3),
            torch.nn.Linear(32, 1),
        )
        self.out, self.kill_at, self.torch_only = out, kill_at, torch_only

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.global_step == self.kill_at and self.global_rank == 0:
            os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole run, no cleanup
        line = {"step": self.global_step, "batch": batch_idx, "ids": batch["id"].tolist()}
        with (self.out / f"ids_rank{self.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
        # noise injection from every global generator: torch (dropout too), NumPy, random
        scale = 1.0 if self.torch_only else 1.0 + 0.1 * np.random.random() + 0.1 * random.random()
        x = batch["x"] * scale + 0.01 * torch.randn_like(batch["x"])
        loss: torch.Tensor = (self.net(x) - batch["x"].sum(1, keepdim=True)).pow(2).mean()
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        # draws from the global generators, as MC-dropout or a noisy metric would
        noise = torch.rand(3).sum()
        if not self.torch_only:
            noise = noise + float(np.random.random()) + random.random()
        self.log("val", self.net(batch["x"]).mean() + 0 * noise, sync_dist=True)

    def on_fit_end(self) -> None:
        params = {name: p.detach().clone() for name, p in self.named_parameters()}
        torch.save(params, self.out / f"params_rank{self.global_rank}.pt")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--no-seed", action="store_true", help="seed_training=False")
    parser.add_argument(
        "--torch-only",
        action="store_true",
        help="the default seed_training=True (torch's generators) and a model drawing from "
        "torch only; else seed_training=(torch, numpy, random) and noise from all three",
    )
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--ckpt")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(1)  # the initial weights; the process's RNG state otherwise
    callbacks: list[pl.Callback] = [
        *checkpoints(args.out),
        ResumableDataCallback(log_every_n_steps=0)
        if args.torch_only
        else ResumableDataCallback(
            log_every_n_steps=0, seed_training=False if args.no_seed else GENERATORS
        ),
    ]
    datamodule = ResumableDataModule(
        Augmented(N),
        val_dataset=Augmented(12),
        batch_size=args.batch_size,
        seed=3,
        sample_keys=True,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp_fork" if args.devices > 1 else "auto",
        max_epochs=args.max_epochs,
        val_check_interval=0.5,
        num_sanity_val_steps=2,
        limit_val_batches=2,
        accumulate_grad_batches=args.accumulate,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    model = Model(args.out, args.kill_at, args.torch_only)
    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
