"""``lrd trace`` names what every optimizer step trained: equal to a real run's ledger.

Each test trains a real ``Trainer`` with the documented defaults (a ``ResumableDataModule``,
no explicit callback unless phases or online mixing need one), records every micro-batch
the model trained with its ``global_step``, stops, resumes under another batch size, and
then traces every step of the run from the last checkpoint: per step, the samples must be
the ledger's, batch by batch. A sample's value is its identity (``range`` data; in a
mixture, source ``b``'s samples are ``1000 +`` its index).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any
from unittest.mock import patch

import lightning.pytorch as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_resumable_data import (
    DistributedSampler,
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
)
from lightning_resumable_data.cli import main
from lightning_resumable_data.cli.find import find
from lightning_resumable_data.cli.trace import load, trace
from lightning_resumable_data.lightning import _mixture_inverse
from lightning_resumable_data.lightning.find import find_sample
from lightning_resumable_data.lightning.history import DataHistory, StepBatch
from lightning_resumable_data.lightning.trace import trace_step

Ledger = dict[int, list[list[int]]]


class Recorder(pl.LightningModule):
    """Trains nothing; notes each micro-batch under the step it belongs to."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: Ledger = defaultdict(list)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.ledger[self.trainer.global_step].append(batch.tolist())
        loss: torch.Tensor = self.layer(batch.float().view(-1, 1)).sum() * 0.0
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _trainer(root: Path, callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **kwargs,
    )


def _run(
    tmp_path: Path,
    make_module: Any,
    make_callbacks: Any,
    first: dict[str, Any],
    second: dict[str, Any],
) -> tuple[Ledger, Path]:
    """Train with ``first`` settings, checkpoint, resume with ``second``; the ledger."""
    ledger: Ledger = defaultdict(list)
    stopped = tmp_path / "stopped.ckpt"
    model = Recorder()
    trainer = _trainer(tmp_path, make_callbacks(), **first["trainer"])
    trainer.fit(model, datamodule=make_module(first["batch_size"]))
    trainer.save_checkpoint(stopped)
    for step, batches in model.ledger.items():
        ledger[step] += batches
    model = Recorder()
    trainer = _trainer(tmp_path, make_callbacks(), **second["trainer"])
    trainer.fit(model, datamodule=make_module(second["batch_size"]), ckpt_path=stopped)
    last = tmp_path / "last.ckpt"
    trainer.save_checkpoint(last)
    for step, batches in model.ledger.items():
        ledger[step] += batches
    return ledger, last


def _traced(checkpoint: Path, step: int) -> list[list[int]]:
    report = trace(checkpoint, step)
    out = []
    for batch in report["batches"]:
        (rank,) = batch["ranks"]
        if "sources" in rank:
            out.append(
                [
                    index + (1000 if source == "b" else 0)
                    for source, index in zip(rank["sources"], rank["source_indices"], strict=True)
                ]
            )
        else:
            out.append(rank["indices"])
    return out


def test_every_step_of_a_run_resumed_under_another_batch_size(tmp_path: Path) -> None:
    """Single dataset, accumulating 2, stopped mid-epoch, resumed with batch 3: 3 epochs."""

    def module(batch_size: int) -> ResumableDataModule:
        return ResumableDataModule(range(50), batch_size=batch_size)

    ledger, last = _run(
        tmp_path,
        module,
        list,
        {"batch_size": 4, "trainer": {"max_steps": 7, "accumulate_grad_batches": 2}},
        {"batch_size": 3, "trainer": {"max_epochs": 3, "accumulate_grad_batches": 2}},
    )
    assert sum(len(b) for batches in ledger.values() for b in batches) == 150
    for step, batches in sorted(ledger.items()):
        assert _traced(last, step) == batches, f"step {step}"
    for sample in range(50):  # lrd find is the inverse: every step that trained it
        report = find(last, sample)
        steps = sorted(s for s, batches in ledger.items() for b in batches if sample in b)
        done = [hit for hit in report["trained"] if not hit["planned"]]
        assert [hit["step"] for hit in done] == steps, sample
        assert [hit["epoch"] for hit in done] == [0, 1, 2]
        assert [hit["epoch"] for hit in report["trained"] if hit["planned"]] == [3]  # next
    saved = torch.load(last, weights_only=False)["callbacks"]["ResumableDataCallback"]
    runs = DataHistory.from_state(saved["data_history"]).runs
    assert len(runs) <= 2 * 3 + 1, runs  # a run per epoch and layout, not one per step
    assert all(run[5] == 2 for run in runs)  # accumulating 2


