"""Resume and elastic resume on packed corpora, through the loader and the DataModule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from loader_helpers import documented_order, documented_rank_batches

from lightning_resumable_data import DistributedSampler, MixtureDataset, StatefulDataLoader
from lightning_resumable_data.documents import PackedDataset, open_megatron, write_megatron
from lightning_resumable_data.lightning import ResumableDataModule

SEQ = 16


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> PackedDataset:
    rng = np.random.default_rng(0)
    # token = a unique running number: a sample's tokens identify it in its epoch
    lengths = rng.integers(1, 40, 300)
    tokens = np.arange(1, int(lengths.sum()) + 1)
    documents = np.split(tokens, np.cumsum(lengths)[:-1])
    prefix = tmp_path_factory.mktemp("corpus") / "docs"
    write_megatron(prefix, documents, dtype=np.int32)
    return PackedDataset(open_megatron(prefix), SEQ, eos_id=0, seed=7)


def _loader(dataset: Any, world: int, rank: int, batch: int) -> StatefulDataLoader:
    sampler = DistributedSampler(dataset, world, rank, seed=3, drop_last=True, sample_keys=True)
    return StatefulDataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True)


def _keys(batch: dict[str, torch.Tensor]) -> list[tuple[int, ...]]:
    return [tuple(row) for row in batch["input_ids"].tolist()]


def _epoch_samples(packed: PackedDataset, epoch: int) -> set[tuple[int, ...]]:
    packed.set_epoch(epoch)
    samples = {tuple(packed[i]["input_ids"].tolist()) for i in range(len(packed))}
    packed.set_epoch(0)
    return samples


@pytest.mark.parametrize(
    ("world", "new_world", "batch", "new_batch", "k"),
    [(2, 3, 4, 3, 5), (1, 2, 8, 4, 2), (3, 1, 2, 7, 7), (2, 2, 4, 4, 0)],
)
def test_elastic_resume_every_packed_sample_once(
    packed: PackedDataset, world: int, new_world: int, batch: int, new_batch: int, k: int
) -> None:
    # The oracle: docs/concepts.md's layout over torch's randperm (seed 3 + epoch), each
    # position's sample read from the dataset directly.
    order = documented_order(len(packed), 3, epoch=0)
    expected_of = [tuple(packed[i]["input_ids"].tolist()) for i in range(len(packed))]
    state: dict[str, Any] = {}
    for rank in range(world):
        loader = _loader(packed, world, rank, batch)
        iterator = iter(loader)
        got = [_keys(next(iterator)) for _ in range(k)]
        wanted = documented_rank_batches(order, 0, world, rank, batch, drop_last=True)[:k]
        assert got == [[expected_of[i] for i in b] for b in wanted]
        state = loader.state_dict()
    consumed = k * batch * world
    for rank in range(new_world):
        loader = _loader(packed, new_world, rank, new_batch)
        loader.load_state_dict(state)
        got = [_keys(b) for b in loader]  # the rest of epoch 0
        wanted = documented_rank_batches(order, consumed, new_world, rank, new_batch, True)
        assert got == [[expected_of[i] for i in b] for b in wanted]
    epoch0 = _epoch_samples(packed, 0)
    # the next epoch packs anew, from the keys, on every rank
    loader = _loader(packed, 1, 0, 4)
    loader.load_state_dict(state)
    list(loader)
    epoch1 = [s for b in loader for s in _keys(b)]
    assert set(epoch1) == _epoch_samples(packed, 1) != epoch0


class _Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[list[tuple[int, ...]]] = []

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        self.seen.append(_keys(batch))
        return self.weight.sum() * 0 + batch["input_ids"].float().mean() * self.weight.sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(data: Any, steps: int, path: Path, ckpt: str | None = None) -> _Recorder:
    module = ResumableDataModule(data, batch_size=4, seed=1, sample_keys=True)
    model = _Recorder()
    trainer = pl.Trainer(
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu", default_root_dir=path,
    )  # fmt: skip
    trainer.fit(model, datamodule=module, ckpt_path=ckpt)
    if ckpt is None:
        trainer.save_checkpoint(path / f"step{steps}.ckpt")
    return model


@pytest.mark.parametrize("mixture", [False, True])
def test_datamodule_resumes_packed_corpora(
    packed: PackedDataset, tmp_path: Path, mixture: bool
) -> None:
    data: Any = packed
    if mixture:
        other = PackedDataset(packed.corpus, SEQ, mode="pad", eos_id=0)
        data = {"web": packed, "code": other}
        assert isinstance(MixtureDataset(data)[0], dict)
    total = 2 * len(packed) // 4 + 4  # into the second epoch
    reference = _fit(data, total, tmp_path).seen
    _fit(data, 9, tmp_path)
    resumed = _fit(data, total, tmp_path, str(tmp_path / "step9.ckpt")).seen
    assert resumed == reference[9:]


def test_the_loader_reads_whole_batches_through_getitems(packed: PackedDataset) -> None:
    calls: list[int] = []

    class Counting(PackedDataset):
        def __getitems__(self, indices: Any) -> Any:
            calls.append(len(indices))
            return super().__getitems__(indices)

    counting = Counting(packed.corpus, SEQ, eos_id=0, seed=7)
    loader = _loader(counting, 1, 0, 8)
    batches = list(loader)
    assert calls == [8] * len(batches)  # one vectorised call per batch, none per sample
