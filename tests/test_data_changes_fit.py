"""Data that changed between a SIGKILL and the resume, under real ``Trainer`` runs.

``matrix/train.py`` trains ``range(64)`` (``batch_size=4``, 3 epochs, a checkpoint after
every step) with a ``ResumableDataModule`` as the docs show it; the run is SIGKILLed in
epoch 1 and resumed over a dataset that grew or shrank, on 1 process and on 2 (DDP). The
per-rank ledgers must show: each old sample not read before the kill read exactly once in
the rest of the interrupted epoch (and the removed ones never), each new sample exactly
once where the policy puts it, and the later epochs whole over the new dataset. A second
resume from a checkpoint written after the change trains what the first resumed run
trained from there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faults.runner import ForkServer
from matrix.harness import Runs, ledger

SCRIPT = Path(__file__).with_name("matrix") / "train.py"
N, KILL = 64, 20  # epoch 0 is 16 steps of 4; the kill falls on step 4 of epoch 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("changes"))
    server.close()


@pytest.fixture(scope="module")
def killed(runs: Runs) -> Path:
    """A run SIGKILLed at the start of step 20: ``ckpt/step=20.ckpt`` is its last."""
    out = runs.root / "killed"
    out.mkdir()
    outcome = runs.server.run(["--out", str(out), "--kill", str(KILL)], out / "log.txt")
    assert outcome.rc == -9, outcome.tail()
    return out


def by_epoch(lines: list[dict[str, object]]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for line in lines:
        found.setdefault(int(line["epoch"]), []).extend(map(int, line["ids"]))  # type: ignore[call-overload]
    return found


def read(out: Path) -> dict[int, list[int]]:
    """Every rank's samples, by epoch."""
    merged: dict[int, list[int]] = {}
    for lines in ledger(out).ranks:
        for epoch, ids in by_epoch(lines).items():
            merged.setdefault(epoch, []).extend(ids)
    return merged


def resume(runs: Runs, killed: Path, name: str, n: int, *args: str) -> Path:
    ckpt = killed / "ckpt" / f"step={KILL}.ckpt"
    return runs.run(runs.root / name, ["--ckpt", str(ckpt), "--n", str(n), *args])


@pytest.mark.parametrize("devices", [1, 2])
def test_grown_data_is_read_once_after_the_unread_old_samples(
    runs: Runs, killed: Path, devices: int
) -> None:
    before = read(killed)
    after = resume(runs, killed, f"grown-{devices}", 80, "--devices", str(devices))
    resumed = read(after)
    assert sorted(before[0]) == list(range(N))  # epoch 0, untouched
    interrupted = before[1] + resumed[1]
    assert Counter(interrupted) == Counter(range(80))  # every old and new sample once
    stream = ledger(after).stream()  # the global order, all ranks interleaved
    assert max(stream[: N - len(before[1])]) < N  # the unread old samples come first
    assert sorted(resumed[2]) == list(range(80))  # the next epoch reads the grown set


def test_grown_data_joins_at_the_next_epoch_by_option(runs: Runs, killed: Path) -> None:
    before = read(killed)
    resumed = read(resume(runs, killed, "grown-next", 80, "--grown", "next_epoch"))
    assert Counter(before[1] + resumed[1]) == Counter(range(N))
    assert sorted(resumed[2]) == list(range(80))


@pytest.mark.parametrize("devices", [1, 2])
def test_removed_samples_are_skipped_and_the_rest_read_once(
    runs: Runs, killed: Path, devices: int
) -> None:
    before = read(killed)
    resumed = read(resume(runs, killed, f"shrunk-{devices}", 48, "--devices", str(devices)))
    assert max(i for epoch in resumed.values() for i in epoch) < 48  # removed: never read
    unread = set(range(48)) - set(before[1])
    assert set(resumed[1]) >= unread  # every remaining one is read
    padded = Counter(resumed[1]) - Counter(unread)  # beyond once each: the pad of a rank
    assert sum(padded.values()) < devices  # with none left, which repeats one (as torch)
    assert all(i < 48 for i in padded)
    assert sorted(resumed[2]) == list(range(48))


def test_a_second_resume_after_the_change_replays_it(runs: Runs, killed: Path) -> None:
    first = resume(runs, killed, "grown-then", 80)
    step = KILL + 6  # mid-epoch 1, inside the stretch of the unread old samples
    again = runs.run(
        runs.root / "grown-again",
        ["--ckpt", str(first / "ckpt" / f"step={step}.ckpt"), "--n", "80", "--devices", "2"],
    )
    expected = [x for x in ledger(first).ranks[0] if int(x["step"]) >= step]
    merged = ledger(again).stream()
    assert merged == [i for x in expected for i in map(int, x["ids"])]


