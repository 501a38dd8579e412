"""The dataset and model of the real Trainer runs: every training batch goes to a ledger.

Shared by the training scripts of the tests (``scripts/lightning_train.py``,
``faults/train.py``, ``matrix/train.py``): sample ``i`` carries its global id, and every
rank appends ``{"step", "epoch", "batch", "ids"}`` to ``OUT/ids_rank<r>.jsonl`` for each
training batch, so a run's order can be compared with another's sample by sample.
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import torch


class Samples(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Sample ``i`` carries its global id (``start + i``) and a feature vector."""

    def __init__(self, n: int, start: int = 0) -> None:
        self.n, self.start = n, start

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        i = self.start + int(index)
        return {"id": torch.tensor(i), "x": torch.full((4,), float(i % 7))}


class LedgerModel(pl.LightningModule):
    """A linear model that writes each training batch's sample ids to the ledger."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.out = out

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        line = {
            "step": self.global_step,
            "epoch": self.current_epoch,
            "batch": batch_idx,
            "ids": batch["id"].tolist(),
        }
        with (self.out / f"ids_rank{self.global_rank}.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
        loss: torch.Tensor = self.layer(batch["x"]).pow(2).mean()
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val", self.layer(batch["x"]).mean(), sync_dist=True)

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("test", self.layer(batch["x"]).mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)
