"""The Trainer-settings matrix: runs forked from a warm process, ledgers, expected streams.

``train.py`` writes each run's ledger (one line per training batch and rank) and its
checkpoints; :class:`Runs` starts runs through a fork server and caches the uninterrupted
reference runs; :class:`Ledger` turns ledgers into comparable forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faults.runner import ForkServer, read_ledger

SCRIPT = Path(__file__).with_name("train.py")
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
# ResumableDataCallback after the checkpoint callbacks, before them, or none passed (the
# DataModule installs one): the documented default.
CALLBACKS = ("none", "before", "after")
LAYOUTS = {"same": (4, 4), "batch 8->4": (8, 4), "batch 4->8": (4, 8)}


@dataclass(frozen=True)
class Ledger:
    """Ledger lines per rank, in the order they were written."""

    ranks: list[list[dict[str, Any]]]

    def cut(self, step: int) -> Ledger:
        """The lines of the batches before optimizer step ``step`` (what a checkpoint holds)."""
        return Ledger([[x for x in lines if int(x["step"]) < step] for lines in self.ranks])

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
        self.cache: dict[tuple[str, int, int, str], Path] = {}
        self.count = 0

    def run(self, out: Path, args: list[str], rc: int | None = 0) -> Path:
        """Run ``train.py`` with ``args``, writing into ``out``; ``rc=None``: any exit code."""
        out.mkdir(parents=True, exist_ok=True)
        self.count += 1
        result = self.server.run(["--out", str(out), *args], out / "log.txt", timeout=180)
        assert not result.timed_out, result.tail()
        assert rc is None or result.rc == rc, result.tail()
        return out

    def reference(
        self, setting: str, batch: int, devices: int = 1, callback: str = "after"
    ) -> Path:
        key = (setting, batch, devices, callback)
        if key not in self.cache:
            name = f"ref-{len(self.cache)}"
            args = [*SETTINGS[setting], "--batch-size", str(batch), "--devices", str(devices)]
            self.cache[key] = self.run(self.root / name, [*args, "--callback", callback])
        return self.cache[key]

    def stop_checkpoint(
        self, setting: str, stop: str, batch: int, devices: int = 1, callback: str = "after"
    ) -> tuple[Path, Path]:
        """The checkpoint of ``stop`` and the run that wrote it."""
        if setting == "max_steps then more":
            steps = 64 // batch  # 1 + 3/8 epochs, then the run ends (max_steps)
            key = (f"max_steps={steps + steps * 3 // 8}", batch, devices, callback)
            if key not in self.cache:
                self.cache[key] = self.run(
                    self.root / f"first-{batch}-{callback}",
                    [
                        "--batch-size",
                        str(batch),
                        "--max-steps",
                        str(steps + steps * 3 // 8),
                        "--callback",
                        callback,
                    ],
                )
            run = self.cache[key]
            lines = ledger(run).ranks[0]
            if stop == "epoch end":  # written when max_steps ended the run mid-epoch
                return run / "ckpt" / "epoch=1-end.ckpt", run
            if stop == "last batch":
                last = [x for x in lines if x["epoch"] == 0][-1]
                return run / "ckpt" / f"step={int(last['step']) + 1}.ckpt", run
            return run / "ckpt" / f"step={int(lines[-1]['step']) + 1}.ckpt", run
        run = self.reference(setting, batch, devices, callback)
        if stop == "epoch end":
            return run / "ckpt" / "epoch=0-end.ckpt", run
        epoch1 = [x for x in ledger(run).ranks[0] if x["epoch"] == 1]
        line = epoch1[len(epoch1) // 2] if stop == "mid-epoch" else epoch1[-1]
        return run / "ckpt" / f"step={int(line['step']) + 1}.ckpt", run


def documented_stream(per_epoch: int, epochs: int = 3) -> list[int]:
    """Epochs 0, 1, 2 of the sampler's global order, each cut after ``per_epoch`` samples."""
    from lightning_resumable_data import DistributedSampler

    out: list[int] = []
    for epoch in range(epochs):
        sampler = DistributedSampler(range(64), 1, 0, seed=3)
        sampler.set_epoch(epoch)
        out += list(sampler)[:per_epoch]
    return out
