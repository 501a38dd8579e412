"""Where a sampler learns its data-parallel rank and world size."""

from __future__ import annotations

import os

import torch.distributed as dist

from lightning_resumable_data.index.partition import check_rank

__all__ = ["resolve_world"]


def resolve_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """Return ``(num_replicas, rank)``, filling ``None`` from the initialised process group.

    Without an initialised process group a ``None`` means a single process (1, 0), unless
    the environment says this process is one of several (``WORLD_SIZE > 1``): then guessing
    would give every process rank 0 and the same data, so it raises instead.

    Example:
        >>> resolve_world(4, 2)
        (4, 2)
    """
    if num_replicas is None or rank is None:
        if dist.is_available() and dist.is_initialized():
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        else:
            world = os.environ.get("WORLD_SIZE", "1")
            if world.isdigit() and int(world) > 1:
                raise RuntimeError(
                    f"num_replicas={num_replicas} and rank={rank} were left to the process "
                    f"group, but torch.distributed is not initialised although WORLD_SIZE="
                    f"{world}. Call torch.distributed.init_process_group() first, or pass "
                    "num_replicas and rank (in Lightning: from "
                    "trainer.strategy.distributed_sampler_kwargs)."
                )
            num_replicas = 1 if num_replicas is None else num_replicas
            rank = 0 if rank is None else rank
    check_rank(num_replicas, rank)
    return int(num_replicas), int(rank)
