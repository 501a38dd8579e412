"""Real Trainer runs over one image-caption set in the peers' three formats: exact resume.

The set (``write_images.py``, run under the peers' interpreter) is written by MosaicML
Streaming's ``MDSWriter``, WebDataset's ``ShardWriter`` and ``litdata.optimize``, and read in
place by ``open_mds``, ``open_webdataset`` and ``open_litdata``. ``train_formats.py`` trains on
it as the docs show (``ResumableDataModule`` of one format, or of a mapping of all three, no
callback passed, ``trainer.fit(model, datamodule=dm, ckpt_path=...)``), and writes a ledger of
every sample id each rank trained on, step by step. A run SIGKILLed mid-epoch and resumed from
its newest checkpoint must train the uninterrupted run's ledger, sample for sample, over two
epochs; two DDP processes resumed on one must train the uninterrupted global sample stream,
every sample once per epoch.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from faults.runner import (
    ForkServer,
    compare,
    epochs,
    newest_complete_checkpoint,
    read_ledger,
    steps,
    truncate_ledger,
)

from formats.train_formats import OFFSETS, check_sample, fields, open_sources
from formats.write_images import SAMPLES, caption, sha256

pytestmark = pytest.mark.slow  # Lightning runs in processes of their own

ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("write_images.py")
SCRIPT = Path(__file__).with_name("train_formats.py")
BATCH = 4  # global samples per step, in every layout below
EPOCH = {"mixture": 3 * SAMPLES, **dict.fromkeys(OFFSETS, SAMPLES)}  # samples per epoch


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = Path(os.environ.get("LRD_PEERS_PYTHON", ROOT / ".venv-peers/bin/python"))
    if not python.exists():
        pytest.skip(
            f"no peers' interpreter at {python}: run `make setup` (or set LRD_PEERS_PYTHON)"
        )
    out = tmp_path_factory.mktemp("images")
    done = subprocess.run(
        [str(python), str(WRITER), str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, f"write_images.py failed:\n{done.stderr[-4000:]}"
    return out


class Runs:
    """``train_formats.py`` runs forked from a warm server; uninterrupted ones cached."""

    def __init__(self, corpora: Path, root: Path) -> None:
        self.corpora, self.root = corpora, root
        self.server: ForkServer | None = None
        self.references: dict[tuple[str, int], Path] = {}

    def run(self, out: Path, *args: str, killed: bool = False) -> Path:
        """Run the script into ``out``; it must finish, or (``killed``) die by SIGKILL."""
        if self.server is None:
            self.server = ForkServer(SCRIPT)
        out.mkdir(parents=True, exist_ok=True)
        argv = ["--out", str(out), "--corpora", str(self.corpora), *args]
        result = self.server.run(argv, out / f"log{len(list(out.glob('log*')))}.txt", 120)
        assert not result.timed_out, result.tail()
        assert result.rc == (-9 if killed else 0), result.tail()
        return out

    def reference(self, data: str, devices: int = 1) -> Path:
        """The uninterrupted run of ``data`` on ``devices`` ranks (``BATCH`` samples a step)."""
        key = (data, devices)
        if key not in self.references:
            out = self.root / f"reference-{data}-{devices}"
            size = str(BATCH // devices)
            self.references[key] = self.run(
                out, "--data", data, "--devices", str(devices), "--batch-size", size
            )
        return self.references[key]

    def lineage(
        self, out: Path, data: str, kills: Sequence[str], *layouts: Sequence[str]
    ) -> list[int]:
        """One training of ``data`` into ``out``, SIGKILLed once per ``kills`` entry.

        Run ``i`` (``layouts[i]``: more arguments, the last layout for the runs after) starts
        from the newest checkpoint the run before it completed, and rank ``R`` SIGKILLs its
        process group in step ``K`` (``kills[i] = "K:R"``); the last run finishes. The
        ledger keeps what each checkpoint holds: the steps a killed run trained after its
        newest checkpoint are forgotten (the next run trains them again, into the same
        ledger). Returns the steps the runs resumed at.
        """
        layouts = layouts or ((),)
        resumed: list[int] = []
        for i, kill in enumerate([*kills, None]):
            args = ["--data", data, *layouts[min(i, len(layouts) - 1)]]
            if resumed:
                args += ["--ckpt", str(out / "ckpt" / f"step={resumed[-1]}.ckpt")]
            if kill is None:
                self.run(out, *args)
                break
            self.run(out, *args, "--kill", kill, killed=True)
            resume = newest_complete_checkpoint(out / "ckpt")
            assert resume.path is not None, f"the killed run left no checkpoint in {out}"
            truncate_ledger(out, resume.step)
            resumed.append(resume.step)
        return resumed

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture(scope="module")
def runs(corpora: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    runs = Runs(corpora, tmp_path_factory.mktemp("runs"))
    yield runs
    runs.close()


def global_stream(out: Path) -> list[int]:
    """The trained samples in the epoch's global order: each step's rows interleaved by rank.

    Rank ``r`` of ``W`` trains positions ``r, r + W, ...`` of a step's ``B * W``; a step
    trained by one rank (after a resume on one process) is that rank's row.
    """
    rows: dict[int, list[list[int]]] = {}
    for _, lines in sorted(read_ledger(out).items()):
        for line in lines:
            rows.setdefault(int(line["step"]), []).append(list(map(int, line["ids"])))
    stream: list[int] = []
    for step in sorted(rows):
        width = max(map(len, rows[step]))
        stream += [ids[j] for j in range(width) for ids in rows[step] if j < len(ids)]
    return stream


def every_id(data: str) -> Counter[int]:
    """Each sample of one epoch of ``data`` once (ledger ids: format offset + sample id)."""
    names = list(OFFSETS) if data == "mixture" else [data]
    return Counter(OFFSETS[name] + i for name in names for i in range(SAMPLES))


def test_the_three_writers_store_one_set_that_the_readers_return(corpora: Path) -> None:
    """Each format's reader returns every sample once, in file order, with its PNG and caption."""
    stored = json.loads((corpora / "images.json").read_text())["png_sha256"]
    assert stored["mds"] == stored["wds"] == stored["litdata"]  # the same PNG bytes
    for name, dataset in open_sources(corpora).items():
        shards = len(dataset.shard_sizes)
        assert shards >= 4, (name, dataset.shard_sizes)  # several shards: the order crosses them
        samples = [dataset[i] for i in range(len(dataset))]
        assert [check_sample(name, sample, stored) for sample in samples] == list(range(SAMPLES))
        i, png, text = fields(name, samples[5])
        assert (i, sha256(png), text) == (5, stored[name][5], caption(5))
        wrong = dict(samples[5])  # the check the collate makes is not vacuous
        wrong["png" if name != "litdata" else "image"] = fields(name, samples[6])[1]
        with pytest.raises(ValueError, match=f"{name} sample 5: PNG sha256"):
            check_sample(name, wrong, stored)
        dataset.close()