def test_every_step_of_a_mixture_with_a_phase_and_online_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two sources, a phase at step 4, online changes in epoch 0 and 2, a resume between."""

    class Online(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            found = [c for c in trainer.callbacks if isinstance(c, ResumableDataCallback)]  # type: ignore[attr-defined]
            callback = found[0]
            if trainer.global_step in (2, 31):
                callback.set_weights({"a": 1.0, "b": float(trainer.global_step)})

    def module(batch_size: int) -> ResumableDataModule:
        sources: dict[str, Any] = {"a": range(30), "b": range(1000, 1020)}
        return ResumableDataModule(sources, batch_size=batch_size)

    def callbacks() -> list[pl.Callback]:
        phase = MixturePhase(start_step=4, weights={"a": 1.0, "b": 3.0})
        return [ResumableDataCallback(phases=[phase]), Online()]

    ledger, last = _run(
        tmp_path,
        module,
        callbacks,
        {"batch_size": 4, "trainer": {"max_steps": 9}},
        {"batch_size": 5, "trainer": {"max_epochs": 4}},
    )
    history = torch.load(last, weights_only=False)["callbacks"]["ResumableDataCallback"]
    assert len(DataHistory.from_state(history["data_history"]).changes) == 2
    for step, batches in sorted(ledger.items()):
        assert _traced(last, step) == batches, f"step {step}"
    run = load(last, False)  # find is the inverse of trace: every sample, every step
    traced = defaultdict(list)
    for step in ledger:
        for batch in trace_step(run.sampler, run.history, step):
            (rank,) = batch.ranks
            for at, index in zip(rank.positions.tolist(), rank.indices.tolist(), strict=True):
                traced[index].append((batch.batch.epoch, step, 0, at))
    for source, size, value in (("a", 30, 0), ("b", 20, 1000)):
        for local in range(size):
            hits = find_sample(run.sampler, run.history, local, source=source)
            with patch.object(_mixture_inverse, "BISECTION_COST", 0):  # the inverse, not a scan
                assert find_sample(run.sampler, run.history, local, source=source) == hits
            index = local + (0 if source == "a" else 30)
            assert [(h.epoch, h.step, h.rank, h.position) for h in hits] == traced[index]
            steps = [s for s, batches in ledger.items() for b in batches for v in b if v == value]
            assert [hit.step for hit in hits] == sorted(steps), (source, local)
            value += 1
    assert sum(len(hits) for hits in traced.values()) == sum(
        len(b) for batches in ledger.values() for b in batches
    )
    assert main(["find", str(last), "--sample", "3"]) == 2  # lrd find: by source
    err = capsys.readouterr().err
    assert "trained over a mixture (sources a, b)" in err
    assert "pass --source NAME (one of a, b) with --sample I" in err
    assert main(["find", str(last), "--sample", "3", "--source", "b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = [vars(h) for h in find_sample(run.sampler, run.history, 3, source="b")]
    assert [hit for hit in report["trained"] if not hit["planned"]] == expected
    assert (report["source"], report["sampler"]) == ("b", "MixtureSampler")
    assert main(["find", str(last), "--sample", "3", "--source", "b", "--epochs", "1:3"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith(f"sample b:3 of {last} (MixtureSampler): trained ")
    assert text[0].endswith("(epochs 1 to 2)")
    shown = [h for h in expected if 1 <= h["epoch"] < 3]
    assert [line.split(",")[0] for line in text[1:]] == [f"  epoch {h['epoch']}" for h in shown]
    assert main(["find", str(last), "--sample", "3", "--source", "c"]) == 2
    assert "the mixture has no source 'c'; its sources are ['a', 'b']" in capsys.readouterr().err


def test_lrd_trace_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def module(batch_size: int) -> ResumableDataModule:
        return ResumableDataModule(range(20), batch_size=batch_size)

    ledger, last = _run(
        tmp_path,
        module,
        list,
        {"batch_size": 4, "trainer": {"max_steps": 3}},
        {"batch_size": 4, "trainer": {"max_steps": 6}},
    )
    assert main(["trace", str(last), "--step", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [b["ranks"][0]["indices"] for b in report["batches"]] == ledger[4]
    assert main(["trace", str(last), "--step", "4"]) == 0
    text = capsys.readouterr().out
    assert "rank 0: indices " + " ".join(map(str, ledger[4][0])) in text
    assert main(["trace", str(last), "--step", "6"]) == 0  # not trained yet: planned
    assert "(planned: after the checkpoint" in capsys.readouterr().out
    sample = ledger[4][0][0]
    assert main(["find", str(last), "--sample", str(sample)]) == 0
    out = capsys.readouterr().out
    assert f"sample {sample} of {last} (DistributedSampler): trained" in out
    assert "step 4, rank 0" in out
    assert main(["find", str(last), "--sample", "20"]) == 2
    assert "sample 20 is out of range for a dataset of 20 samples" in capsys.readouterr().err
    assert main(["find", str(last), "--sample", "3", "--source", "a"]) == 2
    assert "names a source of a mixture, but this run read a single" in capsys.readouterr().err
    for bad, says in (("2:1", "is empty or negative"), ("x", "is not an epoch range")):
        assert main(["find", str(last), "--sample", "3", "--epochs", bad]) == 2
        assert f"--epochs {bad!r} {says}" in capsys.readouterr().err
    assert main(["find", str(last), "--sample", str(sample), "--epochs", "1:3"]) == 0
    lines = capsys.readouterr().out.splitlines()  # steps 6 to 9 of epoch 1, then epoch 2
    assert lines[0].endswith(", planned 2 times after (epochs 1 to 2)")
    assert [line.endswith(", planned") for line in lines[1:]] == [True, True]
    assert [line.split(",")[0] for line in lines[1:]] == ["  epoch 1", "  epoch 2"]
    assert main(["inspect", str(last), "--json"]) == 0  # lrd inspect says what is recorded
    history = json.loads(capsys.readouterr().out)["history"]
    assert history == {  # 2 epochs, nothing cut
        "first_step": 0,
        "last_step": 5,
        "runs": 2,
        "online_changes": 0,
        "skipped_steps": [],
        "skipped_samples": {},
        "quarantined": [],
    }
    assert main(["inspect", str(last)]) == 0
    assert "history      steps 0 to 5 recorded (2 runs): lrd trace" in capsys.readouterr().out
    older = torch.load(last, weights_only=False)
    del older["callbacks"]["ResumableDataCallback"]["data_history"]  # a release before 0.4
    torch.save(older, tmp_path / "older.ckpt")
    assert main(["inspect", str(tmp_path / "older.ckpt")]) == 0
    assert "history      none: written without a ResumableDataCallback" in capsys.readouterr().out
    assert main(["trace", str(tmp_path / "older.ckpt"), "--step", "1"]) == 2
    assert "holds no data history" in capsys.readouterr().err


@st.composite
def _batches(draw: st.DrawFn) -> list[tuple[int, int, int, int, int, int, int | None]]:
    """What a run's batches report: epochs, accumulation, short steps, layout changes."""
    out: list[tuple[int, int, int, int, int, int, int | None]] = []
    step = 0
    for epoch in range(draw(st.integers(1, 3))):
        consumed = 0
        world, batch = draw(st.integers(1, 3)), draw(st.integers(1, 4))
        accumulate, limit = draw(st.integers(1, 3)), draw(st.sampled_from([None, 40]))
        batches = draw(st.integers(1, 9))
        for m in range(batches):
            if m and draw(st.integers(0, 7)) == 0:  # a resume under another layout
                world, batch = draw(st.integers(1, 3)), draw(st.integers(1, 4))
                if m % accumulate:
                    step += 1  # resumes happen at step boundaries
                accumulate = draw(st.integers(1, 3))
                out.append((step, epoch, consumed, world, batch, accumulate, limit))
                consumed += world * batch
                continue
            out.append((step, epoch, consumed, world, batch, accumulate, limit))
            consumed += world * batch
            if (m + 1) % accumulate == 0 or m == batches - 1:
                step += 1
    return out