def inspect(ckpt: Path, *args: str) -> dict[str, object]:
    """``lrd inspect CKPT --json ...``, as a user runs it."""
    command = [sys.executable, "-m", "lightning_resumable_data.cli", "inspect", str(ckpt)]
    done = subprocess.run([*command, "--json", *args], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def trace(ckpt: Path, step: int) -> list[int]:
    """``lrd trace CKPT --step N --json``: the ids (``matrix/train.py``.s) all ranks trained."""
    command = [sys.executable, "-m", "lightning_resumable_data.cli", "trace", str(ckpt)]
    done = subprocess.run(
        [*command, "--step", str(step), "--json"], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    firsts = {name: first for name, (first, _) in SOURCES.items()}
    return [
        firsts[source] + int(index)
        for batch in report["batches"]
        for rank in batch["ranks"]
        for source, index in zip(rank["sources"], rank["source_indices"], strict=True)
    ]


@pytest.mark.parametrize(("n", "policy"), [(80, "this_epoch"), (80, "next_epoch"), (48, None)])
def test_the_dry_run_counts_what_the_resumed_run_trains(
    runs: Runs, killed: Path, n: int, policy: str | None
) -> None:
    options = ["--grown", policy] if policy else []
    ckpt = killed / "ckpt" / f"step={KILL}.ckpt"
    dry: Any = inspect(ckpt, "--dataset-length", str(n), *options)["data_changes"]
    planned = dry["dry_run"]
    name = f"dry-{n}-{policy}"
    resumed = read(resume(runs, killed, name, n, *options))
    before = read(killed)
    assert planned["left"] == len(resumed[1])  # samples the interrupted epoch still reads
    assert planned["trained"] == len(resumed[1])  # (no pad, nothing dropped: 1 process)
    assert planned["added"] == len([i for i in resumed[1] if i >= N])
    assert planned["removed"] == len(set(range(n, N)) - set(before[1]))
    assert planned["unread_old"] == len([i for i in resumed[1] if i < N])
    after: Any = inspect(runs.root / name / "ckpt" / f"step={KILL + 2}.ckpt")
    interrupted = len(before[1]) + len(resumed[1])  # what the changed epoch reads in all
    assert after["epoch_length"] == interrupted  # (without torch: lrd inspect's own reader)
    assert after["resume"]["remaining_samples"] == interrupted - after["consumed"]
    recorded = after["data_changes"]
    assert recorded["recorded"] == [
        {
            "epoch": 1,
            "position": planned["position"],
            "old_length": N,
            "new_length": n,
            "added_start": N if n > N else n,
            "added_stop": n if policy == "this_epoch" else N if n > N else n,
            "removed_from": N if n > N else n,
        }
    ]


SOURCES = {"web": (0, 40), "code": (40, 16), "math": (56, 8)}  # matrix/train.py's mixture


@pytest.fixture(scope="module")
def killed_mixture(runs: Runs) -> Path:
    """The mixture (web 0.5, code 0.3, math 0.2; 64 a epoch) SIGKILLed at step 20."""
    out = runs.root / "killed-mixture"
    out.mkdir()
    outcome = runs.server.run(
        ["--out", str(out), "--mixture", "--kill", str(KILL)], out / "log.txt"
    )
    assert outcome.rc == -9, outcome.tail()
    return out


def assert_whole_passes(ids: list[int], sources: dict[str, tuple[int, int]]) -> None:
    """Each source is read as passes: a sample once per finished pass, +1 if reached."""
    seen = Counter(ids)
    for first, size in sources.values():
        mine = [seen[i] for i in range(first, first + size)]
        passes = sum(mine) // size
        assert all(passes <= n <= passes + 1 for n in mine), (first, mine)
        assert sum(n > passes for n in mine) == sum(mine) % size


@pytest.mark.parametrize("devices", [1, 2])
def test_a_mixture_resumed_under_new_weights_changes_them_at_the_resume(
    runs: Runs, killed_mixture: Path, devices: int
) -> None:
    ckpt = killed_mixture / "ckpt" / f"step={KILL}.ckpt"
    args = ["--mixture", "--weights", "web=0.1,code=0.1,math=0.8", "--devices", str(devices)]
    after = runs.run(runs.root / f"reweighted-{devices}", ["--ckpt", str(ckpt), *args])
    before, resumed = read(killed_mixture), read(after)
    planned: Any = inspect(ckpt, "--weights", args[2])  # the dry run
    left = {n: sum(f <= i < f + s for i in resumed[1]) for n, (f, s) in SOURCES.items()}
    assert planned["data_changes"]["dry_run"]["left_after"] == left
    assert_whole_passes(before[1] + resumed[1], SOURCES)  # nothing skipped or repeated
    assert_whole_passes(resumed[2], SOURCES)
    math = [i for i in resumed[2] if i >= 56]
    assert len(math) == round(0.8 * 64)  # the next epoch: the new weights' exact counts
    assert len([i for i in resumed[1] if i >= 56]) > len([i for i in before[1] if i >= 56])
    if devices == 2:  # a second resume, from a checkpoint after the change, replays it
        again = runs.run(
            runs.root / "reweighted-again",
            ["--ckpt", str(after / "ckpt" / f"step={KILL + 3}.ckpt"), *args[:3]],
        )
        expected = [x for x in ledger(after).stream()][len(ledger(after).cut(KILL + 3).stream()) :]
        assert ledger(again).stream() == expected


@pytest.mark.parametrize("devices", [1, 2])
def test_a_removed_source_weighs_zero_from_the_resume_on(
    runs: Runs, killed_mixture: Path, devices: int
) -> None:
    ckpt = killed_mixture / "ckpt" / f"step={KILL}.ckpt"
    args = ["--ckpt", str(ckpt), "--mixture", "--drop-source", "math"]
    after = runs.run(runs.root / f"removed-{devices}", [*args, "--devices", str(devices)])
    before, resumed = read(killed_mixture), read(after)
    planned: Any = inspect(ckpt, "--sources", "web=40,code=16")  # the dry run
    left = {n: sum(f <= i < f + s for i in resumed[1]) for n, (f, s) in SOURCES.items()}
    assert planned["data_changes"]["dry_run"]["left_after"] == left
    assert planned["data_changes"]["dry_run"]["removed"] == ["math"]
    assert not [i for epoch in resumed.values() for i in epoch if i >= 56]  # never drawn
    kept = {k: v for k, v in SOURCES.items() if k != "math"}
    assert_whole_passes([i for i in before[1] if i < 56] + resumed[1], kept)
    assert_whole_passes(resumed[2], kept)
    assert len(resumed[2]) == 64
    again = runs.run(  # a second resume: the removed source's place is kept
        runs.root / f"removed-again-{devices}",
        ["--ckpt", str(after / "ckpt" / f"step={KILL + 2}.ckpt"), *args[2:]],
    )
    expected = ledger(after).stream()[len(ledger(after).cut(KILL + 2).stream()) :]
    assert ledger(again).stream() == expected


@pytest.fixture(scope="module")
def killed_two_sources(runs: Runs) -> Path:
    """The mixture without math (web 0.5, code 0.3; 64 a epoch) SIGKILLed at step 20."""
    out = runs.root / "killed-two-sources"
    out.mkdir()
    args = ["--out", str(out), "--mixture", "--drop-source", "math", "--kill", str(KILL)]
    outcome = runs.server.run(args, out / "log.txt")
    assert outcome.rc == -9, outcome.tail()
    return out


@pytest.mark.parametrize("devices", [1, 2])
def test_an_added_source_draws_from_the_resume_on(
    runs: Runs, killed_two_sources: Path, devices: int
) -> None:
    ckpt = killed_two_sources / "ckpt" / f"step={KILL}.ckpt"
    args = ["--ckpt", str(ckpt), "--mixture"]  # math is back, weighing 0.2
    after = runs.run(runs.root / f"added-{devices}", [*args, "--devices", str(devices)])
    before, resumed = read(killed_two_sources), read(after)
    planned: Any = inspect(  # the dry run, before the resume: each source's draws left
        ckpt, "--sources", "web=40,code=16,math=8", "--weights", "web=0.5,code=0.3,math=0.2"
    )
    left = {n: sum(f <= i < f + s for i in resumed[1]) for n, (f, s) in SOURCES.items()}
    assert planned["data_changes"]["dry_run"]["left_after"] == left
    assert planned["data_changes"]["dry_run"]["added"] == ["math"]
    config = runs.root / f"added-{devices}.yaml"  # lrd plan CONFIG --resume CKPT: the same
    config.write_text(
        "sources: {web: 40, code: 16, math: 8}\nweights: {web: 0.5, code: 0.3, math: 0.2}\n"
        f"samples_per_epoch: 64\nbatch_size: 4\nseed: 3\nmax_steps: 100\nworld_size: {devices}\n"
    )
    command = [sys.executable, "-m", "lightning_resumable_data.cli", "plan", str(config)]
    done = subprocess.run(
        [*command, "--resume", str(ckpt), "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout)["data_changes"]["dry_run"]["left_after"] == left
    math = [i for i in resumed[1] if i >= 56]
    assert not [i for i in before[1] if i >= 56]
    assert math
    assert_whole_passes(before[1] + resumed[1], SOURCES)  # nothing skipped or repeated
    assert len(before[1]) + len(resumed[1]) == 64  # the epoch keeps its budget
    assert_whole_passes(resumed[2], SOURCES)
    assert len([i for i in resumed[2] if i >= 56]) == round(0.2 * 64)  # exact counts
    again = runs.run(  # a second resume, from a checkpoint after the addition, replays it
        runs.root / f"added-again-{devices}",
        ["--ckpt", str(after / "ckpt" / f"step={KILL + 2}.ckpt"), *args[2:]],
    )
    expected = ledger(after).stream()[len(ledger(after).cut(KILL + 2).stream()) :]
    assert ledger(again).stream() == expected
    last = max(int(x["step"]) for lines in ledger(after).ranks for x in lines)
    for step in (KILL - 2, KILL + 1, last):  # lrd trace, before and after the addition
        traced = trace(after / "ckpt" / f"step={last + 1}.ckpt", step)
        trained = [x["ids"] for lines in ledger(after).ranks for x in lines if x["step"] == step]
        trained += [
            x["ids"]
            for lines in ledger(killed_two_sources).ranks
            for x in lines
            if x["step"] == step
        ]
        assert sorted(traced) == sorted(i for ids in trained for i in ids), step
    if devices == 1:  # lrd inspect (its own reader) counts the draws as the run made them
        report: Any = inspect(after / "ckpt" / f"step={KILL + 2}.ckpt")
        read_in_1 = before[1] + ledger(after).cut(KILL + 2).stream()
        counts = {n: sum(f <= i < f + s for i in read_in_1) for n, (f, s) in SOURCES.items()}
        assert report["mixture"]["drawn"] == counts, report
        assert report["data_changes"]["sources_added"] == [
            {"epoch": 1, "position": 16, "sources": ["math"]}
        ]


def test_a_source_added_then_removed_at_the_next_resume_stops_drawing(
    runs: Runs, killed_two_sources: Path
) -> None:
    """From the docs-only attack: the second change used to leave the first in force."""
    ckpt = killed_two_sources / "ckpt" / f"step={KILL}.ckpt"
    added = runs.run(runs.root / "added-then", ["--ckpt", str(ckpt), "--mixture"])
    again = added / "ckpt" / f"step={KILL + 2}.ckpt"
    dropped = runs.run(
        runs.root / "added-then-removed",
        ["--ckpt", str(again), "--mixture", "--drop-source", "math"],
    )
    resumed = read(dropped)
    assert not [i for epoch in resumed.values() for i in epoch if i >= 56]
    assert len(resumed[2]) == 64
    assert_whole_passes(resumed[2], {k: v for k, v in SOURCES.items() if k != "math"})


def test_replaced_files_are_refused_by_default_and_reread_by_option(runs: Runs) -> None:
    out = runs.root / "killed-pinned"
    out.mkdir()
    outcome = runs.server.run(
        ["--out", str(out), "--pins", "etag-1", "--kill", str(KILL)], out / "log.txt"
    )
    assert outcome.rc == -9, outcome.tail()
    ckpt = ["--ckpt", str(out / "ckpt" / f"step={KILL}.ckpt"), "--pins", "etag-2"]
    refused = runs.run(runs.root / "replaced-refused", ckpt, rc=None)
    log = (refused / "log.txt").read_text()
    assert "files changed since the checkpoint ('data.bin')" in log
    assert "replaced='remove_and_add'" in log
    assert not ledger(refused).stream()  # nothing trained
    reread = read(runs.run(runs.root / "replaced", [*ckpt, "--replaced", "remove_and_add"]))
    assert sorted(reread[1]) == list(range(N))  # the new data once in the rest of the epoch
    assert sorted(reread[2]) == list(range(N))
