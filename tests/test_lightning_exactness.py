"""The Lightning integration is exact on the documented default path, and checks itself.

In-process ``Trainer`` runs (CPU, one process) in the exact form of issue reports:

* no ``ResumableDataCallback`` passed (the DataModule installs one) and a
  ``ModelCheckpoint(every_n_train_steps=5)``: a resume trains no batch twice;
* the run-time check (``verify="raise"``, the default) fires on each way a position and the
  trainer's counters have come apart, injected here as the defects once were: a checkpoint
  written one batch behind, a position loaded outside ``fit`` reaching the next fit, and a
  mid-epoch stop whose epoch Lightning counts as done;
* ``verify="warn"`` goes on with one warning; bad ``verify`` values are refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning_helpers import (
    IdsModel,
    every_5_steps,
    make_trainer,
    quiet_lightning,  # noqa: F401  (an autouse fixture)
)
from torch.utils.data import TensorDataset

from lightning_resumable_data import (
    DataPositionError,
    ResumableDataCallback,
    ResumableDataModule,
    ResumeWarning,
    StateMismatchError,
)
from lightning_resumable_data.lightning import _alignment as alignment_module
from lightning_resumable_data.lightning.progress import TrainedBatches


@pytest.mark.parametrize("limit", [None, 5])
def test_documented_default_resume_trains_no_batch_twice(tmp_path: Path, limit: int | None) -> None:
    """The issue's reproduction: 120 samples, batch 8, no callback passed, step-5 checkpoint."""
    dataset = TensorDataset(torch.arange(120))
    extra = {} if limit is None else {"limit_train_batches": limit}
    reference = IdsModel()
    make_trainer(tmp_path / "ref", max_epochs=3, **extra).fit(
        reference, datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    first = IdsModel()
    make_trainer(tmp_path / "a", every_5_steps(tmp_path / "a"), max_steps=5, **extra).fit(
        first, datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    resumed = IdsModel()
    make_trainer(tmp_path / "b", max_epochs=3, **extra).fit(
        resumed,
        datamodule=ResumableDataModule(dataset, batch_size=8),
        ckpt_path=tmp_path / "a" / "ckpt" / "step=5.ckpt",
    )
    assert first.seen + resumed.seen == reference.seen
    assert len(reference.seen) == (45 if limit is None else 15)
    if limit == 5:
        assert resumed.seen[0][:2] == (1, 0)  # epoch 1 starts: nothing of epoch 0 re-read


def test_the_check_fires_on_a_checkpoint_written_one_batch_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 1 injected: the saved position lags the trained batches by one."""
    dataset = TensorDataset(torch.arange(120))
    behind = TrainedBatches.__call__

    def one_behind(self: TrainedBatches) -> int | None:
        counted = behind(self)
        return None if counted is None else max(0, counted - 1)

    monkeypatch.setattr(TrainedBatches, "__call__", one_behind)
    make_trainer(tmp_path / "a", every_5_steps(tmp_path / "a"), max_steps=5).fit(
        IdsModel(), datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    monkeypatch.setattr(TrainedBatches, "__call__", behind)
    with pytest.raises(DataPositionError, match=r"global step 5.*5 batches trained in epoch 0"):
        make_trainer(tmp_path / "b", ResumableDataCallback(verify="raise"), max_epochs=1).fit(
            IdsModel(),
            datamodule=ResumableDataModule(dataset, batch_size=8),
            ckpt_path=tmp_path / "a" / "ckpt" / "step=5.ckpt",
        )


@pytest.mark.parametrize("same_trainer", [True, False])
def test_the_check_fires_on_a_position_loaded_outside_fit(
    tmp_path: Path, same_trainer: bool
) -> None:
    """Defect 2 injected: a checkpoint's position reaches a fit without ckpt_path."""
    dataset = TensorDataset(torch.arange(120))
    datamodule = ResumableDataModule(dataset, batch_size=8)
    trainer = make_trainer(
        tmp_path, every_5_steps(tmp_path), ResumableDataCallback(verify="raise"), max_steps=10
    )
    trainer.fit(IdsModel(), datamodule=datamodule)
    saved = torch.load(tmp_path / "ckpt" / "step=5.ckpt", weights_only=False)
    datamodule.trainer = None  # loaded outside any fit: what evaluating once did
    datamodule.load_state_dict(saved["ResumableDataModule"])
    if same_trainer:
        trainer.fit_loop.epoch_loop.max_steps = 12
    else:
        trainer = make_trainer(tmp_path / "new", ResumableDataCallback(verify="raise"), max_steps=3)
    with pytest.raises(DataPositionError, match="does not match the trainer's progress"):
        trainer.fit(IdsModel(), datamodule=datamodule)


def test_evaluating_a_checkpoint_does_not_move_the_next_fit(tmp_path: Path) -> None:
    """``fit -> test(ckpt_path=step 5) -> fit`` on the same trainer: the data goes on."""
    dataset = TensorDataset(torch.arange(120))
    datamodule = ResumableDataModule(
        dataset, batch_size=8, test_dataset=TensorDataset(torch.arange(8))
    )
    model = IdsModel()
    model.test_step = lambda *args: None  # type: ignore[method-assign]
    trainer = make_trainer(tmp_path, every_5_steps(tmp_path), max_steps=10)
    trainer.fit(model, datamodule=datamodule)
    trainer.test(model, datamodule=datamodule, ckpt_path=tmp_path / "ckpt" / "step=5.ckpt")
    trainer.fit_loop.epoch_loop.max_steps = 20
    trainer.fit(model, datamodule=datamodule)
    reference = IdsModel()
    make_trainer(tmp_path / "ref", max_steps=20).fit(
        reference, datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    assert model.seen == reference.seen


def _stopped_in_epoch_1(root: Path, model: IdsModel) -> TensorDataset:
    """``max_steps=12`` stops epoch 1 of 64 samples, batch 8, half-way; ``last.ckpt`` saved."""
    dataset = TensorDataset(torch.arange(64))
    last = ModelCheckpoint(dirpath=root / "ckpt", save_last=True)
    make_trainer(root, last, max_epochs=3, max_steps=12).fit(
        model, datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    return dataset


def _leave_lightning_one_epoch_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old behaviour: neither the checkpoint's counters nor Lightning's are aligned."""
    monkeypatch.setattr(alignment_module, "match_epoch_counters", lambda *args: False)
    monkeypatch.setattr(
        alignment_module, "align_progress", lambda trainer, epoch, consumed, step: consumed // step
    )


def test_the_check_fires_when_a_stopped_epoch_would_count_as_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 3 injected: Lightning's counters are left one epoch ahead of the data."""
    dataset = _stopped_in_epoch_1(tmp_path, IdsModel())
    _leave_lightning_one_epoch_ahead(monkeypatch)
    with pytest.raises(DataPositionError, match=r"batch 0 of epoch 2.*sample 32 of epoch 1"):
        make_trainer(tmp_path, ResumableDataCallback(verify="raise"), max_epochs=3).fit(
            IdsModel(),
            datamodule=ResumableDataModule(dataset, batch_size=8),
            ckpt_path=tmp_path / "ckpt" / "last.ckpt",
        )


def test_a_stopped_epoch_resumed_from_last_is_finished_and_counted(tmp_path: Path) -> None:
    """``max_steps`` stops epoch 1 half-way; ``max_epochs=3`` still trains 3 whole epochs."""
    dataset = TensorDataset(torch.arange(64))
    reference = IdsModel()
    make_trainer(tmp_path / "ref", max_epochs=3).fit(
        reference, datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    first, resumed = IdsModel(), IdsModel()
    _stopped_in_epoch_1(tmp_path, first)
    trainer = make_trainer(
        tmp_path, ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True), max_epochs=3
    )
    trainer.fit(resumed, datamodule=ResumableDataModule(dataset, batch_size=8), ckpt_path="last")
    assert first.seen + resumed.seen == reference.seen
    assert (trainer.current_epoch, trainer.global_step) == (3, 24)


def test_verify_warn_goes_on_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = _stopped_in_epoch_1(tmp_path, IdsModel())
    _leave_lightning_one_epoch_ahead(monkeypatch)
    with pytest.warns(ResumeWarning, match="Data position check failed") as caught:
        make_trainer(tmp_path, ResumableDataCallback(verify="warn"), max_epochs=3).fit(
            IdsModel(),
            datamodule=ResumableDataModule(dataset, batch_size=8),
            ckpt_path=tmp_path / "ckpt" / "last.ckpt",
        )
    assert sum("Data position check" in str(w.message) for w in caught) == 1


def test_verify_values_are_checked() -> None:
    with pytest.raises(ValueError, match="verify='loud' must be one of 'raise', 'warn', 'off'"):
        ResumableDataCallback(verify="loud")  # type: ignore[arg-type]


def test_a_tensor_is_a_dataset_and_an_iterable_dataset_is_refused_clearly() -> None:
    datamodule = ResumableDataModule(torch.arange(64), batch_size=8)
    datamodule.setup("fit")
    assert sorted(torch.cat(list(datamodule.train_dataloader())).tolist()) == list(range(64))

    class Stream(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(4))

    with pytest.raises(TypeError, match=r"IterableDataset \(Stream\).*map-style dataset"):
        ResumableDataModule(Stream())
    with pytest.raises(ValueError, match="is empty"):
        ResumableDataModule(torch.arange(0))


def test_ledger_json_is_plain() -> None:  # the records above compare as JSON would
    assert json.loads(json.dumps([(0, 1, [2])])) == [[0, 1, [2]]]


def test_a_position_past_an_int_limit_of_the_new_layout_is_refused_clearly(tmp_path: Path) -> None:
    """``limit_train_batches=5`` is 40 samples at batch 8, 20 at batch 4: 24 trained."""
    dataset = TensorDataset(torch.arange(64))
    every_step = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
    )
    make_trainer(tmp_path, every_step, max_steps=3, limit_train_batches=5).fit(
        IdsModel(), datamodule=ResumableDataModule(dataset, batch_size=8)
    )
    with pytest.raises(StateMismatchError, match="ends an epoch after 20 samples in this layout"):
        make_trainer(tmp_path / "b", max_epochs=2, limit_train_batches=5).fit(
            IdsModel(),
            datamodule=ResumableDataModule(dataset, batch_size=4),
            ckpt_path=tmp_path / "ckpt" / "step=3.ckpt",
        )


def test_the_callback_over_a_plain_dataloader_says_it_cannot_help(tmp_path: Path) -> None:
    model = IdsModel()
    loader = torch.utils.data.DataLoader(TensorDataset(torch.arange(16)), batch_size=8)
    with pytest.warns(ResumeWarning, match="found no lightning_resumable_data.StatefulDataLoader"):
        make_trainer(tmp_path, ResumableDataCallback(), max_epochs=1).fit(model, loader)
    assert len(model.seen) == 2
