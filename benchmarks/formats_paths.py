"""The samples and the loader paths of ``bench_formats.py``.

Sample ``i`` of the image set is :func:`sample`: a 32x32 RGB PNG (random pixels seeded by
``i``), a short caption naming ``i`` and an int label (``i % 10``); ``formats_writers.py``
writes it once per format with the peers' own writers.

Paths (shuffled, batch 64, rank 0 of 1, ``collate`` on every path):

* ``ours_mds`` / ``ours_litdata`` / ``ours_wds``: ``open_mds`` / ``open_litdata`` /
  ``open_webdataset`` + ``DistributedShardedDataset`` + its sampler + our
  ``StatefulDataLoader``; ``sharded_wds``: the same shards through ``ShardedDataLoader``;
* ``mosaic``: ``StreamingDataset(local, shuffle=True)`` + ``StreamingDataLoader``;
* ``litdata``: ``StreamingDataset(dir, shuffle=True)`` + ``StreamingDataLoader``;
* ``webdataset``: ``WebDataset(shards, shardshuffle, seed).shuffle(1000, seed=0)`` + a torch
  ``DataLoader``; ``wids``: ``wids.ShardListDataset`` + ``wids.ChunkedSampler`` (a shard's
  samples shuffled, shards shuffled) + a torch ``DataLoader``.

Decoding is the same everywhere: :func:`collate` opens each PNG with PIL and decodes it
into one ``uint8`` ``(64, 32, 32, 3)`` tensor. (Streaming's ``png`` column hands over a
lazily opened PIL image, its header parsed in the dataset; the pixels are decoded here too.)
Imports of torch, NumPy, PIL and the peers stay inside functions: the parent stays light.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BATCH = 64
SEED = 0
SIDE = 32
CLASSES = 10
BUFFER = 1_000  # WebDataset's sample shuffle buffer (its docs' value)
FORMATS = {"mds": "MDS", "litdata": "LitData", "wds": "WebDataset"}
PATHS = {  # path: (format, the peer module it needs, what it is)
    "ours_mds": ("mds", None, "ours: `open_mds` + `StatefulDataLoader`"),
    "mosaic": ("mds", "streaming", "Mosaic `StreamingDataset` + `StreamingDataLoader`"),
    "ours_litdata": ("litdata", None, "ours: `open_litdata` + `StatefulDataLoader`"),
    "litdata": ("litdata", "litdata", "LitData `StreamingDataset` + `StreamingDataLoader`"),
    "ours_wds": ("wds", None, "ours: `open_webdataset` + `StatefulDataLoader`"),
    "sharded_wds": ("wds", None, "ours: `open_webdataset` + `ShardedDataLoader`"),
    "webdataset": ("wds", "webdataset", "`webdataset.WebDataset(...).shuffle(1000)`"),
    "wids": ("wds", "wids", "`wids.ShardListDataset` + `ChunkedSampler`"),
}
PIP = {"streaming": "mosaicml-streaming"}
WIDS_LISTING = "wids.json"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported by this interpreter."""
    return importlib.util.find_spec(module) is not None


def missing(path: str) -> str | None:
    """Why ``path`` cannot run here, or ``None``."""
    module = PATHS[path][1]
    if module and not installed(module):
        return f"{module} is not installed here (pip install {PIP.get(module, module)})"
    return None


# --------------------------------------------------------------------------------------
# The samples and the peers' writers.
# --------------------------------------------------------------------------------------


def sample(i: int) -> dict[str, Any]:
    """Sample ``i``: ``{"png": 32x32 RGB PNG bytes, "caption": str, "label": int}``."""
    import numpy as np

    pixels = np.random.default_rng([SEED, i]).integers(0, 256, (SIDE, SIDE, 3), np.uint8)
    out = io.BytesIO()
    importlib.import_module("PIL.Image").fromarray(pixels).save(out, format="PNG")
    label = i % CLASSES
    caption = f"synthetic image {i} of class {label}"
    return {"png": out.getvalue(), "caption": caption, "label": label}


def mds_size_limit(per_shard: int) -> int:
    """``MDSWriter``'s ``size_limit`` for about ``per_shard`` samples a shard (PNGs vary)."""
    sizes = [len(sample(i)["png"]) + len(sample(i)["caption"]) for i in range(16)]
    # a sample: its PNG and caption, 8 bytes of label, 2 u32 column sizes and its u32 offset
    return int(per_shard * (sum(sizes) / len(sizes) + 8 + 8 + 4)) + 1_024


# --------------------------------------------------------------------------------------
# Decoding: one collate for every path.
# --------------------------------------------------------------------------------------


