"""Lightning sees a validation or test loader exactly when the DataModule has that dataset."""

from __future__ import annotations

import copy
import pickle
import warnings
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities.model_helpers import is_overridden
from loader_helpers import IndexDataset

from lightning_resumable_data import ResumableDataModule

NO_VAL_STEP = "val_dataloader` but have no `validation_step"


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.validated: list[int] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss: torch.Tensor = self.layer(batch.float().unsqueeze(1)).pow(2).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ValidatedModel(Model):
    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.validated += batch.tolist()


def fit(model: Model, dm: ResumableDataModule) -> list[str]:
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=dm)
    return [str(w.message) for w in caught]


def test_no_validation_dataset_no_validation_step_no_warning() -> None:
    dm = ResumableDataModule(IndexDataset(8), batch_size=4)
    assert not is_overridden("val_dataloader", dm)
    assert not is_overridden("test_dataloader", dm)
    assert dm.val_dataloader() == dm.test_dataloader() == []  # calling it still works
    assert not [m for m in fit(Model(), dm) if NO_VAL_STEP in m]


def test_validation_dataset_is_validated() -> None:
    dm = ResumableDataModule(IndexDataset(8), val_dataset=IndexDataset(6), batch_size=4)
    assert is_overridden("val_dataloader", dm)
    model = ValidatedModel()
    fit(model, dm)
    assert sorted(model.validated) == list(range(6))


def test_validation_dataset_set_in_setup_is_validated_without_warnings() -> None:
    class Late(ResumableDataModule):
        def setup(self, stage: str) -> None:
            self.val_dataset = IndexDataset(5)

    dm = Late(IndexDataset(8), batch_size=4)
    assert is_overridden("val_dataloader", dm)  # setup() may assign it: always shown
    model = ValidatedModel()
    assert not [m for m in fit(model, dm) if "validation_step" in m]
    assert sorted(model.validated) == list(range(5))
    dm.val_dataset = None
    assert is_overridden("val_dataloader", dm)
    plain = ResumableDataModule(IndexDataset(8), batch_size=4)
    plain.val_dataset = IndexDataset(3)  # assigned before the fit: shown, then hidden again
    assert is_overridden("val_dataloader", plain)
    plain.val_dataset = None
    assert not is_overridden("val_dataloader", plain)


def test_a_subclass_hook_is_never_hidden() -> None:
    class Own(ResumableDataModule):
        def val_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(IndexDataset(3), batch_size=3)

    dm = Own(IndexDataset(8), batch_size=4)
    assert is_overridden("val_dataloader", dm)
    model = ValidatedModel()
    fit(model, dm)
    assert sorted(model.validated) == [0, 1, 2]


@pytest.mark.parametrize("clone", [copy.deepcopy, lambda dm: pickle.loads(pickle.dumps(dm))])
def test_hidden_hooks_survive_copies(clone: Any) -> None:
    dm = clone(ResumableDataModule(IndexDataset(8), batch_size=4))
    assert not is_overridden("val_dataloader", dm)
    assert dm.val_dataloader() == []
    dm.val_dataset = IndexDataset(2)
    assert is_overridden("val_dataloader", dm)
