"""The callback's data metrics: a mixture's weights in force and the samples drawn per source.

Logged every ``log_every_n_steps`` training batches as ``data/weight/<source>`` and
``data/drawn/<source>`` through the module's loggers (rank 0's values).
"""

from __future__ import annotations

import lightning.pytorch as pl

from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.mixture import MixtureSampler

__all__ = ["log_data_metrics"]


def log_data_metrics(
    loader: StatefulDataLoader,
    trainer: pl.Trainer,
    pl_module: pl.LightningModule,
    batch_idx: int,
    every_n_steps: int | None,
) -> None:
    """Log the mixture's weights and counts after batch ``batch_idx``, if it is due.

    Args:
        loader: The training loader.
        trainer: The trainer (its ``log_every_n_steps`` when ``every_n_steps`` is ``None``).
        pl_module: The module whose ``log_dict`` logs them.
        batch_idx: The batch just trained, in its epoch.
        every_n_steps: The logging period (``0``: never).
    """
    period = every_n_steps
    if period is None:  # the trainer's setting (set by its logger connector)
        period = int(getattr(trainer, "log_every_n_steps", 50))
    if not period or (batch_idx + 1) % period:
        return
    sampler = loader.position_sampler
    if not isinstance(sampler, MixtureSampler):
        return
    consumed = loader.state_dict()["consumed"]
    metrics = {f"data/weight/{k}": v for k, v in sampler.weights_at(loader.epoch, consumed).items()}
    drawn = sampler.source_counts(consumed, loader.epoch)
    metrics |= {f"data/drawn/{k}": float(v) for k, v in drawn.items()}
    pl_module.log_dict(metrics, rank_zero_only=True)