def _field(row: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in row:
            return row[name]
    raise KeyError(f"none of {names} in a sample with fields {sorted(row)}")


def collate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The batch: PNGs decoded by PIL into a ``uint8`` ``(B, 32, 32, 3)`` tensor, labels, captions.

    A sample is a dict of MDS/LitData columns (``image``, ``caption``, ``label``) or of
    WebDataset/wids members (``png``/``.png``, ``txt``/``.txt``, ``cls``/``.cls``). A PNG
    comes as ``bytes`` (ours, webdataset), a ``memoryview`` (LitData), a file object (wids)
    or a lazily opened PIL image (Streaming's ``png`` column): each is decoded here.
    """
    import numpy as np
    import torch

    image = importlib.import_module("PIL.Image")
    pixels, labels, captions = [], [], []
    for row in rows:
        png = _field(row, "image", "png", ".png")
        if isinstance(png, (bytes, bytearray, memoryview)):
            png = io.BytesIO(png)
        opened = image.open(png) if hasattr(png, "read") else png
        pixels.append(np.asarray(opened))  # decodes the pixels
        label, caption = _field(row, "label", "cls", ".cls"), _field(row, "caption", "txt", ".txt")
        labels.append(int(_value(label)))
        caption = _value(caption)
        captions.append(caption.decode() if isinstance(caption, bytes) else caption)
    images = np.stack(pixels)
    if images.shape[1:] != (SIDE, SIDE, 3) or images.dtype != np.uint8:
        raise ValueError(f"decoded a batch of {images.dtype} {images.shape}, not 32x32 RGB")
    return {"image": torch.from_numpy(images), "label": torch.tensor(labels), "caption": captions}


def _value(field: Any) -> Any:
    """A member's value: wids hands over file objects, the others values or bytes."""
    return field.getvalue() if hasattr(field, "getvalue") else field


# --------------------------------------------------------------------------------------
# Loaders.
# --------------------------------------------------------------------------------------


def in_place(url: str) -> str:
    """wids's ``localname``: read a local shard where it is (no copy to a cache)."""
    return url


@dataclasses.dataclass(frozen=True)
class Workers:
    """``ShardedDataLoader``'s factory: a torch ``DataLoader`` with ``workers`` processes."""

    workers: int

    def __call__(self, dataset: Any, sampler: Any) -> Any:
        """A DataLoader over the sampler's order in batches of 64, ``collate`` in the workers."""
        import torch.utils.data

        batches = torch.utils.data.BatchSampler(sampler, BATCH, drop_last=False)
        return torch.utils.data.DataLoader(
            dataset, batch_sampler=batches, num_workers=self.workers, collate_fn=collate
        )


def shard_files(root: Path) -> list[str]:
    """The tar shards of the WebDataset corpus, in order."""
    return sorted(str(path) for path in (root / "wds").glob("*.tar"))


def import_all(path: str) -> None:
    """Import what ``path`` uses (torch, the package, PIL's PNG plugin, the peer) untimed."""
    import torch.utils.data  # noqa: F401

    import lightning_resumable_data as lrd
    import lightning_resumable_data.formats

    for name in ("DistributedShardedDataset", "ShardedDataLoader", "StatefulDataLoader"):
        getattr(lrd, name)  # the package's exports are lazy: import them now, untimed
    row = sample(0)
    collate([{"image": row["png"], "caption": row["caption"], "label": 0}])  # PIL's, NumPy's
    module = PATHS[path][1]
    if module == "streaming":
        from peers_mosaic import import_streaming

        import_streaming()
    elif module:
        importlib.import_module(module)


def build(path: str, root: Path, workers: int) -> Any:
    """A loader of ``path`` over the corpora under ``root`` (shuffled, batch 64, seed 0)."""
    import torch.utils.data

    import lightning_resumable_data as lrd
    from lightning_resumable_data import formats

    if path.startswith(("ours_", "sharded_")):
        opened: dict[str, Callable[[], Any]] = {
            "mds": lambda: formats.open_mds(root / "mds"),
            "litdata": lambda: formats.open_litdata(root / "litdata"),
            "wds": lambda: formats.open_webdataset(root / "wds"),
        }
        dataset = lrd.DistributedShardedDataset(opened[PATHS[path][0]](), seed=SEED)
        if path.startswith("sharded_"):
            return lrd.ShardedDataLoader(
                dataset, BATCH, dp_rank=0, num_replicas=1, dataloader_factory=Workers(workers)
            )
        sampler = dataset.sampler(num_replicas=1, rank=0)
        return lrd.StatefulDataLoader(
            dataset, BATCH, sampler=sampler, num_workers=workers, collate_fn=collate
        )
    if path == "mosaic":
        from peers_mosaic import import_streaming

        streaming = import_streaming()
        mds = streaming.StreamingDataset(
            local=str(root / "mds"), shuffle=True, shuffle_seed=SEED, batch_size=BATCH
        )
        return streaming.StreamingDataLoader(
            mds, batch_size=BATCH, num_workers=workers, collate_fn=collate
        )
    if path == "litdata":
        litdata = importlib.import_module("litdata")
        chunks = litdata.StreamingDataset(str(root / "litdata"), shuffle=True, seed=SEED)
        return litdata.StreamingDataLoader(
            chunks, batch_size=BATCH, num_workers=workers, collate_fn=collate
        )
    if path == "webdataset":
        webdataset = importlib.import_module("webdataset")
        shards = shard_files(root)
        data: Any = webdataset.WebDataset(shards, shardshuffle=len(shards), seed=SEED)
        data = data.shuffle(BUFFER, seed=SEED)
        return torch.utils.data.DataLoader(
            data, batch_size=BATCH, num_workers=workers, collate_fn=collate
        )
    wids = importlib.import_module("wids")
    listing = json.loads((root / "wds" / WIDS_LISTING).read_text())["shardlist"]
    for shard in listing:  # local shards, read in place
        shard["url"] = str(root / "wds" / shard["url"])
    data = wids.ShardListDataset(listing, localname=in_place, transformations=[])
    chunk = max(shard["nsamples"] for shard in listing)  # a shard's samples, then the next's
    chunked = wids.ChunkedSampler(data, chunksize=chunk, seed=SEED, shufflefirst=True)
    return torch.utils.data.DataLoader(
        data, batch_size=BATCH, sampler=chunked, num_workers=workers, collate_fn=collate
    )