@pytest.mark.parametrize("data", ["mixture", "mds"])
def test_sigkill_mid_epoch_then_resume_trains_the_uninterrupted_ledger(
    runs: Runs, data: str, tmp_path: Path
) -> None:
    """Killed mid-epoch 0 and mid-epoch 1, resumed each time: the ledger is the reference's."""
    per_epoch = EPOCH[data] // BATCH  # steps
    out = tmp_path / "lineage"
    kills = [f"{per_epoch // 2 - 1}:0", f"{per_epoch + per_epoch // 2}:0"]
    first, second = runs.lineage(out, data, kills)
    assert 0 < first < per_epoch < second < 2 * per_epoch, (first, second)  # both mid-epoch
    reference, resumed = steps(runs.reference(data)), steps(out)
    assert len(reference.ids) == 2 * per_epoch
    checked, mismatches = compare(reference, resumed)
    assert mismatches == []
    assert checked == 2 * EPOCH[data]
    assert epochs(resumed, EPOCH[data]) == [every_id(data)] * 2  # every sample once an epoch


@pytest.mark.distributed
def test_two_ddp_processes_killed_then_resumed_on_one_train_the_global_stream(
    runs: Runs, tmp_path: Path
) -> None:
    """2 gloo ranks (SIGKILLed mid-epoch) resumed on 1: the uninterrupted global stream."""
    per_epoch = EPOCH["mixture"] // BATCH
    uninterrupted = global_stream(runs.reference("mixture", devices=2))
    assert uninterrupted == global_stream(runs.reference("mixture"))  # G does not depend on W
    out = tmp_path / "elastic"
    two_ranks = ["--devices", "2", "--batch-size", str(BATCH // 2)]
    one_rank = ["--devices", "1", "--batch-size", str(BATCH)]
    (step,) = runs.lineage(out, "mixture", [f"{per_epoch // 2}:1"], two_ranks, one_rank)
    assert 0 < step < per_epoch  # resumed mid-epoch 0
    assert {rank: len(lines) for rank, lines in read_ledger(out).items()} == {
        0: 2 * per_epoch,
        1: step,
    }
    assert steps(out).duplicates == []
    stream = global_stream(out)
    assert stream == uninterrupted
    size = EPOCH["mixture"]
    assert [Counter(stream[e * size : (e + 1) * size]) for e in range(2)] == [
        every_id("mixture")
    ] * 2
