"""Real ``Trainer`` fits of ``range(N)`` that count reads and keep a per-step ledger.

Shared by the tests of cuts (``skip_steps``, ``lrd skip``) and quarantines: a
``ResumableDataModule`` as the docs show it, a dataset that notes every index it reads, and
a model that records the batches of every optimizer step.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lightning_resumable_data import ResumableDataModule

__all__ = ["Counted", "N", "Recorder", "fit_counted", "samples_of"]

N = 40


class Counted(torch.utils.data.Dataset[int]):
    """``range(N)`` that notes every index it reads."""

    def __init__(self) -> None:
        self.reads: list[int] = []

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> int:
        self.reads.append(int(index))
        return int(index)


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: dict[int, list[list[int]]] = defaultdict(list)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.ledger[self.trainer.global_step].append(batch.tolist())
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1)).sum() * 0.0
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit_counted(
    root: Path,
    callbacks: list[pl.Callback],
    batch_size: int = 4,
    ckpt: Path | None = None,
    save: Path | None = None,
    **trainer: Any,
) -> tuple[Recorder, Counted]:
    dataset, model = Counted(), Recorder()
    fit = pl.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **{"max_epochs": 3, **trainer},
    )
    fit.fit(model, datamodule=ResumableDataModule(dataset, batch_size=batch_size), ckpt_path=ckpt)
    if save is not None:
        fit.save_checkpoint(save)
    return model, dataset


def samples_of(ledger: dict[int, list[list[int]]]) -> list[int]:
    return [i for step in sorted(ledger) for batch in ledger[step] for i in batch]
