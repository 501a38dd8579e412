"""Real two-process DDP runs resumed on one process, and on two: the layout changes the
single-process matrix cannot make; and one run launched by ``torchrun`` instead of Lightning.
A resume on another world size must read the same global sample stream as the uninterrupted
run (every sample of every epoch once, in the epoch's order); on the same world size, the
same batches on every rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from faults.runner import ForkServer
from torchrun import torchrun

from lightning_resumable_data.cli.find import find
from lightning_resumable_data.cli.trace import trace
from matrix.harness import SCRIPT, SETTINGS, Ledger, Runs, documented_stream, ledger

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("ddp"))
    server.close()


@pytest.mark.parametrize(
    ("setting", "stop", "saved", "devices", "batch"),
    [
        ("default", "mid-epoch", 2, 1, 4),
        ("default", "last batch", 2, 1, 4),
        ("default", "epoch end", 2, 1, 4),
        ("limit_train_batches=0.5", "mid-epoch", 2, 1, 4),
        ("limit_train_batches=0.5", "last batch", 2, 1, 4),
        ("default", "mid-epoch", 2, 2, 4),
        ("default", "mid-epoch", 1, 2, 4),  # scaled up: one process resumed on two
        ("limit_train_batches=0.5", "last batch", 1, 2, 4),
        ("default", "mid-epoch", 2, 1, 8),  # world and batch size change together
        ("limit_train_batches=0.5", "mid-epoch", 1, 2, 8),
    ],
)
def test_resumed_on_another_number_of_processes(
    runs: Runs, setting: str, stop: str, saved: int, devices: int, batch: int
) -> None:
    checkpoint, writer = runs.stop_checkpoint(setting, stop, 4, devices=saved)
    step = int(torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"])
    args = [*SETTINGS[setting], "--devices", str(devices), "--batch-size", str(batch)]
    args += ["--ckpt", str(checkpoint)]
    name = f"{setting}-{stop}-{saved}to{devices}-batch{batch}".replace(" ", "_")
    out = runs.run(runs.root / name, args)
    before, after = ledger(writer).cut(step), ledger(out)
    last = max((out / "ckpt").glob("step=*.ckpt"), key=_step_of)
    for part in (before, after):  # lrd trace names what every rank trained at every step
        _assert_traced(part, last)
    trained: dict[int, list[tuple[int, int]]] = {}  # lrd find: where each sample was trained
    for part in (before, after):
        for rank, lines in enumerate(part.ranks):
            for line in lines:
                for sample in map(int, line["ids"]):
                    trained.setdefault(sample, []).append((int(line["step"]), rank))
    for sample in (0, 1, 17, 40, 63):
        hits = [hit for hit in find(last, sample)["trained"] if not hit["planned"]]
        assert sorted((h["step"], h["rank"]) for h in hits) == sorted(trained.get(sample, []))
    uninterrupted = ledger(writer)
    assert uninterrupted.stream() == documented_stream(32 if "limit" in setting else 64)
    assert before.stream() + after.stream() == uninterrupted.stream()
    if (devices, batch) == (saved, 4):

        def batches(ranks: list[list[dict[str, Any]]]) -> list[list[tuple[Any, ...]]]:
            return [[(x["step"], x["batch"], x["ids"]) for x in rank] for rank in ranks]

        assert batches((before + after).ranks) == batches(uninterrupted.ranks)


def test_skipped_steps_of_two_processes_resumed_on_one(runs: Runs) -> None:
    """Steps 6 to 9 (straddling epoch 0's end) cut on 2 ranks; resumed on 1 with batch 8."""
    reference = ledger(runs.reference("default", 4, devices=2))
    skipped = runs.run(runs.root / "skip-2", ["--devices", "2", "--skip-steps", "6:10"])
    whole = ledger(skipped)
    # the same global stream less the 4 steps' samples (2 ranks x 4 each), in order
    assert whole.stream() == reference.cut(6).stream() + reference.stream()[80:]
    assert len(whole.stream()) == len(reference.stream()) - 32
    for ckpt_step, extra in ((4, ["--skip-steps", "6:10"]), (14, [])):  # before and after
        checkpoint = skipped / "ckpt" / f"step={ckpt_step}.ckpt"
        args = ["--devices", "1", "--batch-size", "8", "--ckpt", str(checkpoint), *extra]
        after = ledger(runs.run(runs.root / f"skip-resumed-{ckpt_step}", args))
        assert whole.cut(ckpt_step).stream() + after.stream() == whole.stream()
    last = max((skipped / "ckpt").glob("step=*.ckpt"), key=_step_of)
    _assert_traced(whole, last)


def _step_of(checkpoint: Path) -> int:
    return int(checkpoint.stem.split("=")[1].split("-")[0])


def _assert_traced(part: Ledger, checkpoint: Path) -> None:
    """Every step's batches of every rank in ``part`` are what ``lrd trace`` names."""
    for rank, lines in enumerate(part.ranks):
        steps: dict[int, list[list[int]]] = {}
        for line in lines:
            steps.setdefault(int(line["step"]), []).append(list(map(int, line["ids"])))
        for step, batches in steps.items():
            traced = trace(checkpoint, step, [rank])["batches"]
            assert [b["ranks"][0]["indices"] for b in traced] == batches, (rank, step)


def test_torchrun_two_processes_resumed_on_one(tmp_path: Path) -> None:
    # torchrun starts the processes (Lightning's TorchElastic environment, strategy="ddp");
    # killed in the middle of epoch 1, the run resumes under torchrun on one process.
    reference = tmp_path / "reference"
    torchrun(SCRIPT, "--out", str(reference), "--devices", "2", nproc=2)
    uninterrupted = ledger(reference)
    assert uninterrupted.stream() == documented_stream(64)
    epoch1 = [x for x in uninterrupted.ranks[0] if x["epoch"] == 1]
    step = int(epoch1[len(epoch1) // 2]["step"]) + 1
    checkpoint = reference / "ckpt" / f"step={step}.ckpt"
    resumed = tmp_path / "resumed"
    torchrun(SCRIPT, "--out", str(resumed), "--ckpt", str(checkpoint), nproc=1)
    after = ledger(resumed)
    assert uninterrupted.cut(step).stream() + after.stream() == uninterrupted.stream()
