"""The callback's training seed: its options checked, chosen at a fit's start, restored.

With ``seed_training`` on the callback reseeds the global generators at every training
and validation batch of ``fit`` from one seed shared by all ranks: the one passed, else the
DataModule's ``seed`` keyed with ``seed_everything``'s (see ``docs/randomness.md``); a
checkpoint's seed continues a resumed run's randomness.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info

from lightning_resumable_data.lightning._contract import PhasedDataModule
from lightning_resumable_data.seeding import (
    DEFAULT_GENERATORS,
    GENERATORS,
    check_generators,
    data_parallel_rank,
    run_seed,
    seed_global_generators,
    step_seeds,
)

__all__ = [
    "check_seed_options",
    "fit_seed",
    "micro_batch",
    "restored_seed",
    "seed_step",
    "seed_validation",
]


def check_seed_options(seed_training: object, training_seed: object) -> tuple[str, ...]:
    """The generators ``seed_training`` reseeds (``()``: none), or why the options are wrong.

    ``True`` is torch's; a sequence names them (from ``seeding.GENERATORS``).

    Example:
        >>> check_seed_options(True, 2**63), check_seed_options(False, None)
        (('torch',), ())
        >>> check_seed_options(("random", "torch", "numpy"), None)
        ('torch', 'numpy', 'random')
    """
    generators: tuple[str, ...]
    if isinstance(seed_training, bool):
        generators = DEFAULT_GENERATORS if seed_training else ()
    elif isinstance(seed_training, (list, tuple)):
        generators = check_generators(seed_training)  # a ValueError naming the choices
    else:
        raise TypeError(
            f"seed_training={seed_training!r} must be True (torch's generators), False, or a "
            f"tuple of generators from {GENERATORS}; pass training_seed=... to choose the seed."
        )
    if training_seed is not None and (
        isinstance(training_seed, bool)
        or not isinstance(training_seed, int)
        or not 0 <= training_seed < 2**64
    ):
        raise ValueError(
            f"training_seed={training_seed!r} must be an int in [0, 2**64), or None for "
            "the DataModule's seed."
        )
    return generators


def fit_seed(trainer: pl.Trainer, training_seed: int | None, datamodule: object) -> tuple[int, int]:
    """``(data-parallel rank, training seed)`` of a fit; the seed is rank 0's on every rank."""
    strategy = getattr(trainer, "strategy", None)  # None: a stand-in trainer
    rank = data_parallel_rank(trainer) if strategy is not None else 0
    seed = training_seed
    if seed is None:
        base = datamodule.seed if isinstance(datamodule, PhasedDataModule) else 0
        seed = run_seed(base)
    # one seed for all ranks (a restored checkpoint's replaces it: load_state_dict)
    return rank, seed if strategy is None else int(strategy.broadcast(seed, src=0))


def restored_seed(seed: int | None, training_seed: int | None, saved: object) -> int | None:
    """The seed to continue with: the checkpoint's, unless one was passed explicitly.

    Example:
        >>> restored_seed(5, None, 5), restored_seed(5, 5, 9), restored_seed(None, None, 9)
        (5, 5, None)
    """
    explicit = training_seed is not None
    if seed is None or explicit or isinstance(saved, bool) or not isinstance(saved, int):
        return seed
    if saved != seed:
        rank_zero_info(
            f"Resuming with the checkpoint's training seed {saved} (this run derived "
            f"{seed}: the DataModule's or seed_everything's seed changed), so the "
            "training randomness continues the interrupted run's. Pass "
            "ResumableDataCallback(training_seed=...) to choose another."
        )
        return saved
    return seed


def seed_step(
    generators: tuple[str, ...],
    rank: int,
    seed: int,
    trainer: pl.Trainer,
    pl_module: pl.LightningModule,
    batch_idx: int,
) -> None:
    """Reseed ``generators`` (checked) for training batch ``batch_idx`` of this step."""
    within = micro_batch(trainer, pl_module, batch_idx)
    seed_global_generators(step_seeds(seed, trainer.global_step, rank, within), generators)


def seed_validation(
    generators: tuple[str, ...], rank: int, seed: int, step: int, batch: int, dataloader: int
) -> None:
    """Reseed ``generators`` (checked) for validation batch ``batch`` after ``step`` steps."""
    keyed = step_seeds(seed, step, rank, dataloader, validation_batch=batch)
    seed_global_generators(keyed, generators)


def micro_batch(trainer: pl.Trainer, pl_module: pl.LightningModule, batch_idx: int) -> int:
    """The batch's index within its optimizer step: what tells its key from its step's others.

    Automatic optimization steps every ``accumulate_grad_batches`` batches of an epoch. Under
    manual optimization the step counter moves only when the module steps an optimizer, so
    the batch's index in the epoch tells apart batches that share a step.
    """
    if not pl_module.automatic_optimization:
        return batch_idx
    return batch_idx % max(1, int(trainer.accumulate_grad_batches))
