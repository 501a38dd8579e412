"""A Lightning run with online mixing, for ``tests/test_online_mixing.py``.

A deterministic fake per-source loss (a function of the samples drawn so far) drives a
softmax policy every 5 steps, or ``--raw STEP`` calls ``set_weights`` from
``training_step`` at that step. Writes the ledger (``ids_rank<r>.jsonl``, as ``train.py``),
checkpoints after every step, and at the end ``online_rank<r>.json``: the sampler's schedule,
the changes this process applied and the policy's own proposals.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
from faults.forkserve import serve
from ledger_model import Samples

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.lightning.mixing import MixingStats, softmax_weights

SOURCES = {"web": (0, 40), "code": (40, 16), "math": (56, 8)}
PER_EPOCH = 64


def fake_losses(stats: MixingStats, skew: int = 0) -> dict[str, float]:
    """A per-source 'loss' that only depends on what was drawn (and ``skew``)."""
    return {
        k: 1.0 + ((v * 7 + 3 * i + skew) % 11) / 5 for i, (k, v) in enumerate(stats.drawn.items())
    }


class Model(pl.LightningModule):
    def __init__(self, out: Path, raw: int | None, kill: int | None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.out, self.raw, self.kill = out, raw, kill
        self.callback: ResumableDataCallback | None = None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.kill is not None and self.global_step == self.kill:
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash, mid-run

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        line = {"step": self.global_step, "epoch": self.current_epoch, "batch": batch_idx}
        with (self.out / f"ids_rank{self.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(line | {"ids": batch["id"].tolist()}) + "\n")
        if self.raw is not None and self.global_step == self.raw and self.callback is not None:
            self.callback.set_weights({"web": 0.1, "code": 0.1, "math": 0.8})
        loss: torch.Tensor = self.layer(batch["x"]).pow(2).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--skew", action="store_true", help="each rank proposes other weights")
    parser.add_argument("--raw", type=int, help="set_weights at this step instead of a policy")
    parser.add_argument("--kill", type=int, help="SIGKILL at the start of this step")
    parser.add_argument("--ckpt")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    proposals: list[dict[str, Any]] = []

    def policy(trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats) -> Any:
        weights = softmax_weights(fake_losses(stats, trainer.global_rank if args.skew else 0))
        proposals.append({"step": stats.step, "weights": weights})
        return weights

    callback = ResumableDataCallback(
        log_every_n_steps=0,
        policy=None if args.raw is not None else policy,
        policy_every_n_steps=5,
    )
    model = Model(args.out, args.raw, args.kill)
    model.callback = callback
    datamodule = ResumableDataModule(
        {name: Samples(size, start) for name, (start, size) in SOURCES.items()},
        batch_size=args.batch_size,
        weights={"web": 0.5, "code": 0.3, "math": 0.2},
        samples_per_epoch=PER_EPOCH,
        seed=3,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    checkpoints = ModelCheckpoint(
        dirpath=args.out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
    )

    class Dump(pl.Callback):
        def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            sampler = datamodule.train_loader.position_sampler  # type: ignore[union-attr]
            result = {
                "schedule": sampler.schedule,  # type: ignore[union-attr]
                "changes": callback.mixer.changes,
                "proposals": proposals,
            }
            path = args.out / f"online_rank{trainer.global_rank}.json"
            path.write_text(json.dumps(result))

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp_fork" if args.devices > 1 else "auto",
        max_epochs=args.max_epochs,
        callbacks=[checkpoints, callback, Dump()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )

    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
