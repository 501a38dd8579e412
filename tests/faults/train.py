"""A small Lightning run that logs every step's sample ids and dies where it is told to.

Extends ``tests/scripts/lightning_train.py`` for the fault campaign (``tests/faults``). Every
rank appends ``{"step", "epoch", "batch", "ids"}`` lines to ``OUT/ids_rank<r>.jsonl`` (the
*ledger*) and ``ModelCheckpoint`` writes ``OUT/ckpt/step=<k>.ckpt`` after every step. With
``--fault KIND:AT[:ARG]`` the run injects one fault:

* ``step:K:R`` -- rank ``R`` SIGKILLs the process group inside ``training_step`` of global
  step ``K`` (after logging it: a step that started but was never checkpointed);
* ``checkpoint:K:F`` -- rank 0 writes the first fraction ``F`` of ``step=K.ckpt``, then
  SIGKILLs the group (the newest checkpoint file is truncated);
* ``validation:K`` -- SIGKILL inside ``validation_step`` of the validation after step ``K``;
* ``epoch_end:E`` / ``epoch_start:E`` -- SIGKILL in ``on_train_epoch_end`` /
  ``on_train_epoch_start`` of epoch ``E``;
* ``phase:K`` -- SIGKILL inside ``training_step`` of global step ``K`` (a phase start);
* ``prefetch_iter:K`` -- SIGKILL right after the training loader's iterator is created at
  global step ``>= K`` while its workers prefetch (needs ``--workers``);
* ``prefetch_worker:N:R`` / ``worker_kill:N:R`` / ``worker_raise:N:R`` -- the first worker
  of rank ``R``, on fetching its ``N``-th sample, SIGKILLs the whole group / SIGKILLs only
  itself / raises ``RuntimeError`` (needs ``--workers``).

A SIGKILL hits the whole process group: the run must be started in a session of its own.
``--serve`` turns this module into a fork server: it imports torch and Lightning once, then
reads one JSON request a line from stdin (``{"argv": [...], "log": path, "timeout": s}``),
runs each in a forked child that starts a new session (``ddp_fork`` then forks the ranks),
and answers ``{"rc": ..., "wall": ..., "timed_out": ...}``. That saves the ~4 s of imports
per process that dominate a short run.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.multiprocessing  # imported once by the fork server
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
import ledger_model
from ledger_model import LedgerModel

from faults.forkserve import serve
from lightning_resumable_data import (
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    StatefulDataLoader,
)

SOURCES = {"web": 64, "code": 24, "math": 12}
STARTS = {"web": 0, "code": 64, "math": 88}
PHASE_WEIGHTS = (
    {"web": 0.1, "code": 0.2, "math": 0.7},
    {"web": 0.5, "code": 0.4, "math": 0.1},
    {"web": 0.2, "code": 0.7, "math": 0.1},
)
PLAIN_SIZE = 96
INJECTED = "injected fault"


def kill_group() -> None:
    """SIGKILL every process of this run: the ranks, their loader workers, the launcher."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


class Fault:
    """One planned fault, parsed from ``KIND:AT[:ARG]``."""

    def __init__(self, spec: str | None) -> None:
        parts = spec.split(":") if spec else ["none", "-1"]
        self.kind = parts[0]
        self.at = int(parts[1])
        self.arg = parts[2] if len(parts) > 2 else "0"

    def is_(self, *kinds: str) -> bool:
        return self.kind in kinds


class Samples(ledger_model.Samples):
    """Sample ``i`` carries its global id (``start + i``) and a feature vector.

    In a loader worker it counts its fetches and may inject a worker fault.
    """

    rank = 0  # set per rank in ``FaultDataModule.setup``; workers inherit it
    fetched = 0  # samples this worker process has loaded (all sources together)

    def __init__(self, n: int, start: int = 0, fault: Fault | None = None) -> None:
        super().__init__(n, start)
        self.fault = fault or Fault(None)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        fault = self.fault
        if fault.is_("prefetch_worker", "worker_kill", "worker_raise"):
            info = torch.utils.data.get_worker_info()
            if info is not None and info.id == 0 and Samples.rank == int(fault.arg):
                Samples.fetched += 1
                if Samples.fetched == fault.at:
                    if fault.kind == "prefetch_worker":
                        kill_group()
                    elif fault.kind == "worker_kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    else:
                        raise RuntimeError(f"{INJECTED}: worker_raise at fetch {fault.at}")
        return super().__getitem__(index)


class Model(LedgerModel):
    def __init__(self, out: Path, fault: Fault) -> None:
        super().__init__(out)
        self.fault = fault

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)  # logged in the ledger
        if self.fault_here():
            kill_group()  # in the middle of the step: logged, never checkpointed
        return loss

    def fault_here(self) -> bool:
        """Whether a ``step`` or ``phase`` fault fires in this training step on this rank."""
        fault = self.fault
        if not fault.is_("step", "phase") or self.global_step != fault.at:
            return False
        return fault.kind == "phase" or self.global_rank == int(fault.arg)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        if self.fault.is_("validation") and self.global_step == self.fault.at and batch_idx == 1:
            kill_group()
        super().validation_step(batch, batch_idx)


