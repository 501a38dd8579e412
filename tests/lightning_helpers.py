"""Tiny in-process Lightning runs shared by the tests: a model that records its batches."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import TensorDataset

from lightning_resumable_data import DistributedSampler, StatefulDataLoader


class IdsModel(pl.LightningModule):
    """Records every training batch as (epoch, batch index, sample ids)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[tuple[int, int, list[int]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids = batch[0] if isinstance(batch, list) else batch
        self.seen.append((self.current_epoch, batch_idx, ids.tolist()))
        loss: torch.Tensor = self.layer(ids.float().unsqueeze(1)).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def make_trainer(root: Path, *callbacks: pl.Callback, **kwargs: Any) -> pl.Trainer:
    """A quiet CPU ``Trainer`` writing under ``root``."""
    return pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=list(callbacks),
        **kwargs,
    )


def every_5_steps(root: Path) -> ModelCheckpoint:
    """Checkpoints ``root/ckpt/step=N.ckpt`` every 5 optimizer steps, all kept."""
    return ModelCheckpoint(
        dirpath=root / "ckpt", filename="{step}", every_n_train_steps=5, save_top_k=-1
    )


@pytest.fixture(autouse=True)
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's hints about workers and GPUs (import it into a test module)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*GPU available.*")
        yield


class MyDataModule(pl.LightningDataModule):
    """docs/migration/lightning.md's own DataModule, returning this package's loader."""

    def __init__(self) -> None:
        super().__init__()
        self.train_set = TensorDataset(torch.arange(64))

    def train_dataloader(self) -> StatefulDataLoader:
        strategy = self.trainer.strategy  # type: ignore[union-attr]
        world = getattr(strategy, "distributed_sampler_kwargs", None) or {}
        sampler = DistributedSampler(self.train_set, seed=42, **world)
        return StatefulDataLoader(self.train_set, batch_size=8, sampler=sampler)
