"""The Lightning case of ``bench_peers.py``: steps/s of a small model under ``Trainer``.

``ResumableDataModule`` against a plain ``DataLoader`` (``shuffle=True``), both over the
memmapped ``uint16`` rows of ``peers_paths.NpyTokens``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from _harness import Json
from peers_paths import BATCH, SEED, SEQ_LEN, NpyTokens


def child_lightning(path: str, root: Path, steps: int) -> Json:
    """Steps/s of a small model under Trainer: ResumableDataModule or a plain DataLoader."""
    import lightning as L  # noqa: N812
    import torch

    from lightning_resumable_data import ResumableDataModule

    class Small(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(SEQ_LEN, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
            )

        def training_step(self, batch: Any, _: int) -> Any:
            return self.net(batch.float() / 60_000).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    dataset: Any = NpyTokens(root / "all.npy")
    data: Any
    if path == "resumable":
        data = ResumableDataModule(dataset, batch_size=BATCH, seed=SEED)
    else:

        class Plain(L.LightningDataModule):
            def train_dataloader(self) -> Any:
                return torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)

        data = Plain()
    trainer = L.Trainer(
        max_steps=steps + 20,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_StepClock(warmup=20)],
    )
    trainer.fit(Small(), datamodule=data)
    clock: Any = next(c for c in trainer.callbacks if isinstance(c, _StepClock))  # type: ignore[attr-defined]
    # Steps per CPU second of this process: the comparison is data-path overhead, and CPU
    # time is less disturbed than wall time by other processes on a shared machine.
    return {"steps_per_s": steps / clock.cpu, "seconds": clock.seconds, "cpu_s": clock.cpu}


class _StepClock:
    """A callback that times the steps after ``warmup`` (built lazily: imports lightning)."""

    def __new__(cls, warmup: int) -> Any:
        import lightning as L  # noqa: N812

        class Clock(L.Callback):
            def __init__(self) -> None:
                self.count, self.start, self.seconds = 0, 0.0, 0.0
                self.cpu_start, self.cpu = 0.0, 0.0

            def on_train_batch_start(self, *args: Any) -> None:
                self.count += 1
                if self.count == warmup + 1:
                    self.start, self.cpu_start = time.perf_counter(), time.process_time()

            def on_train_end(self, *args: Any) -> None:
                self.seconds = time.perf_counter() - self.start
                self.cpu = time.process_time() - self.cpu_start

        global _StepClock  # so isinstance() finds the real class
        clock = Clock()
        _StepClock = Clock  # type: ignore[misc,assignment]
        return clock
