"""What a mixing policy sees and returns, and the helpers for writing one.

A policy ``(trainer, module, stats) -> weights | None`` gets :class:`MixingStats`; the values
it reads per source are logged with :func:`log_source_values`; :func:`softmax_weights` turns
them into weights. :func:`plain_decision` turns what it returns into plain values for the
broadcast from rank 0 (see :mod:`~lightning_resumable_data.lightning.mixing`).

Example:
    >>> plain_decision({"web": 1, "code": 3}, ["web", "code"])
    {'weights': {'web': 1, 'code': 3}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

__all__ = ["MixingStats", "Policy", "log_source_values", "plain_decision", "softmax_weights"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MixingStats:
    """What a policy sees at a sync point (rank 0's view decides).

    Attributes:
        step: The optimizer step just completed (``trainer.global_step``).
        epoch: The data epoch of the trained position.
        position: Global samples of the epoch trained on.
        weights: Probabilities in force at that position, per source.
        drawn: Samples drawn from each source this epoch up to that position.
        metrics: Values the module logged per source, ``{name: {source: value}}``: the
            last value of each ``"<name>/<source>"`` key of ``trainer.callback_metrics``
            (see :func:`log_source_values`). :class:`OnlineMixer` remembers them in the
            callback's checkpoint, so after a resume they include the values logged before
            it, as in the uninterrupted run (where ``callback_metrics`` keeps every key's
            last value across epochs; ``on_epoch=True`` values become the epoch's aggregate
            at its end).
    """

    step: int
    epoch: int
    position: int
    weights: dict[str, float]
    drawn: dict[str, int]
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


Policy = Callable[[pl.Trainer, pl.LightningModule, MixingStats], Any]


def softmax_weights(values: Mapping[str, float], temperature: float = 1.0) -> dict[str, float]:
    """``softmax(values / temperature)`` per source: a common loss-driven policy's weights.

    Example:
        >>> w = softmax_weights({"web": 2.0, "code": 1.0}, temperature=1.0)
        >>> round(w["web"], 3)
        0.731
    """
    names = list(values)
    if not names:
        return {}
    logits = np.array([float(values[n]) for n in names]) / float(temperature)
    p = np.exp(logits - logits.max())
    return dict(zip(names, (p / p.sum()).tolist(), strict=True))


def log_source_values(
    module: pl.LightningModule,
    name: str,
    values: torch.Tensor,
    sources: Sequence[str],
    **log_kwargs: Any,
) -> None:
    """Log the mean of per-sample ``values`` for each source in the batch as ``name/<source>``.

    ``sources`` is the per-sample source name that ``MixtureDataset(return_source=True)``
    puts in each batch (``ResumableDataModule(..., return_source=True)`` gives batches as
    ``[samples, sources]``). Policies read the result in ``stats.metrics[name]`` (rank 0's
    values; pass ``sync_dist=True`` for the mean over ranks). A source missing from a
    batch keeps its last logged value.

    Example::

        def training_step(self, batch, batch_idx):
            (x, y), sources = batch
            losses = F.cross_entropy(self(x), y, reduction="none")
            log_source_values(self, "loss", losses.detach(), sources)
            return losses.mean()
    """
    names = list(sources)
    if len(names) != len(values):
        raise ValueError(
            f"log_source_values got {len(values)} values and {len(names)} source names; pass "
            "one source name per sample (ResumableDataModule(return_source=True) gives them)."
        )
    for source in sorted(set(names)):
        mask = torch.tensor([n == source for n in names], device=values.device)
        module.log(f"{name}/{source}", values[mask].float().mean(), **log_kwargs)


def plain_decision(weights: object, names: Sequence[str]) -> dict[str, Any] | None:
    """A decision as plain values for the broadcast, or an error message to raise everywhere."""
    if weights is None:
        return None
    if isinstance(weights, torch.Tensor | np.ndarray):
        weights = weights.tolist()
    if isinstance(weights, Mapping):
        return {"weights": {str(k): _number(v) for k, v in weights.items()}}
    if isinstance(weights, Sequence) and not isinstance(weights, str | bytes):
        return {"weights": [_number(v) for v in weights]}
    return {
        "error": f"the mixing policy returned {weights!r} ({type(weights).__name__}); return "
        f"a mapping naming every source {list(names)}, one number per source, or None to keep "
        "the weights."
    }


def _number(value: object) -> object:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value.item() if isinstance(value, np.generic) else value
