"""A ``ResumableDataModule`` of one ``DistributedShardedDataset`` reads it shard by shard.

The DataModule gives such a dataset its own ``ShardedSampler``: each shard is loaded once
per epoch (not once per batch that touches it), every sample is read once per epoch, and a
resume on another batch size continues exactly. A DataModule seed other than the
dataset's is refused with both values.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from lightning_resumable_data import (
    DistributedShardedDataset,
    ResumableDataModule,
    ShardedSampler,
    open_token_shards,
    write_token_shards,
)


class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.ledger: dict[int, list[int]] = defaultdict(list)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.ledger[self.trainer.global_step] += batch[:, 0].tolist()  # a sample's first token
        loss: torch.Tensor = self.layer(batch[:, :1].float()).sum() * 0.0
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _collate(rows: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def _fit(root: Path, dataset: DistributedShardedDataset[np.ndarray], **kw: object) -> Recorder:
    batch_size = int(kw.pop("batch_size", 4))  # type: ignore[call-overload]
    ckpt, save = kw.pop("ckpt", None), kw.pop("save", None)
    model = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        **{"max_epochs": 2, **kw},  # type: ignore[arg-type]
    )
    dm = ResumableDataModule(dataset, batch_size=batch_size, seed=7, collate_fn=_collate)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt)  # type: ignore[arg-type]
    assert isinstance(dm.train_loader.sampler, ShardedSampler)  # type: ignore[union-attr]
    if save is not None:
        trainer.save_checkpoint(save)  # type: ignore[arg-type]
    return model


def test_shard_by_shard_every_sample_once_and_an_exact_resume(tmp_path: Path) -> None:
    tokens = np.arange(64 * 4, dtype=np.uint16)  # 64 samples of 4 tokens: sample i starts 4i
    write_token_shards(tmp_path / "shards", [tokens], seq_len=4, tokens_per_shard=32)  # 8 shards

    def dataset() -> DistributedShardedDataset[np.ndarray]:
        return DistributedShardedDataset(open_token_shards(tmp_path / "shards"), seed=7)

    whole_data = dataset()
    whole = _fit(tmp_path / "a", whole_data)
    samples = [first // 4 for step in sorted(whole.ledger) for first in whole.ledger[step]]
    assert sorted(samples[:64]) == sorted(samples[64:]) == list(range(64))
    # about once per shard and epoch (22 here; sample by sample it was 201)
    assert whole_data.stats.loads <= 2 * 8 * 3 // 2
    five = tmp_path / "five.ckpt"
    head = _fit(tmp_path / "b", dataset(), max_steps=5, save=five)
    rest = _fit(tmp_path / "c", dataset(), batch_size=2, ckpt=five)
    both = [*head.ledger.values(), *rest.ledger.values()]
    assert [x for batch in both for x in batch] == [
        x for s in sorted(whole.ledger) for x in whole.ledger[s]
    ]


def test_a_seed_other_than_the_datasets_is_refused(tmp_path: Path) -> None:
    write_token_shards(tmp_path, [np.arange(64, dtype=np.uint16)], seq_len=4, tokens_per_shard=32)
    dataset = DistributedShardedDataset(open_token_shards(tmp_path), seed=3)
    trainer = pl.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False)
    dm = ResumableDataModule(dataset, batch_size=2, seed=7)
    with pytest.raises(
        ValueError,
        match=r"ResumableDataModule\(seed=7\) and DistributedShardedDataset\(seed=3\) disagree",
    ):
        trainer.fit(Recorder(), datamodule=dm)


def test_lrd_follows_a_sharded_run_with_its_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lightning_resumable_data.cli import main
    from lightning_resumable_data.cli.trace import trace

    folder = tmp_path / "shards"
    tokens = np.arange(64 * 4, dtype=np.uint16)
    write_token_shards(folder, [tokens], seq_len=4, tokens_per_shard=32)

    def dataset() -> DistributedShardedDataset[np.ndarray]:
        return DistributedShardedDataset(open_token_shards(folder), seed=7)

    whole = _fit(tmp_path / "a", dataset())
    five = tmp_path / "five.ckpt"
    _fit(tmp_path / "b", dataset(), max_steps=5, save=five)
    for step in range(5, 32):  # planned steps, from the checkpoint and the shards
        report = trace(five, step, shards=folder)
        (batch,) = report["batches"]
        firsts = [4 * i for i in batch["ranks"][0]["indices"]]
        assert firsts == whole.ledger[step], step
        rank = batch["ranks"][0]
        for index, where in zip(rank["indices"], rank["locations"], strict=True):
            assert where["shard"] == f"shard_{index // 8:05d}.bin"  # 8 samples a shard
            assert (where["row"], where["byte_offset"]) == (index % 8, (index % 8) * 8)
    assert main(["trace", str(five), "--step", "2"]) == 2  # the order needs the shards
    assert "pass --shards DIR" in capsys.readouterr().err
    assert main(["trace", str(five), "--step", "2", "--shards", str(folder)]) == 0
    assert "row" in capsys.readouterr().out
    edited = tmp_path / "skip.ckpt"
    argv = ["skip", str(five), "--steps", "9:12", "-o", str(edited), "--shards", str(folder)]
    assert main(argv) == 0
    rest = _fit(tmp_path / "c", dataset(), ckpt=edited)
    cut = {s: b for s, b in whole.ledger.items() if s >= 5 and s not in (9, 10, 11)}
    assert [x for b in rest.ledger.values() for x in b] == [x for s in sorted(cut) for x in cut[s]]
    assert main(["inspect", str(five)]) == 0, capsys.readouterr().err
    assert "not dry-run: the run reads a DistributedShardedDataset" in " ".join(
        capsys.readouterr().out.split()
    )
    assert main(["trace", str(five), "--step", "2", "--shards", str(tmp_path)]) == 2
    assert "not a folder of token shards" in capsys.readouterr().err
