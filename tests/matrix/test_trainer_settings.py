"""Trainer settings x stop points x layouts: a resumed run reads what an uninterrupted one reads.

Every cell resumes a real ``Trainer`` run from a checkpoint that an uninterrupted run wrote
(after an optimizer step, at an epoch's last batch, or at an epoch's end), under one of the
Trainer settings users set, on the same layout or with another batch size, and compares the
per-batch sample-id ledger over three epochs with the uninterrupted run's:

* same layout: every batch identical (step, batch index and sample ids);
* another batch size: the global sample stream identical (every sample of every epoch exactly
  once, in the epoch's order; only the cut into batches differs).

The runs are forked from one warm process (``faults/forkserve.py``); the layout changes that
need two processes are real DDP runs in ``test_ddp_layouts.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from faults.runner import ForkServer

from matrix.harness import (
    CALLBACKS,
    LAYOUTS,
    SCRIPT,
    SETTINGS,
    STOPS,
    Ledger,
    Runs,
    documented_stream,
    ledger,
)

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("matrix"))
    server.close()


@pytest.mark.parametrize("callback", CALLBACKS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_resume_reads_what_the_uninterrupted_run_reads(
    runs: Runs, setting: str, stop: str, layout: str, callback: str
) -> None:
    if callback == "none" and "phase" in setting:
        pytest.skip("mixture phases are given to the ResumableDataCallback one passes")
    saved_batch, resumed_batch = LAYOUTS[layout]
    checkpoint, writer = runs.stop_checkpoint(setting, stop, saved_batch, callback=callback)
    assert checkpoint.exists(), sorted(p.name for p in checkpoint.parent.iterdir())
    step = int(torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"])
    before = ledger(writer).cut(step)
    args = [*SETTINGS[setting], "--batch-size", str(resumed_batch), "--ckpt", str(checkpoint)]
    args += ["--callback", callback]
    if setting == "max_steps then more":  # the second fit: more steps, to 3 epochs of data
        more = (3 * 64 - len(before.stream())) // resumed_batch
        args += ["--max-epochs", "-1", "--max-steps", str(step + more)]
    name = f"{setting}-{stop}-{layout}-{callback}".replace(" ", "_").replace(">", "")
    run = runs.run(runs.root / name, args)
    resumed = before + ledger(run)
    reference_setting = "default" if setting == "max_steps then more" else setting
    uninterrupted = ledger(runs.reference(reference_setting, resumed_batch, callback=callback))
    assert len(resumed.stream()) == len(uninterrupted.stream())  # samples trained, in total
    if "phase" not in setting:
        limit = 32 if "limit" in setting else 64
        assert uninterrupted.stream() == documented_stream(limit)
    if "phase" in setting:  # the phase starts at its optimizer step, in the documented order
        _assert_documented_mixture_order(resumed, run)
    if saved_batch == resumed_batch:
        assert resumed.batches() == uninterrupted.batches()
    elif "phase" in setting:
        pass  # after an elastic resume later phases are placed for the new layout: above
    else:
        assert resumed.stream() == uninterrupted.stream()


def _assert_documented_mixture_order(resumed: Ledger, run: Path) -> None:
    from ledger_model import Samples

    from lightning_resumable_data import MixtureDataset, MixtureSampler
    from matrix.train import SOURCES, N

    last = max(run.glob("ckpt/step=*.ckpt"), key=lambda p: int(p.stem.split("=")[1]))
    state = torch.load(last, map_location="cpu", weights_only=False)
    sampler_state = state["ResumableDataModule"]["train_loader"]["sampler"]
    dataset = MixtureDataset({k: Samples(size, start) for k, (start, size) in SOURCES.items()})
    expected: list[int] = []
    for epoch in range(3):
        sampler = MixtureSampler(
            dataset, {"web": 0.5, "code": 0.3, "math": 0.2}, 1, 0, seed=3, samples_per_epoch=N
        )
        sampler.allow_schedule_change = True
        sampler.load_state_dict({**sampler_state, "epoch": epoch, "consumed": 0, "num_replicas": 1})
        expected += list(sampler)
    assert resumed.stream() == expected
    phase = [e for e in sampler_state["schedule"] if e["weights"][2] == 0.5]
    assert len(phase) == 1
    lines = resumed.ranks[0]
    first = next(i for i, line in enumerate(lines) if line["step"] == 7)
    start = sum(len(line["ids"]) for line in lines[:first])
    assert (phase[0]["epoch"], phase[0]["position"]) == divmod(start, N)


def test_ledger_stream_interleaves_ranks_in_global_order() -> None:
    line = {"step": 0, "epoch": 0, "batch": 0}
    two = Ledger([[{**line, "ids": [0, 2]}], [{**line, "ids": [1, 3]}]])
    assert two.stream() == [0, 1, 2, 3]
    assert json.loads(json.dumps(two.batches())) == [[0, 0, [0, 2]]]


def test_progress_bar_keeps_its_total_and_epoch_after_a_mid_epoch_resume(runs: Runs) -> None:
    """Lightning skips ``on_train_epoch_start`` when it resumes mid-epoch; the bar lost both."""
    checkpoint, _ = runs.stop_checkpoint("default", "mid-epoch", 4)
    out = runs.run(runs.root / "bar", ["--progress-bar", "--ckpt", str(checkpoint)])
    lines = [json.loads(line) for line in (out / "bar.jsonl").read_text().splitlines()]
    assert lines[0]["total"] == 16
    assert lines[0]["title"].startswith("Epoch 1")
    # Written before the bar counts the batch: the tenth batch of epoch 1 saw nine.
    assert lines[1]["n"] == 10


@pytest.mark.parametrize(
    ("setting", "stop"),
    [
        ("default", "mid-epoch"),
        ("limit_train_batches=0.5", "last batch"),
        ("reload_dataloaders_every_n_epochs=1", "epoch end"),
    ],
)
def test_resume_with_workers_reads_what_the_uninterrupted_run_reads(
    runs: Runs, setting: str, stop: str
) -> None:
    """Two persistent workers prefetching ahead change nothing, before or after the resume."""
    args = [*SETTINGS[setting], "--workers", "2"]
    reference = runs.run(runs.root / f"workers-ref-{setting}", args)
    assert ledger(reference).batches() == ledger(runs.reference(setting, 4)).batches()
    checkpoint, _ = runs.stop_checkpoint(setting, stop, 4)
    step = int(torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"])
    name = f"workers-{setting}-{stop}".replace(" ", "_")
    resumed = ledger(runs.reference(setting, 4)).cut(step) + ledger(
        runs.run(runs.root / name, [*args, "--ckpt", str(checkpoint)])
    )
    assert resumed.batches() == ledger(reference).batches()


@pytest.mark.parametrize("when", ["mid-epoch", "epoch end"])
@pytest.mark.parametrize("layout", ["same", "batch 4->8"])
def test_resume_from_a_checkpoint_written_at_validation_end(
    runs: Runs, when: str, layout: str
) -> None:
    """``val_check_interval=0.5``: a checkpoint of the validation in the middle of epoch 1,
    or of the one at its end, resumes where the uninterrupted run went on."""
    setting = "val_check_interval=0.5"
    saved_batch, resumed_batch = LAYOUTS[layout]
    reference = runs.reference(setting, saved_batch)
    per_epoch = 64 // saved_batch
    step = per_epoch + (per_epoch // 2 if when == "mid-epoch" else per_epoch)
    checkpoint = reference / "ckpt" / f"step={step}-val.ckpt"
    assert checkpoint.exists(), sorted(p.name for p in checkpoint.parent.iterdir())
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert saved["global_step"] == step
    args = [*SETTINGS[setting], "--batch-size", str(resumed_batch), "--ckpt", str(checkpoint)]
    name = f"val-end-{when}-{layout}".replace(" ", "_").replace(">", "")
    resumed = ledger(reference).cut(step) + ledger(runs.run(runs.root / name, args))
    uninterrupted = ledger(runs.reference(setting, resumed_batch))
    if saved_batch == resumed_batch:
        assert resumed.batches() == uninterrupted.batches()
    assert resumed.stream() == uninterrupted.stream() == documented_stream(64)


def test_a_second_fit_of_the_same_trainer_continues_the_data(runs: Runs) -> None:
    """``max_steps`` ends the first fit mid-epoch; more steps on the same trainer go on."""
    out = runs.run(
        runs.root / "refit",
        ["--max-epochs", "-1", "--max-steps", "22", "--refit-max-steps", "48"],
    )

    # Lightning counts the batches of the second fit's first epoch from 0: compare steps.
    def steps(run: Path) -> list[tuple[Any, Any]]:
        return [(x["step"], x["ids"]) for x in ledger(run).ranks[0]]

    assert steps(out) == steps(runs.reference("default", 4))