@settings(max_examples=200, deadline=None)
@given(_batches())
def test_history_gives_back_every_step_s_batches(
    batches: list[tuple[int, int, int, int, int, int, int | None]],
) -> None:
    """Whatever the pattern, each step's batches are the ones observed with that step."""
    history = DataHistory()
    for step, epoch, consumed, world, batch, accumulate, limit in batches:
        history.observe(
            step, epoch, consumed, world=world, batch_size=batch, accumulate=accumulate, limit=limit
        )
    restored = DataHistory.from_state(json.loads(json.dumps(history.state_dict())))
    for step in {b[0] for b in batches} | {batches[-1][0] + 1}:
        expected = [StepBatch(e, c, w, b, lim) for s, e, c, w, b, _, lim in batches if s == step]
        assert restored.step_batches(step) == expected
    assert len(history.runs) <= len(batches)


def test_history_starts_a_run_where_the_epoch_limit_changes() -> None:
    """A resume that changes only ``limit_train_batches`` changes where the epoch ends."""
    history = DataHistory()
    history.observe(0, 0, 0, world=1, batch_size=2, accumulate=1, limit=None)
    history.observe(1, 0, 2, world=1, batch_size=2, accumulate=1, limit=8)
    assert [run[-1] for run in history.runs] == [0, 8]
    assert history.step_batches(1) == [StepBatch(0, 2, 1, 2, 8)]


