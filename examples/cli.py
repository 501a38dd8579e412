"""A ``LightningCLI`` entry point whose data module is configured from YAML.

What it shows:

* a ``ResumableDataModule`` subclass whose ``__init__`` takes plain, type-hinted values
  (``num_samples: int``, ``batch_size: int``, ``seed: int``, ...) and that builds its
  datasets itself in ``setup``: everything a run needs is in ``cli_config.yaml``;
* ``ResumableDataCallback`` and ``ModelCheckpoint(save_last=True)`` configured under
  ``trainer.callbacks`` in the same file;
* resuming with ``--ckpt_path last``: the run goes on at the step, epoch and sample where
  the last checkpoint was written.

Run::

    python examples/cli.py fit --config examples/cli_config.yaml
    python examples/cli.py fit --config examples/cli_config.yaml --trainer.max_steps 400 \\
        --ckpt_path last                                  # continue the same run

    # smoke: small and short, then resume it
    python examples/cli.py fit --config examples/cli_config.yaml --data.num_samples 256 \\
        --trainer.max_steps 6 --trainer.default_root_dir runs/cli_smoke
    python examples/cli.py fit --config examples/cli_config.yaml --data.num_samples 256 \\
        --trainer.max_steps 10 --trainer.default_root_dir runs/cli_smoke --ckpt_path last

Each run prints where it starts (``starting at step ...``) and where it stops, and the
``lrd inspect`` command for its last checkpoint (kept under ``runs/``). Needs the ``[cli]``
extra (jsonargparse): ``pip install -e ".[cli]"`` from the clone.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from _common import inspect_hint, quiet_lightning
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from typing_extensions import override

from lightning_resumable_data import ResumableDataModule, SampleKey, StatefulDataLoader


class Blobs(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Gaussian blobs; with ``noise > 0`` each read adds noise keyed on the ``SampleKey``.

    The centres (the task) are the same for every ``seed``; ``seed`` draws the points, so the
    validation set (another seed) poses the training set's task.
    """

    def __init__(
        self, num_samples: int, num_features: int, num_classes: int, seed: int, noise: float
    ) -> None:
        centres = np.random.default_rng(0).normal(0.0, 2.0, size=(num_classes, num_features))
        rng = np.random.default_rng([seed, 1])
        self.labels = torch.from_numpy(rng.integers(num_classes, size=num_samples))
        points = centres[self.labels.numpy()] + rng.normal(size=(num_samples, num_features))
        self.features = torch.from_numpy(points.astype(np.float32))
        self.noise = noise

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.features[index]
        if self.noise > 0 and isinstance(index, SampleKey):
            x = x + self.noise * torch.from_numpy(index.rng().standard_normal(x.shape[0])).float()
        return x, self.labels[index]


class BlobsDataModule(ResumableDataModule):
    """Builds its train and validation sets from plain values (LightningCLI-friendly).

    Args:
        num_samples: Training samples.
        num_features: Features per sample.
        num_classes: Classes.
        noise: Standard deviation of the keyed augmentation noise.
        batch_size: Samples per batch on each rank.
        num_workers: Loader worker processes.
        seed: Seed of the data and of the order.
    """

    def __init__(
        self,
        num_samples: int = 8192,
        num_features: int = 16,
        num_classes: int = 3,
        noise: float = 0.3,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            seed=seed,
            sample_keys=noise > 0,
        )
        self.num_samples = num_samples
        self.num_features = num_features
        self.num_classes = num_classes
        self.noise = noise

    @override
    def setup(self, stage: str) -> None:
        if self.train_dataset is None:
            shape = (self.num_features, self.num_classes)
            self.train_dataset = Blobs(self.num_samples, *shape, self.seed, self.noise)
            self.val_dataset = Blobs(max(self.num_samples // 8, 1), *shape, self.seed + 1, 0.0)


class Classifier(pl.LightningModule):
    """A small MLP.

    Args:
        num_features: Inputs (linked to ``data.num_features``).
        num_classes: Outputs (linked to ``data.num_classes``).
        hidden: Hidden units.
        lr: Learning rate.
    """

    def __init__(
        self, num_features: int = 16, num_classes: int = 3, hidden: int = 64, lr: float = 1e-2
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(num_features, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, num_classes),
        )
        self.lr = lr

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def on_train_start(self) -> None:
        self._report("starting at")

    def on_train_end(self) -> None:
        self._report("stopped at")

    def _report(self, what: str) -> None:
        loader = self.trainer.train_dataloader
        if isinstance(loader, StatefulDataLoader) and self.trainer.is_global_zero:
            state = loader.state_dict()
            print(  # not self.print: at the fit's end the progress bar is closed and drops it
                f"{what} step {self.global_step}: data epoch {state['epoch']}, "
                f"{state['consumed']} samples of it consumed"
            )


class CLI(LightningCLI):
    """Links the model's input and output sizes to the data's."""

    @override
    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_features", "model.num_features")
        parser.link_arguments("data.num_classes", "model.num_classes")


def main() -> None:
    torch.set_num_threads(1)  # a tiny model: more threads only add overhead
    quiet_lightning()
    cli = CLI(Classifier, BlobsDataModule, save_config_kwargs={"overwrite": True})
    last = getattr(cli.trainer.checkpoint_callback, "last_model_path", "")
    if last:
        path = Path(last).resolve()
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(inspect_hint(shown))


if __name__ == "__main__":
    main()
