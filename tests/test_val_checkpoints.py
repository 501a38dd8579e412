"""Checkpoints written at validations inside and at the end of an epoch resume exactly.

``ModelCheckpoint(every_n_epochs=1)`` with ``val_check_interval=0.5`` saves at every
validation end, one of them at the validation of an epoch's last batch: Lightning restores
that checkpoint as mid-epoch, and a fit resumed from it without validation would fetch a
batch past the epoch's end (found by a docs-only attack: a ``DataPositionError``). Every
such checkpoint must resume to the uninterrupted run's batches, whether the resumed fit
validates or not.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: dict[int, list[int]] = defaultdict(list)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.ledger[self.trainer.global_step] += batch.tolist()
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1)).sum() * 0.0
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val", float(batch.sum()))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(
    root: Path, ckpt: Path | None = None, save: bool = False, validate: bool = True
) -> Recorder:
    model = Recorder()
    callbacks = (
        [
            ModelCheckpoint(dirpath=root, filename="{step}", every_n_epochs=1, save_top_k=-1),
            ResumableDataCallback(),
        ]
        if save
        else []
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        val_check_interval=0.5 if validate else 1.0,
        num_sanity_val_steps=0,
        limit_val_batches=2 if validate else 0,
        logger=False,
        enable_checkpointing=save,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=callbacks,
    )
    dm = ResumableDataModule(range(96), val_dataset=range(16) if validate else None, batch_size=4)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    return model


@pytest.mark.parametrize("validate", [True, False])  # the resumed fit validates, or not
@pytest.mark.parametrize("step", [12, 24, 36, 48])  # mid-epoch and epoch-end validations
def test_a_validation_checkpoint_resumes_exactly(tmp_path: Path, step: int, validate: bool) -> None:
    whole = _fit(tmp_path / "whole", save=True)
    names = {p.name for p in (tmp_path / "whole").glob("*.ckpt")}
    assert {"step=12.ckpt", "step=24.ckpt", "step=48.ckpt"} <= names  # mid-epoch and end
    rest = _fit(tmp_path / "rest", ckpt=tmp_path / "whole" / f"step={step}.ckpt", validate=validate)
    assert dict(rest.ledger) == {s: b for s, b in whole.ledger.items() if s >= step}
