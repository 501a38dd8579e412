"""A Lightning run whose policy reads logged per-source values, for ``test_mixing_resume.py``.

The policy is the docs' one (``docs/mixing.md``): the softmax of ``stats.metrics["loss"]``
at temperature 2, ``None`` until every source has a value. The values come from

* the default: a linear model's per-sample squared error against a per-source target,
  logged by ``log_source_values`` (a real training loss: it depends on the weights learnt);
* ``--synthetic``: ``self.log(f"loss/{source}", ...)`` of one source per step, chosen and
  valued by the global step alone, so that every layout (2 processes of batch 4, or 1 of
  batch 8) logs the same values at the same step;
* ``--on-epoch``: the default, logged with ``on_epoch=True`` too (at an epoch's end
  ``loss/<source>`` becomes the epoch's mean), with a checkpoint at every epoch's end.

Writes the ledger (``ids_rank<r>.jsonl``, as ``train.py``), the policy's calls as they
happen (``policy_rank<r>.jsonl``: the step, the metrics it saw, what it returned), a
checkpoint after every step (``ckpt/step=<k>.ckpt``) and at the end ``online_rank<r>.json``:
the sampler's schedule and the changes this process applied.
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

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule
from lightning_resumable_data.lightning.mixing import (
    MixingStats,
    log_source_values,
    softmax_weights,
)

# name: (first id, size, target of the regression)
SOURCES = {"a": (0, 40, 6.0), "b": (40, 16, 3.0), "c": (56, 24, 0.0)}
PER_EPOCH = 64


class Source(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Sample ``i`` of a source: its global id, a feature vector, the source's target."""

    def __init__(self, start: int, size: int, target: float) -> None:
        self.start, self.size, self.target = start, size, target

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        i = self.start + int(index)
        x = torch.tensor([1.0, (i % 7) / 7, (i % 3) / 3, 0.5])
        return {"id": torch.tensor(i), "x": x, "y": torch.tensor(self.target)}


def docs_policy(trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats) -> Any:
    """The policy of ``docs/mixing.md``, as written there."""
    losses = stats.metrics.get("loss", {})  # {"a": ..., "b": ..., "c": ...}
    if len(losses) < 3:
        return None  # keep the weights until every source was seen
    return softmax_weights(losses, temperature=2.0)  # the hardest source is read most


def synthetic_value(step: int) -> tuple[str, float]:
    """The source logged at ``step`` and its value: a function of the step alone."""
    names = sorted(SOURCES)
    return names[step % 3], 1.0 + ((step * 7) % 11) / 4


class Model(pl.LightningModule):
    def __init__(self, out: Path, synthetic: bool, on_epoch: bool, kill: int | None) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.out, self.synthetic, self.on_epoch, self.kill = out, synthetic, on_epoch, kill

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self.kill is not None and self.global_step == self.kill:
            os.kill(os.getpid(), signal.SIGKILL)  # a real crash, mid-run

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        samples, sources = batch  # return_source=True: [collated samples, source names]
        line = {"step": self.global_step, "epoch": self.current_epoch, "batch": batch_idx}
        with (self.out / f"ids_rank{self.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(line | {"ids": samples["id"].tolist()}) + "\n")
        losses: torch.Tensor = (self.layer(samples["x"]).squeeze(1) - samples["y"]).pow(2)
        if self.synthetic:
            source, value = synthetic_value(self.global_step)
            self.log(f"loss/{source}", torch.tensor(value))
        else:
            log_source_values(self, "loss", losses.detach(), sources, on_epoch=self.on_epoch)
        return losses.mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.02)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--every", type=int, default=2, help="policy_every_n_steps")
    parser.add_argument("--synthetic", action="store_true", help="values set by the step")
    parser.add_argument("--on-epoch", action="store_true", help="log with on_epoch=True")
    parser.add_argument("--kill", type=int, help="SIGKILL at the start of this step")
    parser.add_argument("--ckpt")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    def policy(trainer: pl.Trainer, module: pl.LightningModule, stats: MixingStats) -> Any:
        weights = docs_policy(trainer, module, stats)
        line = {"step": stats.step, "metrics": stats.metrics, "weights": weights}
        with (args.out / f"policy_rank{trainer.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
        return weights

    callback = ResumableDataCallback(
        log_every_n_steps=0, policy=policy, policy_every_n_steps=args.every
    )
    datamodule = ResumableDataModule(
        {name: Source(start, size, target) for name, (start, size, target) in SOURCES.items()},
        batch_size=args.batch_size,
        weights={"a": 0.4, "b": 0.3, "c": 0.3},
        samples_per_epoch=PER_EPOCH,
        seed=3,
        return_source=True,
    )
    checkpoints = [
        ModelCheckpoint(
            dirpath=args.out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        )
    ]
    if args.on_epoch:
        checkpoints.append(
            ModelCheckpoint(
                dirpath=args.out / "ckpt",
                filename="{epoch}-end",
                every_n_epochs=1,
                save_on_train_epoch_end=True,
                save_top_k=-1,
            )
        )

    class Dump(pl.Callback):
        def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            sampler = datamodule.train_loader.position_sampler  # type: ignore[union-attr]
            result = {
                "schedule": sampler.schedule,  # type: ignore[union-attr]
                "changes": callback.mixer.changes,
            }
            path = args.out / f"online_rank{trainer.global_rank}.json"
            path.write_text(json.dumps(result))

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp_fork" if args.devices > 1 else "auto",
        max_epochs=args.max_epochs,
        callbacks=[*checkpoints, callback, Dump()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    torch.manual_seed(0)  # the initial parameters (a resume loads them from the checkpoint)
    model = Model(args.out, args.synthetic, args.on_epoch, args.kill)
    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
