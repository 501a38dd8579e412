"""Our ``StatefulDataLoader`` handed straight to ``trainer.fit``: no DataModule, no callback.

The situations of Lightning's own loop tests for resumable loaders (a sampler's epoch seen
on resume; a fit stopped by ``max_steps`` mid-epoch, resumed with more steps, with and
without gradient accumulation), asserted on the samples trained. torchdata's loader fails
the first on Lightning 2.6; torch's ``DataLoader`` the second (it cannot resume mid-epoch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from loader_helpers import IndexDataset
from torch.utils.data import Sampler

from lightning_resumable_data import StatefulDataLoader


class EpochRecordingSampler(Sampler[int]):
    """In order; records the epoch it was set to whenever an epoch's reading starts."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0
        self.epochs_read: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        self.epochs_read.append(self.epoch)
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


class Recorder(BoringModel):
    """Records (epoch, step, sample ids) of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 2)
        self.trained: list[tuple[int, int, list[int]]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> Any:
        self.trained.append((self.current_epoch, self.global_step, batch.tolist()))
        return self.layer(batch.float().unsqueeze(1)).sum()


def trainer(root: Path, **kwargs: Any) -> pl.Trainer:
    checkpoint = ModelCheckpoint(dirpath=root, save_last=True, save_top_k=-1)
    return pl.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        callbacks=[checkpoint],
        logger=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        **kwargs,
    )


def test_the_sampler_is_set_to_the_resumed_epoch_before_it_is_read(tmp_path: Path) -> None:
    first = EpochRecordingSampler(8)
    run = trainer(tmp_path, max_epochs=1)
    run.fit(Recorder(), StatefulDataLoader(IndexDataset(8), sampler=first, batch_size=2))
    resumed = EpochRecordingSampler(8)
    run = trainer(tmp_path, max_epochs=2)
    loader = StatefulDataLoader(IndexDataset(8), sampler=resumed, batch_size=2)
    run.fit(Recorder(), loader, ckpt_path=str(tmp_path / "last.ckpt"))
    assert first.epochs_read == [0]
    assert resumed.epochs_read == [1]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_fit_stopped_by_max_steps_continues_mid_epoch(tmp_path: Path, accumulate: int) -> None:
    model = Recorder()
    run = trainer(
        tmp_path, max_epochs=-1, max_steps=2 // accumulate, accumulate_grad_batches=accumulate
    )
    run.fit(model, StatefulDataLoader(IndexDataset(4)))
    run = trainer(
        tmp_path, max_epochs=-1, max_steps=4 // accumulate, accumulate_grad_batches=accumulate
    )
    run.fit(model, StatefulDataLoader(IndexDataset(4)), ckpt_path=str(tmp_path / "last.ckpt"))
    assert [ids for _, _, ids in model.trained] == [[0], [1], [2], [3]]  # nothing replayed
    assert [(epoch, step) for epoch, step, _ in model.trained[2:]] == [
        (0, i // accumulate) for i in (2, 3)
    ]
    assert run.current_epoch == 1
