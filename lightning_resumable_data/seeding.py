"""Training randomness keyed on (seed, step, rank, micro-batch), so a resume draws the same.

Dropout, stochastic depth, noise injection and user code draw from the *global* generators:
torch's CPU generator, each CUDA device's default generator, NumPy's global ``RandomState``
and Python's ``random``. Their state after step ``k`` depends on everything drawn before it,
so a run resumed from a checkpoint (or one that validated at another moment) draws
different numbers from step ``k`` on, and its parameters drift away from the uninterrupted
run's. Reseeding them at the start of every training batch from a key of (seed, global
step, data-parallel rank, micro-batch index) makes every draw a pure function of the run and
its position: nothing to save, the same after a resume, and deterministic on another layout.
Torch's generators (CPU and CUDA) are reseeded by default; NumPy's and ``random`` on request
(``generators=GENERATORS``): seeding NumPy's ``RandomState`` costs more than the rest of a
step's bookkeeping together.

The key is derived fixed-width (:mod:`~lightning_resumable_data.index.keys`, hashed with
BLAKE2b: a few microseconds a step), so distinct tuples never share a stream; each generator
gets its own words of it (torch 64 bits, NumPy and ``random`` 128 bits). Validation batches
use a separate stream, so the training streams never depend on whether, or when, validation
ran.

Example:
    >>> import torch
    >>> _ = seed_training_step(0, seed=7, step=3)
    >>> a = torch.rand(2)
    >>> _ = seed_training_step(0, seed=7, step=3)
    >>> torch.equal(a, torch.rand(2))
    True
    >>> step_seeds(7, 3, rank=0).torch != step_seeds(7, 3, rank=1).torch
    True
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch

from lightning_resumable_data.index.keys import KEY_LIMIT, key_sequence

__all__ = [
    "DEFAULT_GENERATORS",
    "GENERATORS",
    "StepSeeds",
    "check_generators",
    "data_parallel_rank",
    "run_seed",
    "seed_global_generators",
    "seed_training_step",
    "seed_validation_batch",
    "step_seeds",
]

_TRAIN_STREAM: Final = 0x54524149  # "TRAI"
_EVAL_STREAM: Final = 0x4556414C  # "EVAL"
_RUN_STREAM: Final = 0x52554E53  # "RUNS"
# key_bytes(stream, *values) of a training and a validation key; ten digest words
_TRAIN_KEY: Final = struct.Struct("<2I4Q")
_EVAL_KEY: Final = struct.Struct("<2I5Q")
_SEED_WORDS: Final = struct.Struct("<10I")

GENERATORS: Final = ("torch", "numpy", "random")
"""The global generators the package can reseed (``torch``: CPU and every CUDA device)."""
DEFAULT_GENERATORS: Final = ("torch",)
"""What is reseeded by default: torch's, which dropout and ``torch.rand*`` draw from."""


@dataclass(frozen=True)
class StepSeeds:
    """The seeds one batch gives each global generator (disjoint words of one key).

    Attributes:
        torch: 64-bit seed of torch's CPU generator and of every CUDA device's.
        numpy: Four 32-bit words for ``numpy.random.seed`` (128 bits).
        python: 128-bit seed for ``random.seed``.
    """

    torch: int
    numpy: tuple[int, int, int, int]
    python: int


def step_seeds(
    seed: int, step: int, rank: int, micro_batch: int = 0, *, validation_batch: int | None = None
) -> StepSeeds:
    """The seeds of training step ``step``'s micro-batch on data-parallel rank ``rank``.

    Args:
        seed: The run's training seed.
        step: The optimizer step (Lightning's ``trainer.global_step`` at the batch start).
        rank: The data-parallel rank.
        micro_batch: The batch's index within the step under gradient accumulation.
        validation_batch: For a validation batch (run after ``step`` steps): its index,
            with ``micro_batch`` the dataloader index. A stream separate from training's.

    Raises:
        ValueError: A value is negative or not below 2**64.

    Example:
        >>> step_seeds(0, 1, 0) == step_seeds(0, 1, 0) != step_seeds(0, 1, 0, micro_batch=1)
        True
    """
    try:  # key_digest's key, packed by precompiled structs: this runs at every batch
        if validation_batch is None:
            key = _TRAIN_KEY.pack(_TRAIN_STREAM, 4, seed, step, rank, micro_batch)
        else:
            key = _EVAL_KEY.pack(_EVAL_STREAM, 5, seed, step, rank, micro_batch, validation_batch)
    except struct.error:
        raise ValueError(
            f"seed={seed!r}, step={step!r}, rank={rank!r}, micro_batch={micro_batch!r} and "
            f"validation_batch={validation_batch!r} must be ints in [0, 2**64)."
        ) from None
    words = _SEED_WORDS.unpack(hashlib.blake2b(key, digest_size=_SEED_WORDS.size).digest())
    return StepSeeds(
        torch=words[0] | words[1] << 32,
        numpy=(words[2], words[3], words[4], words[5]),
        python=words[6] | words[7] << 32 | words[8] << 64 | words[9] << 96,
    )


def check_generators(generators: object) -> tuple[str, ...]:
    """``generators`` as a tuple of names from :data:`GENERATORS`, or a ``ValueError``.

    Example:
        >>> check_generators(["numpy", "torch"])
        ('torch', 'numpy')
    """
    chosen: tuple[object, ...] = ()
    if isinstance(generators, str):
        chosen = (generators,)
    elif isinstance(generators, Iterable):
        chosen = tuple(generators)
    if not chosen or any(name not in GENERATORS for name in chosen):
        raise ValueError(
            f"generators={generators!r} must name one or more of {GENERATORS}, e.g. "
            f'("torch", "numpy", "random") to reseed NumPy\'s and Python\'s too.'
        )
    return tuple(name for name in GENERATORS if name in chosen)


