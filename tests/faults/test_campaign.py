"""Kill real two-process DDP training runs at seeded points; resume; check every sample.

The main lineage chains the faults: each run resumes from the newest checkpoint Lightning
completed and is killed by the next fault, and the ledger of the whole lineage must equal an
uninterrupted run's, step by step and rank by rank. The elastic lineage resumes 2 -> 1 -> 2
processes and checks that every sample of every epoch is trained exactly once. See
``docs/faults.md``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from faults.campaign import FAMILIES, Lineage, Planned, Planner, lineage_faults, soak
from faults.runner import (
    ForkServer,
    RunResult,
    Steps,
    checkpoint_step,
    compare,
    epochs,
    exactly_once,
    newest_complete_checkpoint,
    run_fresh,
    steps,
    truncate_ledger,
)
from faults.summary import SUMMARY

pytestmark = pytest.mark.distributed

SOAK_TIMEOUT = 4 * 3600
EPOCH_SAMPLES = 96  # of either dataset (train.py); no layout pads or drops any


def record(result: RunResult) -> RunResult:
    SUMMARY.runs += 1
    SUMMARY.run_seconds += result.wall
    assert not result.timed_out, (
        f"the run hung (killed after {result.wall:.0f} s):\n{result.tail()}"
    )
    return result


def check_fault(planned: Planned, result: RunResult, seed: int) -> None:
    """The run must have died of the planned fault: SIGKILL, or the planned clear error."""
    where = f"fault {planned.spec} (LRD_FAULT_SEED={seed}, log {result.log})"
    if planned.error:
        assert result.rc not in (0, -9), f"{where} did not fail the run:\n{result.tail()}"
        log = result.log.read_text(errors="replace")
        for pattern in planned.error:
            assert re.search(pattern, log), f"{where}: no {pattern!r} in the log:\n{result.tail()}"
    else:
        assert result.rc == -9, f"{where} was not injected (rc={result.rc}):\n{result.tail()}"
    SUMMARY.faults[planned.family] += 1


def resume_point(
    out: Path, planned: Planned, seed: int, avoid: Callable[[int], bool] = lambda step: False
) -> Path | None:
    """The newest complete checkpoint; the ledger forgets the steps from it on."""
    resume = newest_complete_checkpoint(out / "ckpt", avoid)
    SUMMARY.truncated_checkpoints += len(resume.skipped)
    SUMMARY.known_bug_detours += len(resume.avoided)
    where = f"fault {planned.spec} (LRD_FAULT_SEED={seed})"
    if planned.expect_step is not None:
        assert resume.step == planned.expect_step, (
            f"{where} left the newest complete checkpoint at step {resume.step}, "
            f"expected {planned.expect_step}"
        )
    if planned.family == "checkpoint":  # the truncated file was found, and skipped
        skipped = [p.name for p in resume.skipped]
        assert skipped == [f"step={resume.step + 1}.ckpt"], f"{where}: skipped {skipped}"
    SUMMARY.dropped_ledger_lines += truncate_ledger(out, resume.step)
    return resume.path


def ckpt_args(path: Path | None) -> list[str]:
    if path is None:
        return []
    SUMMARY.resumes += 1
    return ["--ckpt", str(path)]


@pytest.mark.timeout(SOAK_TIMEOUT if soak() else 300)
def test_chained_faults_resume_exactly_like_an_uninterrupted_run(
    fork_server: ForkServer, fault_seed: int, tmp_path: Path
) -> None:
    faults = lineage_faults()
    lineage = Lineage.for_faults(faults)
    planner = Planner(fault_seed, lineage, faults)
    out = tmp_path / "lineage"
    resume: Path | None = None
    step = 0
    history = []  # "resume step -> fault", for the failure messages and plan.txt
    families: Counter[str] = Counter()
    for i in range(faults):
        planned = planner.next(step)
        history.append(f"run {i}: resumed at step {step}, fault {planned.spec}")
        (tmp_path / "plan.txt").write_text("\n".join(history) + "\n")
        argv = ["--out", str(out), *lineage.argv(), *planned.argv, *ckpt_args(resume)]
        result = record(fork_server.run(argv, tmp_path / f"run{i:03d}.log"))
        check_fault(planned, result, fault_seed)
        families[planned.family] += 1
        resume = resume_point(out, planned, fault_seed, planner.avoided(step))
        step = 0 if resume is None else checkpoint_step(resume)
    if faults >= len(FAMILIES):
        assert set(families) == set(FAMILIES), f"fault families injected: {dict(families)}"
    workers = ["--workers", str(random.Random(fault_seed).choice((0, 2)))]
    argv = ["--out", str(out), *lineage.argv(), *workers, *ckpt_args(resume)]
    final = record(fork_server.run(argv, tmp_path / "final.log"))
    assert final.rc == 0, final.tail()

    # The reference: one uninterrupted run, in a fresh interpreter with the standard launcher.
    reference_out = tmp_path / "reference"
    argv = ["--out", str(reference_out), "--strategy", "ddp", *lineage.argv()]
    reference = record(run_fresh(argv, tmp_path / "reference.log"))
    assert reference.rc == 0, reference.tail()

    expected, resumed = steps(reference_out), steps(out)
    assert len(expected.ids) == lineage.max_steps
    assert all(len(ids) == 8 for ids in expected.ids.values())  # two ranks of four
    checked, mismatches = compare(expected, resumed)
    SUMMARY.samples_checked += checked
    SUMMARY.mismatches += len(mismatches)
    assert not mismatches, (
        f"LRD_FAULT_SEED={fault_seed}: {len(mismatches)} mismatches, first: {mismatches[:5]}; "
        f"plan: {tmp_path / 'plan.txt'}"
    )


def elastic_lineage(
    fork_server: ForkServer, seed: int, tmp_path: Path, data: list[str]
) -> tuple[Steps, list[RunResult]]:
    """Two processes killed at step k1, one process killed at k2, two processes to the end.

    Stops early (returning what ran) if a link fails instead of being killed.
    """
    rng = random.Random(seed + 1)
    out = tmp_path / "elastic"
    k1 = rng.randint(3, 9)
    k2 = k1 + rng.randint(3, 20)
    links = [("2", f"step:{k1}:{rng.randint(0, 1)}", k1), ("1", f"step:{k2}:0", k2)]
    resume: Path | None = None
    results = []
    for i, (devices, spec, k) in enumerate(links):
        planned = Planned("elastic", spec, rng.choice((0, 2)), k)
        argv = ["--out", str(out), *data, "--devices", devices, *planned.argv, *ckpt_args(resume)]
        result = record(fork_server.run(argv, tmp_path / f"elastic{i}.log"))
        results.append(result)
        if result.rc != -9:
            return steps(out), results
        check_fault(planned, result, seed)
        resume = resume_point(out, planned, seed)
    argv = ["--out", str(out), *data, "--devices", "2", "--max-steps", str(k2 + 30)]
    results.append(record(fork_server.run([*argv, *ckpt_args(resume)], tmp_path / "final.log")))
    return steps(out), results


@pytest.mark.timeout(300)
def test_elastic_two_one_two_processes_train_every_sample_once_per_epoch(
    fork_server: ForkServer, fault_seed: int, tmp_path: Path
) -> None:
    data = ["--data", "plain", "--max-steps", "200"]
    resumed, results = elastic_lineage(fork_server, fault_seed, tmp_path, data)
    assert [r.rc for r in results] == [-9, -9, 0], results[-1].tail()
    every_sample = Counter(range(EPOCH_SAMPLES))
    checked, samples, errors = exactly_once(resumed, [every_sample] * 10, EPOCH_SAMPLES)
    SUMMARY.samples_checked += samples
    SUMMARY.mismatches += len(errors)
    assert not errors, f"LRD_FAULT_SEED={fault_seed}: {errors}"
    assert checked >= 2


@pytest.mark.timeout(300)
def test_elastic_resume_of_a_mixture_with_a_past_phase(
    fork_server: ForkServer, fault_seed: int, tmp_path: Path
) -> None:
    # One phase, at step 2: it has started before the first kill (k1 >= 3) in every layout,
    # so each epoch mixes what the uninterrupted run mixes, exactly once. (An elastic resume
    # used to be refused when the mixture had step phases: fixed in a62216a.)
    data = ["--data", "mixture", "--phases", "2", "--max-steps", "200"]
    resumed, results = elastic_lineage(fork_server, fault_seed, tmp_path, data)
    assert [r.rc for r in results] == [-9, -9, 0], results[-1].tail()
    reference_out = tmp_path / "reference"
    argv = ["--out", str(reference_out), *data, "--max-steps", "36"]
    assert record(fork_server.run(argv, tmp_path / "reference.log")).rc == 0
    checked, samples, errors = exactly_once(
        resumed, epochs(steps(reference_out), EPOCH_SAMPLES), EPOCH_SAMPLES
    )
    SUMMARY.samples_checked += samples
    SUMMARY.mismatches += len(errors)
    assert not errors, f"LRD_FAULT_SEED={fault_seed}: {errors}"
    assert checked >= 2


@pytest.mark.timeout(300)
def test_checkpoint_without_data_state_is_refused(fork_server: ForkServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["--out", str(out), "--data", "plain", "--max-steps", "12"]
    planned = Planned("step", "step:5:0", 0, 5)
    killed = record(fork_server.run([*argv, *planned.argv], tmp_path / "killed.log"))
    check_fault(planned, killed, 0)
    checkpoint = torch.load(out / "ckpt" / "step=5.ckpt", weights_only=False)
    del checkpoint["FaultDataModule"]
    del checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    stripped = tmp_path / "no-data-state.ckpt"
    torch.save(checkpoint, stripped)
    truncate_ledger(out, 5)
    resumed = record(fork_server.run([*argv, *ckpt_args(stripped)], tmp_path / "resumed.log"))
    assert resumed.rc not in (0, -9), "the resume without data state was not refused"
    assert "data" in resumed.tail()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [0, 2])
def test_two_resumes_at_epoch_ends_replay_nothing(
    fork_server: ForkServer, tmp_path: Path, workers: int
) -> None:
    # One process, 24 steps an epoch: killed after the checkpoints of steps 24 and 48 (the
    # last batches of epochs 0 and 1), resumed from each.
    data = ["--data", "plain", "--devices", "1", "--max-steps", "56", "--workers", str(workers)]
    reference_out = tmp_path / "reference"
    assert record(fork_server.run(["--out", str(reference_out), *data], tmp_path / "r.log")).rc == 0
    out = tmp_path / "run"
    resume: Path | None = None
    for i, k in enumerate((24, 48, 52)):
        planned = Planned("epoch_boundary", f"step:{k}:0", workers, k)
        argv = ["--out", str(out), *data, *planned.argv, *ckpt_args(resume)]
        check_fault(planned, record(fork_server.run(argv, tmp_path / f"{i}.log")), 0)
        resume = resume_point(out, planned, 0)
    argv = ["--out", str(out), *data, *ckpt_args(resume)]
    assert record(fork_server.run(argv, tmp_path / "final.log")).rc == 0
    _, mismatches = compare(steps(reference_out), steps(out))
    assert not mismatches, mismatches[:3]
