"""Real Trainer runs on CPU: SIGKILL after a checkpoint, resume with ckpt_path=, compare.

Each run is a subprocess (tests/scripts/lightning_train.py) that logs the sample ids of every
step on every rank. An interrupted run kills its whole process group with SIGKILL right
after the checkpoint of step k was written; the resumed run starts from that checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "scripts" / "lightning_train.py"
pytestmark = pytest.mark.distributed


def run(out: Path, *args: str, expect_kill: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,  # the run may SIGKILL its own process group
    )
    if expect_kill:
        assert result.returncode == -9, result.stderr[-3000:]
    else:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def steps(out: Path) -> dict[int, list[int]]:
    """Sample ids per global step, from every rank that ran it, in rank order."""
    per_rank: list[dict[int, list[int]]] = []
    for path in sorted(out.glob("ids_rank*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        per_rank.append({line["step"]: line["ids"] for line in lines})
    every_step = sorted({s for rank in per_rank for s in rank})
    return {s: [i for rank in per_rank for i in rank.get(s, [])] for s in every_step}


def interrupted(
    out: Path, kill_after: int, *args: str, resume_args: tuple[str, ...] = ()
) -> dict[int, list[int]]:
    """Run until SIGKILL after the checkpoint of step ``kill_after``, then resume from it."""
    run(out, "--kill-after", str(kill_after), *args, expect_kill=True)
    checkpoint = out / "ckpt" / f"step={kill_after}.ckpt"
    assert checkpoint.exists()
    for path in out.glob("ids_rank*.jsonl"):  # forget steps after the checkpoint (a rank
        lines = path.read_text().splitlines()  # may have started one before the kill)
        kept = [line for line in lines if json.loads(line)["step"] < kill_after]
        path.write_text("".join(line + "\n" for line in kept))
    run(out, "--ckpt", str(checkpoint), *(resume_args or args))
    return steps(out)


@pytest.fixture(scope="module")
def single_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[int]]:
    out = tmp_path_factory.mktemp("single-ref")
    run(out)
    return steps(out)


@pytest.fixture(scope="module")
def mixture_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[int]]:
    out = tmp_path_factory.mktemp("mix-ref")
    run(out, "--mixture", "--phase-step", "8")
    return steps(out)


@pytest.mark.parametrize("kill_after", [10, 24])  # mid-epoch, and the last batch of epoch 0
def test_sigkill_and_resume_is_identical(
    tmp_path: Path, single_reference: dict[int, list[int]], kill_after: int
) -> None:
    assert len(single_reference) == 30
    assert interrupted(tmp_path, kill_after) == single_reference


@pytest.mark.parametrize("kill_after", [7, 24])
def test_loader_without_length_is_saved_at_the_trained_batch(
    tmp_path: Path, single_reference: dict[int, list[int]], kill_after: int
) -> None:
    # Lightning fetches one batch ahead for loaders without a length; the callback keeps
    # the saved position at the batch the model trained on.
    assert interrupted(tmp_path, kill_after, "--no-len") == single_reference


@pytest.mark.parametrize("kill_after", [5, 8, 11])  # before, on and after the phase start
def test_mixture_phase_boundary_resume(
    tmp_path: Path, mixture_reference: dict[int, list[int]], kill_after: int
) -> None:
    resumed = interrupted(tmp_path, kill_after, "--mixture", "--phase-step", "8")
    assert resumed == mixture_reference
    math_ids = range(88, 100)
    before = sum(i in math_ids for s in range(8) for i in resumed[s])
    after = sum(i in math_ids for s in range(8, 16) for i in resumed[s])
    assert after > 3 * before  # the phase really moved the mixture towards "math"


def test_two_process_ddp_mixture_resume_on_the_phase_step(tmp_path: Path) -> None:
    args = ("--devices", "2", "--mixture", "--phase-step", "6", "--max-steps", "14")
    reference = tmp_path / "ref"
    run(reference, *args)
    expected = steps(reference)
    assert len(expected[0]) == 8  # two ranks of four
    assert interrupted(tmp_path / "run", 6, *args) == expected


def _epoch_zero(ids_by_step: dict[int, list[int]], steps_in_epoch: int) -> list[int]:
    return [i for s in range(steps_in_epoch) for i in ids_by_step[s]]


def test_resume_two_processes_on_one_and_back(tmp_path: Path) -> None:
    # 2 -> 1: 96 samples, 8 a step on two ranks; killed after 5 steps, then 4 a step.
    down = interrupted(
        tmp_path / "down",
        5,
        "--devices",
        "2",
        "--max-steps",
        "8",
        resume_args=("--max-steps", "19"),
    )
    epoch = _epoch_zero(down, 5 + (96 - 40) // 4)
    assert Counter(epoch) == Counter(range(96))  # every sample exactly once
    # 1 -> 2: killed after 6 steps of 4, then 8 a step on two ranks.
    up = interrupted(
        tmp_path / "up", 6, "--max-steps", "8", resume_args=("--devices", "2", "--max-steps", "15")
    )
    epoch = _epoch_zero(up, 6 + (96 - 24) // 8)
    assert Counter(epoch) == Counter(range(96))


def test_validation_in_the_middle_of_an_epoch_does_not_move_the_position(
    tmp_path: Path, single_reference: dict[int, list[int]]
) -> None:
    assert interrupted(tmp_path, 12, "--val-every", "5") == single_reference


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--seed", "6"], "the data configuration changed (seed: saved 5, now 6)"),
        (["--mixture"], "the data configuration changed (sources:"),
    ],
)
def test_resume_with_another_seed_or_other_sources_is_refused_before_training(
    tmp_path: Path, change: list[str], message: str
) -> None:
    run(tmp_path, "--kill-after", "4", expect_kill=True)
    checkpoint = tmp_path / "ckpt" / "step=4.ckpt"
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--out",
            str(tmp_path / "other"),
            "--ckpt",
            str(checkpoint),
            "--batch-size",
            "4",
            *change,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "other" / "ids_rank0.jsonl").exists()  # no step was trained


def test_elastic_resume_of_a_mixture_places_later_phases_at_their_steps(tmp_path: Path) -> None:
    # Saved on 2 ranks of 4 before the phase at step 8, resumed on 1 rank of 4: the phase
    # must still start at step 8 (now 4 samples a step), and the past keeps its schedule.
    resumed = interrupted(
        tmp_path,
        5,
        "--devices",
        "2",
        "--mixture",
        "--phase-step",
        "8",
        "--max-steps",
        "6",
        resume_args=("--mixture", "--phase-step", "8", "--max-steps", "16"),
    )
    math_ids = range(88, 100)
    share = [sum(i in math_ids for i in resumed[s]) / len(resumed[s]) for s in range(5, 16)]
    before, after = share[: 8 - 5], share[8 - 5 :]
    assert sum(after) / len(after) > 0.5 > sum(before) / max(len(before), 1)
    checkpoint = torch.load(tmp_path / "ckpt" / "step=16.ckpt", weights_only=False)
    schedule = checkpoint["ResumableDataModule"]["train_loader"]["sampler"]["schedule"]
    # 5 steps of 8 samples, then 3 steps of 4: the phase starts at sample 52 of epoch 0.
    assert [(e["epoch"], e["position"]) for e in schedule][-1] == (0, 52)
