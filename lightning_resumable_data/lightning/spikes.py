"""A loss-spike watcher: on a spike, name the data of the steps around it, and how to skip it.

An example of the provenance API (:mod:`~.trace`) in a callback. It keeps a window of the
training loss; a loss whose robust z-score (distance to the window's median, in units of
its median absolute deviation) passes ``threshold`` is a spike. It then traces the spike's
step and the ``before`` steps ahead of it from the live data history, logs their samples
(with sources for a mixture), and the ``lrd skip`` command that resumes past them from the
last checkpoint written before them. Every spike is kept in :attr:`LossSpikeMonitor.spikes`.

Example::

    monitor = LossSpikeMonitor(threshold=6.0, window=100, before=2)
    trainer = Trainer(callbacks=[monitor, ModelCheckpoint(every_n_train_steps=100)])
    trainer.fit(model, datamodule=ResumableDataModule(dataset, batch_size=32))
    monitor.spikes  # [Spike(step=41337, loss=..., z=..., samples={...}, command='lrd skip ...')]
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_resumable_data.lightning.callback import ResumableDataCallback
from lightning_resumable_data.lightning.progress import training_loader
from lightning_resumable_data.lightning.trace import trace_step

__all__ = ["LossSpikeMonitor", "Spike", "robust_z"]


def robust_z(value: float, window: Any) -> float:
    """How far ``value`` is from ``window``'s median, in scaled median absolute deviations.

    Example:
        >>> round(robust_z(10.0, [1.0, 1.1, 0.9, 1.0, 1.2]), 1)
        60.7
    """
    values = np.asarray(window, dtype=np.float64)
    median = float(np.median(values))
    spread = 1.4826 * float(np.median(np.abs(values - median)))  # a normal's sigma
    if spread == 0.0:
        return 0.0 if value == median else math.inf
    return (value - median) / spread


@dataclass
class Spike:
    """A loss spike: its step, loss and z-score, what the steps up to it trained, the fix."""

    step: int
    loss: float
    z: float
    samples: dict[int, list[list[int]]] = field(default_factory=dict)  # step -> per rank
    command: str = ""


class LossSpikeMonitor(pl.Callback):
    """Watch the training loss; on a spike, log the data of the steps up to it and the fix.

    Args:
        threshold: The robust z-score above which a loss is a spike.
        window: Losses kept to judge the next one (no judgement before it is full).
        before: Steps ahead of the spike whose data is reported and skipped too.
        after: Steps after the spike the suggested ``lrd skip`` also cuts.
        key: The loss's key in ``training_step``'s output dict (or the output itself).
    """

    def __init__(
        self,
        threshold: float = 6.0,
        window: int = 100,
        before: int = 2,
        after: int = 0,
        key: str = "loss",
    ) -> None:
        if not threshold > 0 or window < 5 or before < 0 or after < 0:
            raise ValueError(
                f"LossSpikeMonitor(threshold={threshold}, window={window}, before={before}, "
                f"after={after}): needs threshold > 0, window >= 5, before and after >= 0."
            )
        self.threshold, self.before, self.after, self.key = threshold, before, after, key
        self.losses: deque[float] = deque(maxlen=window)
        self.spikes: list[Spike] = []
        self._step = 0  # the optimizer step the batch in training belongs to

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._step = int(trainer.global_step)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, *args: Any
    ) -> None:
        loss = outputs.get(self.key) if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        value = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
        step = self._step
        full = len(self.losses) == self.losses.maxlen
        z = robust_z(value, self.losses) if full else 0.0
        if full and z > self.threshold:
            self._report(trainer, Spike(step, value, z))
        else:
            self.losses.append(value)  # a spike does not enter the window

    def _report(self, trainer: pl.Trainer, spike: Spike) -> None:
        data = next(
            (c for c in trainer.callbacks if isinstance(c, ResumableDataCallback)),  # type: ignore[attr-defined]
            None,
        )
        loader = training_loader(trainer)
        first = max(0, spike.step - self.before)
        if data is not None and loader is not None and loader.position_sampler is not None:
            sampler: Any = loader.position_sampler
            for step in range(first, spike.step + 1):
                try:
                    traced = trace_step(sampler, data.history, step)
                except ValueError:
                    continue  # before the record began (a resume of an older checkpoint)
                spike.samples[step] = [
                    [int(i) for b in traced for r in b.ranks if r.rank == rank for i in r.indices]
                    for rank in range(traced[0].batch.world)
                ]
        checkpoint = _last_checkpoint(trainer, first)
        spike.command = (
            f"lrd skip {checkpoint} --steps {first}:{spike.step + 1 + self.after} "
            f"-o {checkpoint.rsplit('.', 1)[0]}-skip.ckpt"
        )
        self.spikes.append(spike)
        rank_zero_info(
            f"Loss spike at step {spike.step}: loss {spike.loss:.4g}, robust z {spike.z:.1f}. "
            f"Samples of steps {first} to {spike.step} (per rank): {spike.samples}. To resume "
            f"past them: {spike.command}, then trainer.fit(..., ckpt_path=<the new file>)."
        )


def _last_checkpoint(trainer: pl.Trainer, before: int) -> str:
    """The newest ``step=N`` checkpoint in a ``ModelCheckpoint``'s folder with ``N <= before``.

    A checkpoint named ``step=N`` holds the state after ``N`` optimizer steps: resuming it
    trains step ``N`` next.
    """
    found: list[tuple[int, str]] = []
    for callback in trainer.checkpoint_callbacks:
        folder = getattr(callback, "dirpath", None)
        for path in Path(folder).glob("*.ckpt") if folder else ():
            step = _step_of(path.name)
            if step is not None and step <= before:
                found.append((step, str(path)))
    return max(found)[1] if found else "CHECKPOINT"


def _step_of(name: str) -> int | None:
    """The ``step=N`` of a checkpoint's file name, if it has one."""
    if "step=" not in name:
        return None
    digits = name.split("step=", 1)[1].split("-")[0].split(".")[0]
    return int(digits) if digits.isdigit() else None