class EpochFaults(pl.Callback):
    """SIGKILL at an epoch boundary."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    # Data epochs are counted in steps: after a resume from a checkpoint written on an
    # epoch's last batch, Lightning's own epoch counter lags the data's by one (the loader
    # owns the data epoch, so the order is right), and ``current_epoch`` would fire late.

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        steps = int(trainer.num_training_batches)
        if self.fault.is_("epoch_start") and trainer.global_step == self.fault.at * steps:
            kill_group()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        steps = int(trainer.num_training_batches)
        if self.fault.is_("epoch_end") and trainer.global_step == (self.fault.at + 1) * steps:
            kill_group()


class DieOnSigterm(pl.Callback):
    """Let SIGTERM kill a rank even while it waits in a collective, as a scheduler would.

    When one rank fails (a worker that raises), the launcher terminates the others with
    SIGTERM; Lightning's Python-level handler cannot run while a rank blocks in a gloo
    all-reduce waiting for the dead one, so without this the job would hang.
    """

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class TruncatingCheckpointIO(TorchCheckpointIO):
    """Writes part of the checkpoint of one step, then SIGKILLs the run mid-write."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if self.fault.is_("checkpoint") and checkpoint.get("global_step") == self.fault.at:
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            data = buffer.getvalue()
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data[: int(len(data) * float(self.fault.arg))])
                f.flush()
                os.fsync(f.fileno())
            kill_group()
        super().save_checkpoint(checkpoint, path, storage_options)


class PrefetchKillLoader(StatefulDataLoader):
    """Kills the run right after an iterator is created, while its workers prefetch."""

    fault = Fault(None)
    trainer: pl.Trainer | None = None

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        trainer, fault = PrefetchKillLoader.trainer, PrefetchKillLoader.fault
        if fault.is_("prefetch_iter") and trainer is not None and trainer.global_step >= fault.at:
            time.sleep(0.3)  # the workers are now loading the first batches
            kill_group()
        return iterator


class FaultDataModule(ResumableDataModule):
    def __init__(self, fault: Fault, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fault = fault

    def setup(self, stage: str) -> None:
        if self.trainer is not None:
            Samples.rank = self.trainer.global_rank

    def train_dataloader(self) -> StatefulDataLoader:
        loader = super().train_dataloader()
        if self.fault.is_("prefetch_iter"):
            loader.__class__ = PrefetchKillLoader
            PrefetchKillLoader.fault, PrefetchKillLoader.trainer = self.fault, self.trainer
        return loader


def phases_for(steps: Sequence[int]) -> list[MixturePhase]:
    return [
        MixturePhase(start_step=s, weights=PHASE_WEIGHTS[i % len(PHASE_WEIGHTS)])
        for i, s in enumerate(steps)
    ]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--strategy", default="ddp_fork", choices=["ddp", "ddp_fork"])
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--ckpt")
    parser.add_argument("--data", default="mixture", choices=["mixture", "plain"])
    parser.add_argument("--samples-per-epoch", type=int, default=96)
    parser.add_argument("--phases", default="", help="comma-separated phase start steps")
    parser.add_argument("--val-every", type=int)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--fault")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fault = Fault(args.fault)
    phases = phases_for([int(s) for s in args.phases.split(",") if s])
    train: Any
    if args.data == "mixture":
        train = {name: Samples(n, STARTS[name], fault) for name, n in SOURCES.items()}
        weights: dict[str, float] | None = {"web": 0.6, "code": 0.3, "math": 0.1}
        samples_per_epoch: int | None = args.samples_per_epoch
    else:
        train, weights, samples_per_epoch = Samples(PLAIN_SIZE, 0, fault), None, None
    callbacks: list[pl.Callback] = [
        ModelCheckpoint(
            dirpath=args.out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
        ResumableDataCallback(phases=phases, log_every_n_steps=0),
        EpochFaults(fault),
        DieOnSigterm(),
    ]
    datamodule = FaultDataModule(
        fault,
        train_dataset=train,
        val_dataset=Samples(10) if args.val_every else None,
        batch_size=args.batch_size,
        weights=weights,
        samples_per_epoch=samples_per_epoch,
        seed=args.seed,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=args.strategy if args.devices > 1 else "auto",
        max_steps=args.max_steps,
        max_epochs=-1,
        val_check_interval=args.val_every,
        check_val_every_n_epoch=None if args.val_every else 1,
        num_sanity_val_steps=0,
        limit_val_batches=2 if args.val_every else 0,
        callbacks=callbacks,
        plugins=[TruncatingCheckpointIO(fault)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    trainer.fit(Model(args.out, fault), datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
