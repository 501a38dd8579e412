"""What a docs-only reviewer found `lrd inspect` and the temperature got wrong (issues 23, 30).

Each test is in the docs' own form: a real ``Trainer`` fit as docs/lightning.md and
docs/mixing.md show it, then ``lrd inspect`` as docs/cli.md shows it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from lightning_helpers import make_trainer
from lightning_helpers import quiet_lightning as quiet_lightning  # an autouse fixture

from lightning_resumable_data import (
    DistributedSampler,
    MixtureDataset,
    MixturePhase,
    MixtureSampler,
    ResumableDataCallback,
    ResumableDataModule,
    StatefulDataLoader,
)
from lightning_resumable_data.cli import main
from lightning_resumable_data.index.mixture import mixture_probabilities


def inspect(capsys: pytest.CaptureFixture[str], path: Path, *flags: str) -> str:
    code = main(["inspect", str(path), *flags])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_inspect_finds_the_loader_a_fit_was_given_without_a_datamodule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md: it finds "a StatefulDataLoader state anywhere in the checkpoint:
    Lightning's fit loop" (Lightning keeps it under a ``state_dict`` key)."""
    data = RandomDataset(32, 30)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=3)
    loader = StatefulDataLoader(data, batch_size=4, sampler=sampler)
    trainer = make_trainer(tmp_path, ResumableDataCallback(), max_steps=5)
    trainer.fit(BoringModel(), train_dataloaders=loader)
    trainer.save_checkpoint(tmp_path / "loader.ckpt")
    report = json.loads(inspect(capsys, tmp_path / "loader.ckpt", "--json"))
    assert report["found_at"] == "loops.fit_loop.state_dict.combined_loader[0]"
    assert (report["epoch"], report["consumed"]) == (0, 20)
    assert report["resume"]["mode"] == "exact"


def _mixture() -> dict[str, Any]:
    return {
        "web": RandomDataset(32, 64),
        "code": RandomDataset(32, 24),
        "math": RandomDataset(32, 12),
    }


def test_inspect_names_a_phase_from_step_0_as_a_phase(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase at ``start_step=0`` replaces the initial weights: it is shown as the phase it
    is, numbered as configured, and counted in the schedule."""
    first = {"web": 0.1, "code": 0.2, "math": 0.7}
    later = {"web": 0.4, "code": 0.4, "math": 0.2}
    module = ResumableDataModule(
        _mixture(), batch_size=4, seed=5, weights={"web": 0.5, "code": 0.3, "math": 0.2}
    )
    phases = [MixturePhase(start_step=0, weights=first), MixturePhase(start_step=5, weights=later)]
    trainer = make_trainer(tmp_path, ResumableDataCallback(phases=phases), max_steps=3)
    trainer.fit(BoringModel(), datamodule=module)
    trainer.save_checkpoint(tmp_path / "early.ckpt")
    text = inspect(capsys, tmp_path / "early.ckpt")
    assert "mixture      phase 1 (start_step 0) in force since sample 0 of epoch 0" in text
    report = json.loads(inspect(capsys, tmp_path / "early.ckpt", "--json"))["mixture"]
    assert report["phase"]["weights"] == first
    assert report["next_phase"]["label"] == "phase 2 (start_step 5)"
    assert report["phases"] == 3  # the initial weights, and the two phases


@pytest.mark.parametrize("temperature", [5e-324, 1e-310, 1e-300])
def test_a_tiny_temperature_is_the_argmax(temperature: float) -> None:
    """``p ~ w ** (1 / temperature)``: a tiny temperature (subnormal ones too) is the argmax,
    ties shared; it used to give NaN and fail at the first use."""
    assert mixture_probabilities([0.6, 0.3, 0.1], temperature).tolist() == [1.0, 0.0, 0.0]
    assert mixture_probabilities([0.5, 0.5], temperature).tolist() == [0.5, 0.5]
    sources = {"web": range(600), "code": range(300), "math": range(100)}
    weights = {"web": 0.6, "code": 0.3, "math": 0.1}
    sampler = MixtureSampler(
        MixtureDataset(sources), weights, num_replicas=1, rank=0, temperature=temperature
    )
    assert sampler.source_counts(1000, epoch=0) == {"web": 1000, "code": 0, "math": 0}


def test_set_weights_with_a_tiny_temperature_trains_on(tmp_path: Path) -> None:
    """docs/mixing.md: ``set_weights(weights, temperature=...)`` during ``fit``; a subnormal
    temperature used to crash the fit steps later ("probabilities [nan, nan]")."""
    callback = ResumableDataCallback()

    class Change(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step == 2:
                callback.set_weights({"web": 0.5, "code": 0.5}, temperature=5e-324)

    module = ResumableDataModule(
        {"web": RandomDataset(32, 64), "code": RandomDataset(32, 24)}, batch_size=4, seed=5
    )
    trainer = make_trainer(tmp_path, callback, Change(), max_steps=6)
    trainer.fit(BoringModel(), datamodule=module)
    assert trainer.global_step == 6


def test_inspect_resumes_a_loader_state_whose_first_change_replaced_the_initial_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A loader state saved as ``fabric.save(path, {"data": loader})`` keeps it, over a mixture
    whose weights were changed at position 0 (a phase from the start): the dry run declares
    the saved phases again, so it reports the exact resume the package would make."""
    import torch

    mixture = MixtureDataset({"web": range(64), "code": range(24), "math": range(12)})
    sampler = MixtureSampler(mixture, {"web": 0.6, "code": 0.3, "math": 0.1}, 1, 0, seed=3)
    sampler.update_weights({"web": 0.2, "code": 0.2, "math": 0.6}, epoch=0, position=0)
    sampler.update_weights({"web": 0.1, "code": 0.2, "math": 0.7}, epoch=0, position=40)
    loader = StatefulDataLoader(mixture, batch_size=4, sampler=sampler)
    batches = iter(loader)
    for _ in range(5):
        next(batches)
    torch.save({"data": loader.state_dict()}, tmp_path / "fabric.ckpt")
    report = json.loads(inspect(capsys, tmp_path / "fabric.ckpt", "--json"))
    assert report["found_at"] == "data"
    assert (report["resume"]["mode"], report["resume"]["ok"]) == ("exact", True)
    totals = report["mixture"]["epoch_totals"]
    assert totals == sampler.source_counts(100, epoch=0)
