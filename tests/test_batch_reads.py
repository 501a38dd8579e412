"""Batch reads of token shards: one gather per batch, the same batches as a per-sample read.

docs/sharded.md: a batch of token shards is read with one vectorised gather into one new
tensor, and is the batch torch's ``default_collate`` makes of the same samples. The
oracle is torchdata's ``StatefulDataLoader`` over a per-sample dataset of the same rows
(``reader.read``), in the same sampler order, with its default collate.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

from lightning_resumable_data import DistributedShardedDataset, StatefulDataLoader
from lightning_resumable_data._rows import RowBatch, collate_rows
from lightning_resumable_data.shards import TokenShardReader, open_token_shards
from lightning_resumable_data.shards.token_writer import write_token_shards

SEQ = 8


def shards(root: Path, dtype: Any, samples: int = 70, per_shard: int = 16) -> Path:
    """``samples`` samples whose tokens encode (sample, column), in shards of ``per_shard``."""
    tokens = (np.arange(samples * SEQ) % np.iinfo(dtype).max).astype(dtype)
    write_token_shards(root, [tokens], SEQ, dtype=dtype, tokens_per_shard=per_shard * SEQ)
    return root


class PerSample(torch.utils.data.Dataset[Any]):
    """The same rows, one ``read`` per index: what torch's default path reads."""

    def __init__(self, readers: list[TokenShardReader]) -> None:
        self.rows = [r.read(i) for r in readers for i in range(len(r))]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Any:
        return self.rows[index]


