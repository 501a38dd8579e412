"""Lightning's progress bar after a mid-epoch resume: the epoch's total, counted from its start.

Lightning skips ``on_train_epoch_start`` when it resumes mid-epoch, and its bar caps the
total at the optimizer steps left (``max_steps``) as if nothing of the epoch were done, so a
resume at batch 20 of 32 with 20 steps left counted ``21/?`` up to ``32/?``. With the callback
(here the one a ``ResumableDataModule`` adds by itself) the bar shows ``20/32`` on to ``32/32``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset

from lightning_resumable_data import ResumableDataModule


class BarWatch(pl.Callback):
    """Notes the TQDM bar's title, count and total after each training batch."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int | None, int]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        bar = trainer.progress_bar_callback
        assert isinstance(bar, TQDMProgressBar)
        tqdm = bar.train_progress_bar
        title = str(tqdm.desc).rstrip(": ")
        self.seen.append((title, int(tqdm.n), tqdm.total, int(tqdm.initial)))


def _fit(root: Path, watch: BarWatch, ckpt: str | None = None, **limits: Any) -> None:
    torch.manual_seed(0)
    datamodule = ResumableDataModule(RandomDataset(32, 128), batch_size=4, seed=42)
    checkpoints = ModelCheckpoint(dirpath=root, save_last=True, every_n_train_steps=10)
    trainer = pl.Trainer(
        callbacks=[checkpoints, watch],  # TQDMProgressBar is Lightning's default bar
        default_root_dir=root,
        logger=False,
        enable_model_summary=False,
        accelerator="cpu",
        **limits,
    )
    trainer.fit(BoringModel(), datamodule=datamodule, ckpt_path=ckpt)


@pytest.mark.parametrize(
    ("limits", "total"),
    [({"max_steps": 40}, 32), ({"max_steps": 30}, 30)],
)
def test_the_bar_counts_the_resumed_epoch_from_its_start(
    tmp_path: Path, limits: dict[str, int], total: int
) -> None:
    """README's fit (32 batches an epoch), stopped at step 20 and resumed with ``ckpt_path``."""
    _fit(tmp_path, BarWatch(), max_steps=20)
    watch = BarWatch()
    _fit(tmp_path, watch, ckpt=str(tmp_path / "last.ckpt"), **limits)
    resumed = [seen for seen in watch.seen if seen[0] == "Epoch 0"]
    assert resumed, watch.seen
    for _, n, bar_total, initial in resumed:
        assert (bar_total, initial) == (total, 20), watch.seen
        assert bar_total is not None
        assert n <= bar_total
    # the bar ends full where the epoch (or max_steps) ends; this callback may see the last
    # count before the bar's own hook counts the batch
    assert resumed[-1][1] in (total - 1, total)
    later = [seen for seen in watch.seen if seen[0] == "Epoch 1"]
    assert all(seen[2] == limits["max_steps"] - 32 and seen[3] == 0 for seen in later)


def test_an_uncapped_resume_keeps_the_whole_epoch(tmp_path: Path) -> None:
    _fit(tmp_path, BarWatch(), max_steps=20)
    watch = BarWatch()
    _fit(tmp_path, watch, ckpt=str(tmp_path / "last.ckpt"), max_epochs=2)
    assert {(desc, bar_total) for desc, _, bar_total, _ in watch.seen} == {
        ("Epoch 0", 32),
        ("Epoch 1", 32),
    }
