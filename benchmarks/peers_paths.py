"""The loader paths of ``bench_peers.py``: the data each reads, and how each is built.

Every path yields the same batch: a ``torch.Tensor`` of ``torch.uint16``, shape
``(32, 1024)``, the rows of one memmapped set of tokens (no dtype conversion anywhere):

* ``plain``: ``NpyTokens`` (the memmapped ``.npy``) + our ``DistributedSampler`` and
  ``StatefulDataLoader``; ``sharded``: ``DistributedShardedDataset`` over token shards (the
  same rows) + its sampler + our loader.
* ``torchdata``: ``NpyTokens`` + torch's ``DistributedSampler`` + torchdata's
  ``StatefulDataLoader``, default collate.
* ``litdata``: its documented path for tokens: ``optimize(..., item_loader=TokensLoader(),
  chunk_size=...)``, read by ``StreamingDataset(..., item_loader=TokensLoader(block_size))``
  + ``StreamingDataLoader``.
* ``grain``: ``MapDataset.source(NpyTokens).shuffle(seed).batch(32)`` ->
  ``to_iter_dataset()`` (no read threads without workers; ``.mp_prefetch`` with workers),
  ``get_state``/``set_state``; its NumPy batch is wrapped by ``torch.from_numpy`` (no copy).
* ``mosaic``: MosaicML Streaming: ``MDSWriter`` shards, read by ``StreamingDataset`` +
  ``StreamingDataLoader``, resumed by its ``state_dict``/``load_state_dict``
  (``peers_mosaic.py``).
* ``raw``: the limit, not a loader: one vectorised memmap gather per batch, one process.

Imports of torch, NumPy and the peers stay inside functions: the parent process is light.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SEQ_LEN = 1024
BATCH = 32
SEED = 0
SHARD_TOKENS = 1 << 24  # 16,384 samples per shard (and per LitData chunk)
PATHS = ("plain", "sharded", "torchdata", "litdata", "grain", "mosaic", "raw")
PEERS = ("torchdata", "litdata", "grain", "mosaic")
OPTIONAL = {"litdata": "litdata", "grain": "grain", "mosaic": "streaming"}  # path -> module
DISTRIBUTIONS = {"streaming": "mosaicml-streaming"}  # module -> what pip installs it as


def missing(path: str) -> str | None:
    """Why ``path`` cannot run in this environment, or ``None`` if it can."""
    module = OPTIONAL.get(path)
    if module and importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install {DISTRIBUTIONS.get(module, module)})"
    return None


# --------------------------------------------------------------------------------------
# Data.
# --------------------------------------------------------------------------------------


def make_data(root: Path, samples: int, sparse: bool) -> None:
    """Write ``samples`` sequences as token shards (ours) and as one ``.npy`` (the rest)."""
    import numpy as np

    from lightning_resumable_data.shards.tokens import INDEX_FILE, TokenShardIndex

    root.mkdir(parents=True, exist_ok=True)
    per_shard = SHARD_TOKENS // SEQ_LEN
    sizes = [min(per_shard, samples - s) for s in range(0, samples, per_shard)]
    files = tuple(f"shard_{i:05d}.bin" for i in range(len(sizes)))
    rng = np.random.default_rng(0)
    for name, size in zip(files, sizes, strict=True):
        path = root / name
        if sparse:
            with path.open("wb") as file:
                file.truncate(size * SEQ_LEN * 2)
        else:
            rng.integers(0, 60_000, size * SEQ_LEN, dtype=np.uint16).tofile(path)
    index = TokenShardIndex(SEQ_LEN, "uint16", files, tuple(sizes))
    (root / INDEX_FILE).write_text(json.dumps(index.to_json()))
    array = np.lib.format.open_memmap(
        root / "all.npy", mode="w+", dtype=np.uint16, shape=(samples, SEQ_LEN)
    )
    if not sparse:
        offset = 0
        for name, size in zip(files, sizes, strict=True):
            array[offset : offset + size] = np.fromfile(root / name, np.uint16).reshape(size, -1)
            offset += size
    array.flush()


def make_litdata(root: Path) -> None:
    """The same rows in LitData's token format (``optimize`` with ``TokensLoader``)."""
    import litdata
    import numpy as np

    rows = len(np.load(root / "all.npy", mmap_mode="r"))
    per_chunk = SHARD_TOKENS // SEQ_LEN
    litdata.optimize(
        fn=_litdata_rows,
        inputs=[
            (str(root / "all.npy"), s, min(s + per_chunk, rows)) for s in range(0, rows, per_chunk)
        ],
        output_dir=str(root / "litdata"),
        chunk_size=SHARD_TOKENS,  # tokens per chunk, as LitData's docs size it
        item_loader=litdata.TokensLoader(),
        num_workers=1,
        mode="overwrite",
    )


def _litdata_rows(item: tuple[str, int, int]) -> Iterator[Any]:
    import numpy as np

    path, start, stop = item
    array = np.load(path, mmap_mode="r")
    for index in range(start, stop):
        yield np.array(array[index])


class NpyTokens:
    """A memmapped ``.npy`` of rows; ``__getitem__`` returns the ``uint16`` row (no copy)."""

    def __init__(self, path: Path) -> None:
        import numpy as np

        self.path = path
        self.array = np.load(path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: int) -> Any:
        return self.array[int(index)]

    def __getstate__(self) -> dict[str, Any]:  # worker processes reopen the memmap
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]


