from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric
from loader_helpers import IndexDataset

from lightning_resumable_data.fabric import FabricDataLoader, fabric_dataloader

EPOCHS = 3


def make(fabric: Fabric) -> FabricDataLoader:
    return fabric_dataloader(fabric, IndexDataset(22), batch_size=4, seed=2)


def train(
    fabric: Fabric,
    loader: FabricDataLoader,
    stop_after: int | None = None,
    save_to: Path | None = None,
) -> list[list[int]]:
    seen: list[list[int]] = []
    while loader.epoch < EPOCHS:
        for batch in loader:
            seen.append(batch.tolist())
            if save_to is not None:
                fabric.save(save_to, {"data": loader})  # after every step
            if stop_after is not None and len(seen) == stop_after:
                return seen  # the process "dies" here
    return seen


@pytest.mark.parametrize("stop_after", [3, 6, 7, 13])  # mid-epoch, the epoch's last batch, after
def test_fabric_save_and_load_resume_exactly(tmp_path: Path, stop_after: int) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    expected = train(fabric, make(fabric))
    assert len(expected) == 6 * EPOCHS
    checkpoint = tmp_path / "state.ckpt"
    seen = train(fabric, make(fabric), stop_after, checkpoint)
    resumed = make(fabric)
    fabric.load(checkpoint, {"data": resumed})
    assert resumed.epoch == stop_after // 6  # the epoch is counted across the resume
    assert seen + train(fabric, resumed) == expected


def test_fabric_loader_keeps_our_sampler_and_moves_batches() -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    loader = make(fabric)
    sampler = loader.loader.sampler
    batch = next(iter(loader))
    assert loader.loader.sampler is sampler  # neither replaced nor wrapped
    assert isinstance(batch, torch.Tensor)
    assert batch.device == fabric.device
    assert len(loader) == 6