def both(root: Path, workers: int, batch: int = 5, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    """Every batch of two epochs: ours, and torchdata's in the same order."""
    dataset = DistributedShardedDataset(open_token_shards(root), seed=3)
    sampler = dataset.sampler(num_replicas=1, rank=0)
    ours = StatefulDataLoader(dataset, batch, sampler=sampler, num_workers=workers, **kwargs)
    reference = PerSample(open_token_shards(root))
    orders = DistributedShardedDataset(open_token_shards(root), seed=3).sampler(1, 0)
    got, want = [], []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        orders.set_epoch(epoch)
        order = [int(i) for i in orders]
        got += list(ours)
        theirs = TorchdataLoader(reference, batch_size=batch, sampler=order, **kwargs)
        want += list(theirs)
    dataset.close()
    return got, want


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_gathered_batch_is_the_default_collates_batch(
    tmp_path: Path, dtype: Any, workers: int
) -> None:
    """Batches across shard boundaries (5-sample batches over 16-sample shards), the short
    last batch included: the same values, dtype and shape as torchdata's."""
    got, want = both(shards(tmp_path, dtype), workers)
    assert len(got) == len(want) == 2 * 14
    for ours, theirs in zip(got, want, strict=True):
        assert type(ours) is torch.Tensor
        assert ours.dtype == theirs.dtype
        assert ours.shape == theirs.shape
        assert torch.equal(ours, theirs)


def test_with_drop_last_the_short_batch_is_dropped_as_by_torch(tmp_path: Path) -> None:
    got, want = both(shards(tmp_path, np.uint16), 0, batch=8, drop_last=True)
    assert [b.shape[0] for b in got] == [8] * 16
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_each_batch_is_its_own_memory_not_the_files(tmp_path: Path) -> None:
    """Writing to a batch changes neither another batch nor the data read again."""
    root = shards(tmp_path, np.uint16)
    dataset = DistributedShardedDataset(open_token_shards(root), seed=0)
    loader = StatefulDataLoader(dataset, 4, sampler=dataset.sampler(num_replicas=1, rank=0))
    first, second = [b for _, b in zip(range(2), loader, strict=False)]
    kept = second.clone()
    first.fill_(7)
    assert torch.equal(second, kept)
    again = next(iter(StatefulDataLoader(dataset, 4, sampler=dataset.sampler(1, 0))))
    assert not torch.equal(again, first)
    dataset.close()


def test_a_collate_fn_of_your_own_gets_the_samples_as_numpy_rows(tmp_path: Path) -> None:
    """A custom ``collate_fn`` receives a list of the samples (NumPy rows), as before."""
    root = shards(tmp_path, np.uint16)
    dataset = DistributedShardedDataset(open_token_shards(root), seed=0)
    seen: list[Any] = []

    def collate(samples: list[Any]) -> int:
        seen.append(samples)
        return len(samples)

    sampler = dataset.sampler(num_replicas=1, rank=0)
    order = [int(i) for i in dataset.sampler(num_replicas=1, rank=0)]
    assert next(iter(StatefulDataLoader(dataset, 6, sampler=sampler, collate_fn=collate))) == 6
    readers = open_token_shards(root)
    flat = [r.read(i) for r in readers for i in range(len(r))]
    assert isinstance(seen[0], list)
    assert len(seen[0]) == 6
    for sample, index in zip(seen[0], order[:6], strict=True):
        assert isinstance(sample, np.ndarray)
        assert sample.dtype == np.uint16
        assert sample.tolist() == flat[index].tolist()
    dataset.close()


class Doubling(TokenShardReader):
    """A reader that reads its own way (like a remote one): the per-sample path."""

    def read(self, index: int) -> Any:
        return super().read(index) * 2


def test_a_reader_that_reads_its_own_way_is_read_sample_by_sample(tmp_path: Path) -> None:
    root = shards(tmp_path, np.uint16, samples=20)
    readers = [Doubling(r.path, SEQ) for r in open_token_shards(root)]
    dataset = DistributedShardedDataset(readers, seed=0)
    assert type(dataset.__getitems__([0, 17, 3])) is list
    batch = next(iter(StatefulDataLoader(dataset, 3, sampler=[0, 17, 3])))
    plain = open_token_shards(root)
    expected = [plain[0].read(0) * 2, plain[1].read(1) * 2, plain[0].read(3) * 2]
    assert batch.tolist() == [e.tolist() for e in expected]
    dataset.close()


def test_a_batch_of_token_shards_is_one_gather(tmp_path: Path) -> None:
    """``__getitems__`` returns a :class:`RowBatch`: the samples are rows of one tensor."""
    dataset = DistributedShardedDataset(open_token_shards(shards(tmp_path, np.uint16)), seed=0)
    batch = dataset.__getitems__([40, 2, 17, 16])
    assert type(batch) is RowBatch
    assert [row.tolist() for row in batch] == batch.tensor.tolist()
    assert batch.tensor[:, 0].tolist() == [40 * SEQ, 2 * SEQ, 17 * SEQ, 16 * SEQ]
    assert all(np.shares_memory(row, batch.tensor.numpy()) for row in batch)
    dataset.close()


def test_gather_into_refuses_an_index_out_of_range_and_writes_nothing(tmp_path: Path) -> None:
    """``TokenShardReader.gather_into`` names the bad index; ``out`` is left as it was."""
    reader = open_token_shards(shards(tmp_path, np.uint16, samples=20))[0]
    out = np.zeros((2, SEQ), dtype=np.uint16)
    for bad in (16, -1):
        with pytest.raises(IndexError, match=f"index {bad} is out of range"):
            reader.gather_into(np.array([0, bad]), out)
    assert not out.any()


def test_a_batch_whose_rows_were_replaced_collates_what_it_holds(tmp_path: Path) -> None:
    """A wrapper that replaces a sample of the read batch gets the stack of what it holds."""
    dataset = DistributedShardedDataset(open_token_shards(shards(tmp_path, np.uint16)), seed=0)
    batch = dataset.__getitems__([3, 4])
    batch[1] = np.full(SEQ, 9, dtype=np.uint16)
    assert collate_rows(batch).tolist() == [list(range(3 * SEQ, 4 * SEQ)), [9] * SEQ]
    batch = dataset.__getitems__([3, 4])
    batch[0][0] = 5  # in place: the row is the batch's own memory
    assert collate_rows(batch)[0, 0] == 5
    dataset.close()


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=5).filter(any),
    st.lists(st.integers(-3, 30), min_size=0, max_size=12),
)
def test_any_batch_reads_what_per_sample_reads_give_or_the_same_index_error(
    sizes: list[int], batch: list[int]
) -> None:
    """Within one shard (the fast path), across shards, empty shards, out of range."""
    root = Path(tempfile.mkdtemp())
    readers, first = [], 0
    for number, size in enumerate(sizes):
        path = root / f"shard-{number}.bin"
        np.arange(first * SEQ, (first + size) * SEQ, dtype=np.uint16).tofile(path)
        readers.append(TokenShardReader(path, SEQ))
        first += size
    dataset = DistributedShardedDataset(readers, seed=0)
    try:
        if all(0 <= i < first for i in batch):
            got = dataset.__getitems__(batch)
            assert [row.tolist() for row in got] == [dataset[i].tolist() for i in batch]
            assert [row[0] for row in got] == [i * SEQ for i in batch]
        else:
            with pytest.raises(IndexError, match="out of range"):
                dataset.__getitems__(batch)
    finally:
        dataset.close()
        shutil.rmtree(root)
