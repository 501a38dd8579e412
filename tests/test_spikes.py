"""``LossSpikeMonitor``: a spike's step, the samples of the steps up to it, and the fix.

A model whose loss jumps at a known step, trained as the docs show (a
``ResumableDataModule``, checkpoints every few steps): the monitor finds that step, names
the samples the model was given at it and the steps before, and its ``lrd skip`` command
resumes past them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_resumable_data import LossSpikeMonitor, ResumableDataModule
from lightning_resumable_data.cli import main
from lightning_resumable_data.lightning.spikes import robust_z

SPIKE = 23


class Spiky(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: dict[int, list[int]] = defaultdict(list)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        step = self.trainer.global_step
        self.ledger[step] += batch.tolist()
        noise = 0.01 * ((step * 7919) % 13)  # a wobbling loss, and one jump
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1)).sum() * 0.0 + 1.0 + noise
        return loss + (50.0 if step == SPIKE else 0.0)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_the_monitor_names_the_spike_its_samples_and_the_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monitor = LossSpikeMonitor(threshold=6.0, window=10, before=2)
    model = Spiky()
    checkpoints = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", filename="{step}", every_n_train_steps=5, save_top_k=-1
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=30,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[monitor, checkpoints],
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=ResumableDataModule(range(64), batch_size=4))
    (spike,) = monitor.spikes
    assert spike.step == SPIKE
    assert spike.z > 6
    assert {s: rows[0] for s, rows in spike.samples.items()} == {
        s: model.ledger[s] for s in (SPIKE - 2, SPIKE - 1, SPIKE)
    }
    step20 = tmp_path / "ckpt" / "step=20.ckpt"
    assert spike.command == f"lrd skip {step20} --steps 21:24 -o {tmp_path}/ckpt/step=20-skip.ckpt"
    assert main(spike.command.split()[1:]) == 0
    assert "steps 21 to 23 cut" in capsys.readouterr().out


def test_robust_z_and_bad_arguments() -> None:
    assert robust_z(1.0, [1.0] * 5) == 0.0
    assert robust_z(2.0, [1.0] * 5) == float("inf")
    with pytest.raises(ValueError, match="window >= 5"):
        LossSpikeMonitor(window=2)
