"""Fabric: a resumable loader that Fabric saves and loads, and never replaces or wraps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lightning.fabric import Fabric
from torch.utils.data import Dataset

from lightning_resumable_data.index.permutation import PermutationAlgorithm
from lightning_resumable_data.loader import StatefulDataLoader
from lightning_resumable_data.samplers.distributed import DistributedSampler

__all__ = ["FabricDataLoader", "fabric_dataloader"]


class FabricDataLoader:
    """A :class:`StatefulDataLoader` that moves batches to the Fabric device.

    Unlike ``fabric.setup_dataloaders``, it keeps no epoch counter of its own: the epoch is
    the loader's, which is saved and restored with its state, so
    ``fabric.save(path, {"model": model, "data": loader})`` and ``fabric.load(path, state)``
    resume at the right epoch and batch. For dropout and other draws that survive the
    resume too, reseed at every step with
    :func:`~lightning_resumable_data.seed_training_step` and save the step.

    Example::

        loader = fabric_dataloader(fabric, dataset, batch_size=32, seed=0)
        state = {"model": model, "optimizer": optimizer, "data": loader, "step": 0}
        fabric.load("last.ckpt", state)      # after a crash; O(1)
        while loader.epoch < max_epochs:
            for batch in loader:
                seed_training_step(fabric, seed=0, step=state["step"])
                ...
                state["step"] += 1
                fabric.save("last.ckpt", state)
    """

    def __init__(self, loader: StatefulDataLoader, fabric: Fabric, move_to_device: bool = True):
        self.loader = loader
        self.fabric = fabric
        self.move_to_device = move_to_device

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass reads."""
        return self.loader.epoch

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield self.fabric.to_device(batch) if self.move_to_device else batch

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state (identical on every rank)."""
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the loader's state."""
        self.loader.load_state_dict(state_dict)


def fabric_dataloader(
    fabric: Fabric,
    dataset: Dataset[Any],
    *,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = False,
    algorithm: PermutationAlgorithm = "randperm",
    sample_keys: bool = False,
    move_to_device: bool = True,
    **loader_kwargs: Any,
) -> FabricDataLoader:
    """Build a resumable loader whose sampler takes its rank from Fabric's strategy.

    Args:
        fabric: The launched Fabric.
        dataset: A map-style dataset.
        batch_size: Samples per batch on each rank.
        shuffle: Shuffle every epoch.
        seed: Seed of the order.
        drop_last: Drop the ragged tail of an epoch and the last partial batch.
        algorithm: ``"randperm"`` (torch's order) or ``"feistel"`` (O(1) memory).
        sample_keys: Give the dataset :class:`~lightning_resumable_data.SampleKey` indices.
        move_to_device: Move each batch to ``fabric.device``.
        **loader_kwargs: Other :class:`StatefulDataLoader` arguments (``num_workers``, ...).
    """
    # The data-parallel group, as the strategy defines it (a model-parallel mesh's data
    # dimension is smaller than the world).
    kwargs = getattr(fabric.strategy, "distributed_sampler_kwargs", None) or {}
    sampler = DistributedSampler(
        dataset,  # type: ignore[arg-type]
        kwargs.get("num_replicas", fabric.world_size),
        kwargs.get("rank", fabric.global_rank),
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        algorithm=algorithm,
        sample_keys=sample_keys,
    )
    loader = StatefulDataLoader(
        dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_kwargs
    )
    return FabricDataLoader(loader, fabric, move_to_device)
