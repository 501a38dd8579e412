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
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from faults.runner import ForkServer, read_ledger

SCRIPT = Path(__file__).with_name("train.py")
pytestmark = pytest.mark.distributed

SETTINGS: dict[str, list[str]] = {
    "default": [],
    "limit_train_batches=0.5": ["--limit-train-batches", "0.5"],
    "reload_dataloaders_every_n_epochs=1": ["--reload", "1"],
    "max_steps then more": [],  # the first run stops at max_steps mid-epoch (see stop())
    "val_check_interval=0.5": ["--validate", "--val-check-interval", "0.5"],
    "accumulate_grad_batches=3 + phase": ["--accumulate", "3", "--phase-step", "7"],
    "check_val_every_n_epoch=2": ["--validate", "--check-val-every", "2"],
    "num_sanity_val_steps=2": ["--validate", "--sanity", "2"],
}
STOPS = ("mid-epoch", "last batch", "epoch end")
LAYOUTS = {"same": (4, 4), "batch 8->4": (8, 4), "batch 4->8": (4, 8)}


@dataclass(frozen=True)
class Ledger:
    """Ledger lines per rank, in the order they were written."""

    ranks: list[list[dict[str, object]]]

    def cut(self, step: int) -> Ledger:
        """The lines of the batches before optimizer step ``step`` (what a checkpoint holds)."""
        return Ledger([[x for x in lines if int(str(x["step"])) < step] for lines in self.ranks])

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger([a + b for a, b in zip(self.ranks, other.ranks, strict=True)])

    def batches(self) -> list[tuple[object, object, object]]:
        return [(x["step"], x["batch"], x["ids"]) for x in self.ranks[0]]

    def stream(self) -> list[int]:
        """The global sample stream: each step's samples in the epoch's global order."""
        out: list[int] = []
        for lines in zip(*self.ranks, strict=True):
            ids = [list(map(int, line["ids"])) for line in lines]
            for j in range(max(map(len, ids))):
                out += [rank[j] for rank in ids if j < len(rank)]
        return out


def ledger(out: Path) -> Ledger:
    return Ledger([lines for _, lines in sorted(read_ledger(out).items())])


class Runs:
    """Reference runs (cached per setting and batch size) and resumed runs."""

    def __init__(self, server: ForkServer, root: Path) -> None:
        self.server, self.root = server, root
        self.cache: dict[tuple[str, int], Path] = {}
        self.count = 0

    def run(self, out: Path, args: list[str]) -> Path:
        out.mkdir(parents=True, exist_ok=True)
        self.count += 1
        result = self.server.run(["--out", str(out), *args], out / "log.txt", timeout=180)
        assert not result.timed_out, result.tail()
        assert result.rc == 0, result.tail()
        return out

    def reference(self, setting: str, batch: int) -> Path:
        key = (setting, batch)
        if key not in self.cache:
            name = f"ref-{len(self.cache)}"
            self.cache[key] = self.run(
                self.root / name, [*SETTINGS[setting], "--batch-size", str(batch)]
            )
        return self.cache[key]

    def stop_checkpoint(self, setting: str, stop: str, batch: int) -> tuple[Path, Path]:
        """The checkpoint of ``stop`` and the run that wrote it."""
        if setting == "max_steps then more":
            steps = 64 // batch  # 1 + 3/8 epochs, then the run ends (max_steps)
            key = (f"max_steps={steps + steps * 3 // 8}", batch)
            if key not in self.cache:
                self.cache[key] = self.run(
                    self.root / f"first-{batch}",
                    ["--batch-size", str(batch), "--max-steps", str(steps + steps * 3 // 8)],
                )
            run = self.cache[key]
            lines = ledger(run).ranks[0]
            if stop == "epoch end":  # written when max_steps ended the run mid-epoch
                return run / "ckpt" / "epoch=1-end.ckpt", run
            if stop == "last batch":
                last = [x for x in lines if x["epoch"] == 0][-1]
                return run / "ckpt" / f"step={int(str(last['step'])) + 1}.ckpt", run
            return run / "ckpt" / f"step={int(str(lines[-1]['step'])) + 1}.ckpt", run
        run = self.reference(setting, batch)
        if stop == "epoch end":
            return run / "ckpt" / "epoch=0-end.ckpt", run
        epoch1 = [x for x in ledger(run).ranks[0] if x["epoch"] == 1]
        line = epoch1[len(epoch1) // 2] if stop == "mid-epoch" else epoch1[-1]
        return run / "ckpt" / f"step={int(str(line['step'])) + 1}.ckpt", run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ForkServer(SCRIPT)
    yield Runs(server, tmp_path_factory.mktemp("matrix"))
    server.close()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_resume_reads_what_the_uninterrupted_run_reads(
    runs: Runs, setting: str, stop: str, layout: str
) -> None:
    saved_batch, resumed_batch = LAYOUTS[layout]
    checkpoint, writer = runs.stop_checkpoint(setting, stop, saved_batch)
    assert checkpoint.exists(), sorted(p.name for p in checkpoint.parent.iterdir())
    step = int(torch.load(checkpoint, map_location="cpu", weights_only=False)["global_step"])
    before = ledger(writer).cut(step)
    args = [*SETTINGS[setting], "--batch-size", str(resumed_batch), "--ckpt", str(checkpoint)]
    if setting == "max_steps then more":  # the second fit: more steps, to 3 epochs of data
        more = (3 * 64 - len(before.stream())) // resumed_batch
        args += ["--max-epochs", "-1", "--max-steps", str(step + more)]
    name = f"{setting}-{stop}-{layout}".replace(" ", "_").replace(">", "")
    run = runs.run(runs.root / name, args)
    resumed = before + ledger(run)
    reference_setting = "default" if setting == "max_steps then more" else setting
    uninterrupted = ledger(runs.reference(reference_setting, resumed_batch))
    if "phase" in setting:  # the phase starts at its optimizer step, in the documented order
        _assert_documented_mixture_order(resumed, run)
    if saved_batch == resumed_batch:
        assert resumed.batches() == uninterrupted.batches()
    elif "phase" in setting:
        pass  # after an elastic resume later phases are placed for the new layout: above
    else:
        assert resumed.stream() == uninterrupted.stream()


def _assert_documented_mixture_order(resumed: Ledger, run: Path) -> None:
    from lightning_resumable_data import MixtureDataset, MixtureSampler
    from matrix.train import N, SOURCES, Samples

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
    start = sum(len(line["ids"]) for line in lines[:first])  # type: ignore[arg-type]
    assert (phase[0]["epoch"], phase[0]["position"]) == divmod(start, N)


def test_ledger_stream_interleaves_ranks_in_global_order() -> None:
    line = {"step": 0, "epoch": 0, "batch": 0}
    two = Ledger([[{**line, "ids": [0, 2]}], [{**line, "ids": [1, 3]}]])
    assert two.stream() == [0, 1, 2, 3]
    assert json.loads(json.dumps(two.batches())) == [[0, 0, [0, 2]]]