def seed_global_generators(seeds: StepSeeds, generators: tuple[str, ...]) -> None:
    """Seed ``generators``: ``torch`` (CPU, and CUDA when available), ``numpy``, ``random``.

    ``torch.manual_seed`` would do torch's part too, but it formats a stack trace for every
    lazily seeded backend (~200 us a call); this seeds the CPU generator directly and CUDA
    through ``torch.cuda.manual_seed_all`` (immediate once CUDA is initialised).
    """
    if "torch" in generators:
        torch.default_generator.manual_seed(seeds.torch)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seeds.torch)
    if "numpy" in generators:  # ~10 us hot, ~40 us inside a training step: opt-in
        np.random.seed(np.array(seeds.numpy, dtype=np.uint32))
    if "random" in generators:
        random.seed(seeds.python)


def data_parallel_rank(source: object) -> int:
    """The data-parallel rank of ``source``: an ``int``, a ``Fabric`` or a ``Trainer``.

    From the strategy's ``distributed_sampler_kwargs`` (the data-parallel group: in a
    model-parallel mesh, tensor-parallel peers share it), else ``global_rank``, else 0.

    Raises:
        TypeError: ``source`` is neither an int nor has a ``strategy``/``global_rank``.
        ValueError: ``source`` is a negative int.

    Example:
        >>> data_parallel_rank(3)
        3
    """
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        if source < 0:
            raise ValueError(f"rank={source} must be >= 0.")
        return int(source)
    strategy = getattr(source, "strategy", None)
    kwargs = getattr(strategy, "distributed_sampler_kwargs", None) if strategy else None
    if kwargs:
        return int(kwargs["rank"])
    rank = getattr(source, "global_rank", None)
    if isinstance(rank, int):
        return rank
    raise TypeError(
        f"cannot tell the data-parallel rank of {type(source).__name__}: pass the rank as "
        "an int, a lightning.fabric.Fabric or a lightning.pytorch.Trainer."
    )


def seed_training_step(
    fabric_or_rank: object,
    seed: int,
    step: int,
    micro_batch: int = 0,
    *,
    generators: Sequence[str] = DEFAULT_GENERATORS,
) -> StepSeeds:
    """Reseed the global generators for one training batch; call it before the forward.

    For Fabric loops (``ResumableDataCallback`` does this for the ``Trainer``)::

        for batch in loader:
            seed_training_step(fabric, seed=0, step=step)  # before the forward pass
            loss = model(batch).mean()
            ...

    Args:
        fabric_or_rank: A ``Fabric`` or ``Trainer`` (its data-parallel rank) or the rank.
        seed: The run's training seed, ``0 <= seed < 2**64``.
        step: The optimizer step the batch belongs to (saved with your checkpoint).
        micro_batch: The batch's index within the step under gradient accumulation.
        generators: Which global generators to reseed, from :data:`GENERATORS`: by default
            torch's (CPU and every CUDA device), what dropout and ``torch.rand*`` draw from;
            add ``"numpy"`` and ``"random"`` when the step draws from ``np.random`` or
            ``random`` (NumPy's seeding costs ~10-40 us a call).

    Returns:
        The seeds it used (each generator's own words of one key, whichever are seeded).

    Raises:
        ValueError: A value is negative or not below 2**64, or an unknown generator.
    """
    chosen = check_generators(generators)
    seeds = step_seeds(seed, step, data_parallel_rank(fabric_or_rank), micro_batch)
    seed_global_generators(seeds, chosen)
    return seeds


def seed_validation_batch(
    fabric_or_rank: object,
    seed: int,
    step: int,
    batch: int,
    dataloader: int = 0,
    *,
    generators: Sequence[str] = DEFAULT_GENERATORS,
) -> StepSeeds:
    """Reseed the global generators for validation batch ``batch`` run after ``step`` steps.

    A stream of its own: validation draws the same before and after a resume, and training,
    which reseeds at its next batch, never sees what validation drew. ``generators`` as in
    :func:`seed_training_step`.
    """
    chosen = check_generators(generators)
    rank = data_parallel_rank(fabric_or_rank)
    seeds = step_seeds(seed, step, rank, dataloader, validation_batch=batch)
    seed_global_generators(seeds, chosen)
    return seeds


def run_seed(seed: int, global_seed: int | str | None = None) -> int:
    """A run's training seed: ``seed``, or keyed with ``seed_everything``'s seed when set.

    ``global_seed`` defaults to the ``PL_GLOBAL_SEED`` environment variable that
    ``seed_everything`` sets, so runs that differ only in their ``seed_everything`` seed (a
    seed sweep) still draw different dropout masks.

    Example:
        >>> run_seed(5, global_seed="") == 5 != run_seed(5, global_seed=42)
        True
    """
    if global_seed is None:
        global_seed = os.environ.get("PL_GLOBAL_SEED", "")
    if isinstance(global_seed, str):
        try:
            global_seed = int(global_seed)
        except ValueError:
            return seed  # unset (or not a number: seed_everything rejects it itself)
    if not 0 <= seed < KEY_LIMIT:
        raise ValueError(f"seed={seed} must be in [0, 2**64).")
    state = key_sequence(_RUN_STREAM, seed, global_seed % KEY_LIMIT).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))
