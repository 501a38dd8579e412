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


def _docs_loop(
    folder: Path, workers: int, crash_at: int | None
) -> tuple[list[list[float]], dict[str, torch.Tensor]]:
    """docs/getting-started.md's Fabric loop, with workers; returns batches and weights."""
    import os

    from torch.utils.data import TensorDataset

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        fabric = Fabric(accelerator="cpu", devices=1)
        fabric.launch()
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = fabric.setup(model, optimizer)
        generator = torch.Generator().manual_seed(1)
        dataset = TensorDataset(torch.randn(1000, 8, generator=generator), torch.randn(1000))
        loader = fabric_dataloader(fabric, dataset, batch_size=32, seed=42, num_workers=workers)
        state = {"model": model, "optimizer": optimizer, "data": loader, "step": 0}
        if os.path.exists("last.ckpt"):
            fabric.load("last.ckpt", state)
        seen: list[list[float]] = []
        while loader.epoch < 3:
            for x, y in loader:
                seen.append(y.tolist())
                loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
                optimizer.zero_grad()
                fabric.backward(loss)
                optimizer.step()
                state["step"] += 1
                if state["step"] % 10 == 0:
                    fabric.save("last.ckpt", state)
                if state["step"] == crash_at:
                    return seen, {}
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return seen, weights
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_docs_fabric_loop_resumes_with_model_optimizer_and_workers(
    tmp_path: Path, workers: int
) -> None:
    """docs/getting-started.md: the loader in fabric.save/fabric.load next to the model and
    the optimizer; the resumed run ends with exactly the uninterrupted run's weights."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    reference, weights = _docs_loop(tmp_path / "a", workers, None)
    assert len(reference) == 3 * 32  # 3 epochs of 32 batches (1000 samples, batch 32)
    first, _ = _docs_loop(tmp_path / "b", workers, crash_at=45)  # saved at step 40
    assert first == reference[:45]
    resumed, resumed_weights = _docs_loop(tmp_path / "b", workers, None)
    assert resumed == reference[40:]  # from the checkpoint on, nothing replayed or skipped
    assert weights.keys() == resumed_weights.keys()
    for name, value in weights.items():
        assert torch.equal(value, resumed_weights[name]), name
