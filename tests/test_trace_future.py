"""``lrd trace`` of a step after the checkpoint: what the saved layout will read, exactly.

A planned step is computed from the checkpoint alone (its position, layout and recorded
cuts); it must equal what a real ``Trainer`` then trains, with accumulation, across epoch
ends, and after ``lrd skip`` and ``lrd quarantine`` edited the checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from cut_helpers import Recorder

from lightning_resumable_data import ResumableDataModule
from lightning_resumable_data.cli import main
from lightning_resumable_data.cli.trace import load, trace
from lightning_resumable_data.lightning.find import find_sample


def _fit(root: Path, ckpt: Path | None = None, save: Path | None = None, **kw: Any) -> Recorder:
    model = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        accumulate_grad_batches=2,
        **{"max_epochs": 3, **kw},
    )
    trainer.fit(model, datamodule=ResumableDataModule(range(50), batch_size=3), ckpt_path=ckpt)
    if save is not None:
        trainer.save_checkpoint(save)
    return model


def _traced(checkpoint: Path, step: int) -> tuple[bool, list[list[int]]]:
    report = trace(checkpoint, step)
    return report["planned"], [b["ranks"][0]["indices"] for b in report["batches"]]


def test_planned_steps_are_what_the_trainer_then_trains(tmp_path: Path) -> None:
    seven = tmp_path / "seven.ckpt"
    _fit(tmp_path / "a", max_steps=7, save=seven)
    rest = _fit(tmp_path / "b", ckpt=seven)  # 17 batches an epoch: 9 steps, the last short
    assert sorted(rest.ledger) == list(range(7, 27))
    for step, batches in rest.ledger.items():
        assert _traced(seven, step) == (True, batches), step
    assert _traced(seven, 6)[0] is False  # a recorded step is not planned
    run = load(seven, False)  # lrd find: the same steps, planned, for every sample
    for sample in range(50):
        hits = find_sample(run.sampler, run.history, sample, epochs=(0, 3), position=run.position)
        ahead = [hit.step for hit in hits if hit.planned]
        assert ahead == sorted(s for s, b in rest.ledger.items() for x in b if sample in x)
        assert all(hit.step < 7 for hit in hits if not hit.planned)


def test_planned_steps_follow_lrd_skip_and_lrd_quarantine(tmp_path: Path) -> None:
    seven = tmp_path / "seven.ckpt"
    _fit(tmp_path / "a", max_steps=7, save=seven)
    for name, argv in (
        ("skip", ["skip", str(seven), "--steps", "8:11", "-o"]),
        ("quarantine", ["quarantine", str(seven), "--samples", "4,9,33", "-o"]),
    ):
        edited = tmp_path / f"{name}.ckpt"
        assert main([*argv, str(edited)]) == 0
        rest = _fit(tmp_path / name, ckpt=edited)
        for step, batches in rest.ledger.items():
            assert _traced(edited, step) == (True, batches), (name, step)
