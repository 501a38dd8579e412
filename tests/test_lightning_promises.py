"""Lightning promise sentences of the docs that had no test (tests/PROMISES.md, `none`).

Real, tiny ``Trainer`` runs on CPU; each is checked against an uninterrupted run or a run
under other arguments, never against the callback's own bookkeeping.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning_helpers import IdsModel as RecordingModel
from lightning_helpers import (
    MyDataModule,
    every_5_steps,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import TensorDataset

from lightning_resumable_data import (
    DataPositionError,
    DistributedSampler,
    ResumableDataCallback,
    ResumableDataModule,
    ResumeWarning,
)
from lightning_resumable_data.cli import main as lrd_main
from lightning_resumable_data.seeding import step_seeds


class IdsModel(RecordingModel):
    """Records every training batch's sample ids, and one draw from torch's global RNG."""

    def __init__(self) -> None:
        super().__init__()
        self.draws: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.draws.append(float(torch.rand(())))
        return super().training_step(batch, batch_idx)


DATASET = TensorDataset(torch.arange(64))


def _position_loaded_outside_fit(root: Path) -> ResumableDataModule:
    """A datamodule holding a step-5 position that no fit restored (a misuse to catch)."""
    datamodule = ResumableDataModule(DATASET, batch_size=8)
    make_trainer(root / "a", every_5_steps(root / "a"), max_steps=5).fit(
        IdsModel(), datamodule=datamodule
    )
    saved = torch.load(root / "a" / "ckpt" / "step=5.ckpt", weights_only=False)
    datamodule.trainer = None
    datamodule.load_state_dict(saved["ResumableDataModule"])
    return datamodule


def test_verify_raise_is_the_default(tmp_path: Path) -> None:
    """docs/lightning.md: It checks itself (`verify="raise"`, the default)."""
    # PROMISES.md L18
    datamodule = _position_loaded_outside_fit(tmp_path)
    trainer = make_trainer(tmp_path / "b", ResumableDataCallback(), max_steps=2)
    with pytest.raises(DataPositionError, match="does not match the trainer's progress"):
        trainer.fit(IdsModel(), datamodule=datamodule)


def test_verify_off_skips_the_check(tmp_path: Path) -> None:
    """docs/lightning.md: `verify="off"` skips the check."""
    # PROMISES.md L22
    datamodule = _position_loaded_outside_fit(tmp_path)
    model = IdsModel()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResumeWarning)
        trainer = make_trainer(tmp_path / "b", ResumableDataCallback(verify="off"), max_steps=2)
        trainer.fit(model, datamodule=datamodule)  # neither raises nor warns
    assert len(model.seen) == 2
    reference = IdsModel()
    make_trainer(tmp_path / "ref", max_steps=7).fit(
        reference, datamodule=ResumableDataModule(DATASET, batch_size=8)
    )
    assert [ids for _, _, ids in model.seen] != [ids for _, _, ids in reference.seen[:2]]


def test_an_explicit_training_seed_keys_the_training_draws(tmp_path: Path) -> None:
    """docs/randomness.md: `ResumableDataCallback(training_seed=...)` sets it explicitly."""
    # PROMISES.md Ra32

    def draws(training_seed: int, data_seed: int) -> list[float]:
        pl.seed_everything(data_seed + 100, verbose=False)
        model = IdsModel()
        callback = ResumableDataCallback(training_seed=training_seed)
        make_trainer(tmp_path, callback, max_steps=3).fit(
            model, datamodule=ResumableDataModule(DATASET, batch_size=8, seed=data_seed)
        )
        return model.draws

    got = draws(1234, data_seed=0)
    # The documented key: (training seed, global step, rank 0, micro-batch 0) seeds torch.
    expected = [
        float(torch.rand((), generator=torch.Generator().manual_seed(step_seeds(1234, s, 0).torch)))
        for s in range(3)
    ]
    assert got == expected
    assert draws(1234, data_seed=5) == got  # neither the data seed nor seed_everything
    assert draws(99, data_seed=0) != got


def test_seed_everything_leaves_the_data_order_alone(tmp_path: Path) -> None:
    """migration/lightning.md: the data seed is the DataModule's `seed=`, not seed_everything's."""
    # PROMISES.md ML3

    def order(global_seed: int, data_seed: int) -> list[tuple[int, int, list[int]]]:
        pl.seed_everything(global_seed, verbose=False)
        model = IdsModel()
        make_trainer(tmp_path, max_epochs=2).fit(
            model, datamodule=ResumableDataModule(DATASET, batch_size=8, seed=data_seed)
        )
        return model.seen

    first = order(1, data_seed=5)
    assert order(2, data_seed=5) == first
    assert order(1, data_seed=6) != first


@pytest.mark.parametrize("limit", [None, 5])
def test_own_datamodule_with_the_callback_resumes_exactly(
    tmp_path: Path, limit: int | None
) -> None:
    """docs/lightning.md, migration/lightning.md: own LightningDataModule + loader + callback."""
    # PROMISES.md L11, ML9 (kept at the trained batch; epochs end with limit_train_batches)
    extra = {} if limit is None else {"limit_train_batches": limit}
    reference = IdsModel()
    make_trainer(tmp_path / "ref", ResumableDataCallback(), max_epochs=3, **extra).fit(
        reference, datamodule=MyDataModule()
    )
    # The uninterrupted order is the documented one: epoch e is the sampler's epoch e.
    sampler = DistributedSampler(DATASET, 1, 0, seed=42)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        order = list(sampler)
        batches = [ids for e, _, ids in reference.seen if e == epoch]
        assert batches == [order[i : i + 8] for i in range(0, 8 * len(batches), 8)]
        assert len(batches) == (8 if limit is None else 5)
    first, resumed = IdsModel(), IdsModel()
    root = tmp_path / "a"
    make_trainer(root, ResumableDataCallback(), every_5_steps(root), max_steps=5, **extra).fit(
        first, datamodule=MyDataModule()
    )
    make_trainer(tmp_path / "b", ResumableDataCallback(), max_epochs=3, **extra).fit(
        resumed, datamodule=MyDataModule(), ckpt_path=root / "ckpt" / "step=5.ckpt"
    )
    assert first.seen + resumed.seen == reference.seen


class MyResumableDataModule(ResumableDataModule):
    """A user's subclass: Lightning saves its state under the subclass's name."""


def test_lrd_inspect_finds_a_subclass_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md: the `ResumableDataModule` state (under the class name; subclasses found too)."""
    # PROMISES.md Cl3
    make_trainer(tmp_path, every_5_steps(tmp_path), max_steps=5).fit(
        IdsModel(), datamodule=MyResumableDataModule(DATASET, batch_size=8, seed=3)
    )
    checkpoint = tmp_path / "ckpt" / "step=5.ckpt"
    assert "MyResumableDataModule" in torch.load(checkpoint, weights_only=False)
    assert lrd_main(["inspect", str(checkpoint), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["found_at"] == "MyResumableDataModule"
    assert (report["epoch"], report["consumed"], report["batches_trained"]) == (0, 40, 5)
    assert report["sampler"]["fingerprint"]["seed"] == 3
    assert report["resume"]["ok"] is True
