"""Classification with ``ResumableDataModule``: random augmentations that survive a resume.

What it shows:

* a map-style dataset whose augmentation (feature noise and feature dropout) draws from
  ``index.rng()``: with ``sample_keys=True`` the sampler hands ``__getitem__`` a
  ``SampleKey``, an ``int`` that also carries (seed, epoch, position in the epoch's order);
* the three lines of the Lightning story: a ``ResumableDataModule``, a
  ``ResumableDataCallback`` and ``trainer.fit(..., ckpt_path=...)``;
* the promise: a run resumed from the checkpoint of step ``k`` (as after a crash at step
  ``k``) trains on exactly the batches, augmentations included, of the uninterrupted run,
  here with another ``num_workers`` (0 before, 2 after).

Run::

    python examples/single_dataset.py            # a few hundred steps
    python examples/single_dataset.py --smoke    # a few seconds

It shows the loss and the validation accuracy in the progress bar and prints, at the end,
``Verdict: IDENTICAL`` (exit status 0) or ``Verdict: DIFFERENT`` (exit status 1). The
checkpoints stay in ``runs/single_dataset/``; the last line says how to ``lrd inspect`` one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from _common import inspect_hint, quiet_lightning, run_folder
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_resumable_data import ResumableDataCallback, ResumableDataModule, SampleKey

FEATURES, CLASSES = 16, 3


class Blobs(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """``n`` points of ``CLASSES`` Gaussian blobs in ``FEATURES`` dimensions (a tabular task).

    The blobs' centres (the task) are the same for every ``seed``; ``seed`` draws the points,
    so a training and a validation set of different seeds pose the same task.

    With ``augment=True`` each read adds Gaussian noise and drops 10% of the features, drawn
    from the sample's key: the same sample at the same place of the same epoch gets the same
    augmentation, whichever worker or rank loads it.
    """

    def __init__(self, n: int, seed: int, augment: bool) -> None:
        centres = np.random.default_rng(0).normal(0.0, 2.0, size=(CLASSES, FEATURES))
        rng = np.random.default_rng([seed, 1])
        self.labels = rng.integers(CLASSES, size=n)
        self.features = (centres[self.labels] + rng.normal(size=(n, FEATURES))).astype(np.float32)
        self.augment = augment

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        x = self.features[index].copy()
        if self.augment and isinstance(index, SampleKey):
            rng = index.rng()  # keyed on (seed, epoch, position), not on the worker's RNG
            x += rng.normal(0.0, 0.3, size=FEATURES).astype(np.float32)
            x[rng.random(FEATURES) < 0.1] = 0.0
        return {
            "id": torch.tensor(int(index)),
            "x": torch.from_numpy(x),
            "y": torch.tensor(int(self.labels[index])),
        }


class Classifier(pl.LightningModule):
    """A small MLP that also records what it trained on, step by step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES)
        )
        self.seen: dict[int, tuple[list[int], float]] = {}  # step -> (sample ids, sum of x)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.seen[self.global_step] = (batch["id"].tolist(), float(batch["x"].sum()))
        loss = torch.nn.functional.cross_entropy(self.net(batch["x"]), batch["y"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        accuracy = (self.net(batch["x"]).argmax(-1) == batch["y"]).float().mean()
        self.log("val_acc", accuracy, prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def fit(
    args: argparse.Namespace, root: Path, num_workers: int, ckpt_path: str | None
) -> dict[int, tuple[list[int], float]]:
    """Train until ``args.steps``, from scratch or from ``ckpt_path``; return what was seen.

    A checkpoint is written every ``args.resume_step`` steps (the one the resume uses).
    """
    datamodule = ResumableDataModule(  # 1. the DataModule
        Blobs(args.samples, seed=0, augment=True),
        val_dataset=Blobs(args.samples // 4, seed=1, augment=False),
        batch_size=args.batch_size,
        seed=42,
        sample_keys=True,  # __getitem__ receives SampleKey indices
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.steps,
        max_epochs=-1,
        callbacks=[
            ResumableDataCallback(),  # 2. the callback (phases, if any, go here)
            ModelCheckpoint(
                dirpath=root / "ckpt",
                filename="{step}",
                every_n_train_steps=args.resume_step,
                save_top_k=-1,
            ),
        ],
        logger=False,
        enable_progress_bar=not args.smoke,
        enable_model_summary=False,
        log_every_n_steps=1,
        default_root_dir=root,
    )
    model = Classifier()
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)  # 3. resume with ckpt_path
    return model.seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a run of a few seconds")
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps in all")
    parser.add_argument("--resume-step", type=int, default=None, help="default: mid-run")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    if args.smoke:
        args.samples, args.batch_size, args.steps = 256, 16, 24  # 16 steps an epoch
    if args.resume_step is None:
        args.resume_step = args.steps * 5 // 6
    resume = args.resume_step
    quiet_lightning()

    root = run_folder("single_dataset")
    print(f"1. uninterrupted run: {args.steps} steps, num_workers=0")
    reference = fit(args, root / "reference", num_workers=0, ckpt_path=None)
    checkpoint = root / "reference" / "ckpt" / f"step={resume}.ckpt"
    print(f"2. resume from {checkpoint.name} (as after a crash), num_workers=2")
    resumed = fit(args, root / "resumed", num_workers=2, ckpt_path=str(checkpoint))

    expected = {step: seen for step, seen in reference.items() if step >= resume}
    same = resumed == expected
    print(
        f"   steps {resume}..{args.steps - 1}: sample ids and augmented features "
        f"{'equal' if same else 'differ from'} the uninterrupted run's"
    )
    print(f"Verdict: {'IDENTICAL' if same else 'DIFFERENT'}")
    print(inspect_hint(checkpoint))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