class Cheap:
    """A dataset of the same length that returns the index: states are made fast on it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return int(index)


# --------------------------------------------------------------------------------------
# Loaders.
# --------------------------------------------------------------------------------------


def _grain() -> Any:
    """The ``grain`` module (typed ``Any``: the package's own venv does not have it)."""
    return importlib.import_module("grain")


class GrainLoader:
    """Grain's ``MapDataset`` pipeline, iterated as a loader with a state (``torch`` out)."""

    def __init__(self, root: Path, workers: int) -> None:
        grain = _grain()
        self.workers = workers
        source = NpyTokens(root / "all.npy")
        self.dataset = grain.MapDataset.source(source).shuffle(seed=SEED).batch(BATCH)
        self._iterator: Any = None
        self._state: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        import torch

        grain = _grain()
        if self.workers:  # Grain's default read threads in each worker process
            data = self.dataset.to_iter_dataset()
            data = data.mp_prefetch(grain.MultiprocessingOptions(num_workers=self.workers))
        else:  # in this process, no threads: faster per CPU second and to the first batch
            data = self.dataset.to_iter_dataset(grain.ReadOptions(num_threads=0))
        iterator = self._iterator = iter(data)
        if self._state is not None:
            iterator.set_state(self._state)
            self._state = None
        return (torch.from_numpy(batch) for batch in iterator)

    def state_dict(self) -> dict[str, Any]:
        """Grain's iterator state (``get_state``)."""
        return dict(self._iterator.get_state())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Applied with ``set_state`` by the next ``iter()``."""
        self._state = state

    def close(self) -> None:
        """Stop Grain's worker processes, if any."""
        if self._iterator is not None and hasattr(self._iterator, "close"):
            self._iterator.close()


def grain_state(root: Path, k: int) -> dict[str, Any]:
    """Grain's state k batches in: its iterator's own state, advanced k batches.

    Past 1,000 batches the state is ``{"next_index": k}``, the form Grain's ``get_state``
    gives for this pipeline (checked here); ``child_resume`` checks the batch it resumes to.
    """
    loader = GrainLoader(root, 0)
    iterator = iter(loader)
    if k <= 1_000:
        for _ in range(k):
            next(iterator)
        return loader.state_dict()
    state = loader.state_dict()
    if set(state) != {"next_index"}:
        raise RuntimeError(f"Grain's iterator state has changed form: {sorted(state)}")
    return {**state, "next_index": k}


def build(path: str, root: Path, workers: int, cheap: bool = False) -> Any:
    """A loader of ``path`` (shuffled, batch 32, rank 0 of 1) over the data in ``root``."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    import lightning_resumable_data as lrd
    from lightning_resumable_data.shards import DistributedShardedDataset, open_token_shards

    if path == "litdata":
        import litdata

        dataset = litdata.StreamingDataset(
            str(root / "litdata"),
            item_loader=litdata.TokensLoader(block_size=SEQ_LEN),
            shuffle=True,
            seed=SEED,
        )
        return litdata.StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers)
    if path == "grain":
        return GrainLoader(root, workers)
    if path == "mosaic":
        from peers_mosaic import build_mosaic

        return build_mosaic(root, workers)
    if path == "sharded":
        readers = open_token_shards(root, preload=False)  # memmapped, as the .npy
        data: Any = DistributedShardedDataset(readers, seed=SEED)
        sampler: Any = data.sampler(num_replicas=1, rank=0)
        if cheap:
            data = Cheap(len(data))
        return lrd.StatefulDataLoader(data, BATCH, sampler=sampler, num_workers=workers)
    data = NpyTokens(root / "all.npy")
    data = Cheap(len(data)) if cheap else data
    if path == "plain":
        sampler = lrd.DistributedSampler(data, 1, 0, seed=SEED)
        return lrd.StatefulDataLoader(data, BATCH, sampler=sampler, num_workers=workers)
    sampler = torch.utils.data.DistributedSampler(data, 1, 0, seed=SEED)
    return TorchdataLoader(data, BATCH, sampler=sampler, num_workers=workers)


def raw_batch(root: Path, k: int) -> Any:
    """The limit of a resume: open the memmap, compute batch k's rows, gather them.

    The rows of batch k are an affine bijection of the positions (O(batch), no epoch-long
    permutation): what any loader must do at the least to resume at k.
    """
    import math

    import numpy as np
    import torch

    array = np.load(root / "all.npy", mmap_mode="r")
    n = len(array)
    step = 2_654_435_761 % n
    while math.gcd(step, n) != 1:
        step += 1
    positions = np.arange(k * BATCH, (k + 1) * BATCH, dtype=np.int64) % n
    return torch.from_numpy(array[(positions * step + SEED) % n])


def raw_batches(root: Path) -> Iterator[Any]:
    """The limit of a read: one seeded permutation, one fancy-index gather per batch."""
    import numpy as np
    import torch

    array = np.load(root / "all.npy", mmap_mode="r")
    order = np.random.default_rng(SEED).permutation(len(array))
    for start in range(0, len(order) - BATCH + 1, BATCH):
        yield torch.from_numpy(array[order[start : start + BATCH]])


def describe(batch: Any) -> str:
    """The type, dtype and shape of a batch, e.g. ``Tensor torch.uint16 (32, 1024)``."""
    shape = tuple(batch.shape) if hasattr(batch, "shape") else None
    return f"{type(batch).__name__} {getattr(batch, 'dtype', '?')} {shape}"