def test_history_forgets_steps_a_restarted_fit_trains_again() -> None:
    history = DataHistory()
    for step in range(6):
        history.observe(step, 0, 2 * step, world=1, batch_size=2, accumulate=1)
    history.observe(3, 0, 6, world=1, batch_size=2, accumulate=1)  # a fit from step 3 again
    assert history.last_step == 3
    assert history.step_batches(3) == [StepBatch(0, 6, 1, 2)]


@pytest.mark.parametrize("state", [{"runs": []}, {"fields": [], "runs": []}, [1], "x"])
def test_a_malformed_history_is_refused(state: object) -> None:
    with pytest.raises(ValueError, match="data history of this checkpoint is malformed"):
        DataHistory.from_state(state)


def test_a_loader_rebuilt_every_epoch(tmp_path: Path) -> None:
    """``reload_dataloaders_every_n_epochs=1``: the batches of later epochs too (a user's find)."""

    def module(batch_size: int) -> ResumableDataModule:
        return ResumableDataModule(range(40), batch_size=batch_size, seed=5)

    ledger, last = _run(
        tmp_path,
        module,
        list,
        {"batch_size": 4, "trainer": {"max_steps": 3, "reload_dataloaders_every_n_epochs": 1}},
        {"batch_size": 4, "trainer": {"max_epochs": 3, "reload_dataloaders_every_n_epochs": 1}},
    )
    assert len(ledger) == 30
    for step, batches in sorted(ledger.items()):
        assert _traced(last, step) == batches, f"step {step}"


def test_a_step_begun_but_not_finished_is_refused(tmp_path: Path) -> None:
    """A checkpoint written between the micro-batches of a step (a user's find)."""
    callback = ResumableDataCallback()
    trainer = _trainer(tmp_path, [callback], max_steps=4, accumulate_grad_batches=2)
    trainer.fit(Recorder(), datamodule=ResumableDataModule(range(40), batch_size=4))
    mid = DataHistory.from_state(callback.history.state_dict(steps_done=3))  # step 3 begun
    sampler = DistributedSampler(range(40), num_replicas=1, rank=0)  # the DataModule's
    assert [len(b.ranks[0].indices) for b in trace_step(sampler, mid, 2)] == [4, 4]
    with pytest.raises(ValueError, match=r"step 3 had not finished .* holds 2 of its batches"):
        trace_step(sampler, mid, 3)
    with pytest.raises(ValueError, match="covers steps 0 to 2"):
        trace_step(sampler, mid, 4)
    unfinished = trace_step(sampler, DataHistory.from_state(callback.history.state_dict()), 3)
    sample = int(unfinished[0].ranks[0].indices[0])
    assert 3 not in [hit.step for hit in find_sample(sampler, mid, sample)]  # nor in find


def test_find_names_a_padded_sample_twice() -> None:
    """5 samples on 2 ranks x 3: the padded tail's position 5 is sample 0 again."""
    sampler = DistributedSampler(range(5), num_replicas=2, rank=0, shuffle=False)
    history = DataHistory([[0, 0, 0, 2, 3, 1, 1, 0]])
    assert [(h.rank, h.position) for h in find_sample(sampler, history, 0)] == [(0, 0), (1, 5)]
    assert [r.indices.tolist() for r in trace_step(sampler, history, 0)[0].ranks] == [
        [0, 2, 4],
        [1, 3, 0],
    ]
