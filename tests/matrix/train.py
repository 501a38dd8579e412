"""A small Lightning run under one Trainer setting that logs every batch's sample ids.

Used by ``tests/matrix/test_trainer_settings.py``. Every rank appends one line per training
batch, ``{"step", "epoch", "batch", "ids"}``, to ``OUT/ids_rank<r>.jsonl`` (the *ledger*).
Checkpoints: ``OUT/ckpt/step=<k>.ckpt`` after every optimizer step, and
``OUT/ckpt/epoch=<e>-end.ckpt`` at every epoch end (``save_on_train_epoch_end``), and with
``--validate`` ``OUT/ckpt/step=<k>-val.ckpt`` at every validation end. A run
resumed with ``--ckpt`` writes its own ledger in its own ``--out``. ``--serve`` turns the
module into a fork server (see ``faults/forkserve.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
from faults.forkserve import serve
from ledger_model import LedgerModel as Model
from ledger_model import Samples

from lightning_resumable_data import (
    DataChangePolicy,
    MixturePhase,
    ResumableDataCallback,
    ResumableDataModule,
    ResumeWarning,
)

N = 64
SOURCES = {"web": (0, 40), "code": (40, 16), "math": (56, 8)}  # name: (first id, size)


class BarRecorder(pl.Callback):
    """Writes the progress bar's total, count and title after every training batch."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        bar = trainer.progress_bar_callback.train_progress_bar  # type: ignore[union-attr]
        if hasattr(bar, "n"):  # tqdm's bar: Lightning's default
            line = {"total": bar.total, "n": bar.n, "title": bar.desc}
        else:  # a rich Task: Lightning's default where the rich package is installed
            line = {"total": bar.total, "n": int(bar.completed), "title": bar.description}
        with (self.out / "bar.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")


class Stop(pl.Callback):
    """Stops the run after optimizer step ``step`` as users' runs are stopped.

    ``should_stop``: sets ``trainer.should_stop`` (what ``EarlyStopping`` and ``Timer`` do);
    ``sigterm``: sends SIGTERM to this process (a preemption; Lightning raises at the end of
    the batch and runs ``on_exception``).
    """

    def __init__(self, how: str, step: int) -> None:
        self.how, self.step = how, step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step != self.step:
            return
        if self.how == "should_stop":
            trainer.should_stop = True
        else:
            os.kill(os.getpid(), signal.SIGTERM)


class Pinned(Samples):
    """Samples read from a file with an identity (as a sharded remote dataset's are)."""

    def __init__(self, n: int, etag: str) -> None:
        super().__init__(n)
        self.pins = {"data.bin": etag}


class Kill(pl.Callback):
    """SIGKILLs this process at the start of optimizer step ``step`` (a real crash)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class Slow(pl.Callback):
    """Makes every training batch take ``seconds`` (for a real ``max_time`` stop)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: Any) -> None:
        time.sleep(self.seconds)


def checkpoints(out: Path) -> list[pl.Callback]:
    """``OUT/ckpt/step=<k>.ckpt`` after every optimizer step, ``epoch=<e>-end.ckpt`` at ends."""
    return [
        ModelCheckpoint(
            dirpath=out / "ckpt", filename="{step}", every_n_train_steps=1, save_top_k=-1
        ),
        ModelCheckpoint(
            dirpath=out / "ckpt",
            filename="{epoch}-end",
            every_n_epochs=1,
            save_top_k=-1,
            save_on_train_epoch_end=True,
        ),
    ]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=-1)
    parser.add_argument("--limit-train-batches", type=float, default=1.0)
    parser.add_argument("--reload", type=int, default=0)
    parser.add_argument("--val-check-interval", type=float, default=1.0)
    parser.add_argument("--check-val-every", type=int, default=1)
    parser.add_argument("--sanity", type=int, default=0)
    parser.add_argument("--validate", action="store_true")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--phase-step", type=int, help="a mixture with a phase at this step")
    parser.add_argument("--mixture", action="store_true", help="a mixture without phases")
    parser.add_argument("--weights", help="the mixture's weights: web=0.5,code=0.3,math=0.2")
    parser.add_argument("--drop-source", help="the mixture without this source")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--progress-bar", action="store_true", help="log its total and title")
    parser.add_argument("--ckpt")
    parser.add_argument("--n", type=int, default=N, help="samples in the training dataset")
    parser.add_argument("--kill", type=int, help="SIGKILL at the start of this step")
    parser.add_argument("--pins", help="the dataset's file has this identity (an ETag)")
    parser.add_argument("--replaced", choices=("refuse", "remove_and_add"))
    parser.add_argument(
        "--grown", choices=("this_epoch", "next_epoch", "refuse"), help="DataChangePolicy(grown=)"
    )
    parser.add_argument("--refit-max-steps", type=int, help="then fit again to this many steps")
    parser.add_argument(
        "--callback",
        choices=("after", "before", "none"),
        default="after",
        help="ResumableDataCallback after the checkpoint callbacks, before them, or none "
        "(the DataModule installs one)",
    )
    parser.add_argument(
        "--last", action="store_true", help="only OUT/last/: ModelCheckpoint(save_last=True)"
    )
    parser.add_argument(
        "--last-every", type=int, default=0, help="--last checkpoints every N steps instead"
    )
    parser.add_argument("--stop", choices=("should_stop", "sigterm"), help="stop at --stop-step")
    parser.add_argument("--stop-step", type=int, default=0)
    parser.add_argument("--max-time", type=float, help="seconds (Trainer(max_time=...))")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--evaluate", choices=("test", "validate"), help="after the fit")
    parser.add_argument("--evaluate-step", type=int, help="evaluate ckpt/step=<k>.ckpt")
    parser.add_argument("--skip-steps", help="A:B: ResumableDataCallback(skip_steps=[(A, B)])")
    parser.add_argument(
        "--then",
        choices=("same", "new", "new-ckpt"),
        help="after evaluating, fit to --refit-max-steps on the same trainer, a new trainer, "
        "or a new trainer from the evaluated checkpoint",
    )
    return parser.parse_args(argv)


