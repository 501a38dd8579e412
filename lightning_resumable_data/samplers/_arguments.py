"""Shared argument checks: counts, sized datasets, ranks, seeds (torch's ranges), keywords."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Sequence, Sized
from typing import Any, Final

import numpy as np

__all__ = [
    "SEED_LIMIT",
    "check_epoch_seed",
    "check_key_seed",
    "check_keywords",
    "check_non_negative_int",
    "check_rank_as_torch",
    "check_seed",
    "dataset_length",
]

SEED_LIMIT: Final = 2**64  # torch.Generator.manual_seed accepts [0, 2**64) (negatives wrap)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` if it is a non-negative int, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r} must be an int, got {type(value).__name__}.")
    if value < 0:
        raise ValueError(f"{name}={value} must be >= 0.")
    return int(value)


def dataset_length(dataset: object, owner: str, *, empty_ok: bool = False) -> int:
    """Return ``len(dataset)``, or raise a clear error for unsized (or empty) datasets."""
    if not isinstance(dataset, Sized):
        raise TypeError(
            f"{owner} needs a map-style dataset with __len__, got {type(dataset).__name__}. "
            "Iterable datasets order themselves; pass them to the loader without a sampler."
        )
    length = len(dataset)
    if length == 0 and not empty_ok:
        raise ValueError(
            f"{owner} got an empty dataset (len 0); there is nothing to sample. Pass a "
            "dataset with at least one sample (check the path or filter that built it)."
        )
    return length


def check_rank_as_torch(num_replicas: object, rank: object) -> None:
    """Refuse an out-of-range ``rank`` with torch's wording (code may match on it)."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (num_replicas, rank))
    if ints and num_replicas >= 1 and not 0 <= rank < num_replicas:  # type: ignore[operator]
        raise ValueError(
            f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]; "  # type: ignore[operator]
            "pass the data-parallel rank of this process (in Lightning: from "
            "trainer.strategy.distributed_sampler_kwargs)."
        )


def check_seed(seed: object) -> int:
    """Return ``seed`` as an int in torch's ``manual_seed`` range ``[-2**63, 2**64)``.

    Example:
        >>> check_seed(-1)
        -1
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed={seed!r} must be an int, got {type(seed).__name__}.")
    value = int(seed)
    if not -(2**63) <= value < SEED_LIMIT:
        raise ValueError(
            f"seed={value} must be in [-2**63, 2**64) (torch's manual_seed range); pass "
            "seed % 2**64."
        )
    return value


def check_key_seed(seed: object) -> int:
    """Return ``seed`` as an int in ``[0, 2**64)``: a seed that only keys 64-bit hashes.

    The loader's worker seeds, the mixture's draws and the shards' and documents' orders
    have no torch order to match, so a negative seed is refused rather than wrapped.

    Example:
        >>> check_key_seed(2**64 - 1)
        18446744073709551615
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed={seed!r} must be an int, got {type(seed).__name__}.")
    value = int(seed)
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(
            f"seed={value} must be in [0, 2**64) (a 64-bit key; no torch order to match); "
            "pass seed % 2**64."
        )
    return value


def check_epoch_seed(epoch: int, seed: int) -> None:
    """Refuse an epoch that takes ``seed + epoch`` (torch's epoch seed) past ``2**64 - 1``."""
    if seed + epoch >= SEED_LIMIT:
        raise ValueError(
            f"epoch={epoch} with seed={seed} must keep seed + epoch < 2**64 (torch "
            "seeds the epoch's shuffle with seed + epoch); use a smaller seed."
        )


def check_keywords(init: Callable[..., Any], owner: str, keywords: Sequence[str]) -> None:
    """Raise a ``TypeError`` naming a close match for each keyword ``init`` does not take.

    Args:
        init: The ``__init__`` the keywords are for.
        owner: The class name, for the message.
        keywords: The keyword names of the call.

    Raises:
        TypeError: A keyword is not a parameter of ``init`` (and ``init`` has no ``**``).

    Example:
        >>> def init(self, dataset, *, batch_size=1): ...
        >>> check_keywords(init, "Module", ["batch_size"])
    """
    parameters = inspect.signature(init).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    known = [n for n, p in parameters.items() if n != "self" and p.kind is not p.VAR_POSITIONAL]
    for keyword in keywords:
        if keyword not in known:
            close = difflib.get_close_matches(keyword, known, n=1)
            fix = f"did you mean {close[0]}=?" if close else "remove it."
            raise TypeError(
                f"{owner}() got an unknown argument {keyword}=; {fix} It takes: {', '.join(known)}."
            )