def strategy(devices: int) -> str:
    """DDP as torchrun launched it; else forked processes from this one (or none)."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "ddp"
    return "ddp_fork" if devices > 1 else "auto"


def main(argv: Sequence[str]) -> None:
    warnings.simplefilter("error", ResumeWarning)  # a resume that warns is a failed cell
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train: Any = Samples(args.n)
    changes: dict[str, Any] = {}  # without options: the documented default, no argument
    if args.grown or args.replaced:
        policy = DataChangePolicy(
            grown=args.grown or "this_epoch", replaced=args.replaced or "refuse"
        )
        changes["data_changes"] = policy
    if args.pins:
        train = Pinned(args.n, args.pins)
    weights, samples_per_epoch, phases = None, None, []
    if args.phase_step is not None or args.mixture:
        train = {name: Samples(size, start) for name, (start, size) in SOURCES.items()}
        weights = {"web": 0.5, "code": 0.3, "math": 0.2}
        if args.weights:
            weights = {k: float(v) for k, v in (kv.split("=") for kv in args.weights.split(","))}
        if args.drop_source:
            del train[args.drop_source], weights[args.drop_source]
        samples_per_epoch = N
        later = {"web": 0.2, "code": 0.3, "math": 0.5}
        if args.phase_step is not None:
            phases = [MixturePhase(start_step=args.phase_step, weights=later)]
    datamodule = ResumableDataModule(
        train,
        val_dataset=Samples(10) if args.validate or args.evaluate else None,
        test_dataset=Samples(10) if args.evaluate else None,
        batch_size=args.batch_size,
        weights=weights,
        samples_per_epoch=samples_per_epoch,
        seed=3,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
        **changes,  # without --grown: the documented default, no argument
    )
    model = Model(args.out)
    trainer = make_trainer(args, phases)
    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)
    if args.evaluate is not None:  # evaluate a checkpoint, then train on
        checkpoint = args.out / "ckpt" / f"step={args.evaluate_step}.ckpt"
        getattr(trainer, args.evaluate)(model, datamodule=datamodule, ckpt_path=checkpoint)
        if args.then == "same":
            trainer.fit_loop.epoch_loop.max_steps = args.refit_max_steps
            trainer.fit(model, datamodule=datamodule)
        elif args.then is not None:
            args.max_steps = args.refit_max_steps
            resume = checkpoint if args.then == "new-ckpt" else None
            make_trainer(args, phases).fit(model, datamodule=datamodule, ckpt_path=resume)
    elif args.refit_max_steps is not None:  # the same trainer, more steps: training continues
        trainer.fit_loop.epoch_loop.max_steps = args.refit_max_steps
        trainer.fit(model, datamodule=datamodule)
    if torch.distributed.is_initialized():  # else gloo's threads may abort the exit (SIGABRT)
        torch.distributed.destroy_process_group()


def make_trainer(args: argparse.Namespace, phases: list[MixturePhase]) -> pl.Trainer:
    # users' default instead: an epoch-end checkpoint and last.ckpt (also on an exception)
    callbacks: list[pl.Callback] = [] if args.last else [*checkpoints(args.out)]
    if args.validate:  # and one at every validation end, mid-epoch ones included
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.out / "ckpt",
                filename="{step}-val",
                monitor="val",
                save_top_k=-1,
                save_on_train_epoch_end=False,
            )
        )
    if args.last:
        callbacks.append(
            ModelCheckpoint(
                dirpath=args.out / "last",
                save_last=True,
                save_on_exception=True,
                every_n_train_steps=args.last_every or None,
            )
        )
    if args.stop is not None:
        callbacks.append(Stop(args.stop, args.stop_step))
    if args.step_sleep:
        callbacks.append(Slow(args.step_sleep))
    if args.kill is not None:
        callbacks.append(Kill(args.kill))
    first, stop = map(int, (args.skip_steps or "0:1").split(":"))
    skips = [(first, stop)] if args.skip_steps else []
    data_callback = ResumableDataCallback(phases=phases, log_every_n_steps=0, skip_steps=skips)
    if args.callback == "after":
        callbacks.append(data_callback)
    elif args.callback == "before":
        callbacks.insert(0, data_callback)
    if args.progress_bar:
        callbacks.append(BarRecorder(args.out))
    limit = args.limit_train_batches
    return pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy(args.devices),
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        max_time=None if args.max_time is None else {"seconds": args.max_time},
        limit_train_batches=int(limit) if limit > 1 else limit,
        reload_dataloaders_every_n_epochs=args.reload,
        val_check_interval=args.val_check_interval,
        check_val_every_n_epoch=args.check_val_every,
        num_sanity_val_steps=args.sanity,
        limit_val_batches=2 if args.validate or args.evaluate else 0,
        accumulate_grad_batches=args.accumulate,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=args.progress_bar,
        enable_model_summary=False,
        default_root_dir=args.out,
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
