"""The MosaicML Streaming path of ``bench_peers.py``: its writer, its loader, its state.

* Data: written once by Streaming's own ``MDSWriter``, one column ``ndarray:uint16:1024``,
  the rows of ``all.npy`` in order, 16,384 samples per shard (the others' shard size).
* Loader: ``StreamingDataset(local=..., shuffle=True, shuffle_seed=0, batch_size=32)``
  (its default shuffle, ``py1e``, and predownload) + ``StreamingDataLoader(batch_size=32)``;
  the collate stacks the rows' arrays (``np.stack`` + ``torch.from_numpy``): the batch is
  the ``torch.uint16`` tensor every path yields (Grain's batch is made the same way).
* Resume: its documented ``state_dict``/``load_state_dict`` on the ``StreamingDataLoader``.

``import streaming`` imports ``torchvision`` (``streaming/vision/base.py``: ``VisionDataset``,
``to_tensor``), and the torchvision pip installs beside a CPU-only torch fails to load. A
stub ``torchvision`` in the venv's ``site-packages`` would not do: Lightning's and
torchmetrics' checks would then find it and import ``torchvision.models`` (``import
lightning`` fails, and the Lightning case runs in the same venv). So ``import_streaming``
puts placeholder modules for those two names in ``sys.modules`` for the time of the import
only, where no torchvision is installed, and removes them after: nothing else sees them.
DataLoader workers are forked (Linux), with Streaming already imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

from peers_paths import BATCH, SEED, SEQ_LEN, SHARD_TOKENS

COLUMN = f"ndarray:uint16:{SEQ_LEN}"
SAMPLE_BYTES = 2 * SEQ_LEN + 4  # an MDS sample: its bytes and its 4-byte offset
STUBBED = (
    "torchvision",
    "torchvision.datasets",
    "torchvision.transforms",
    "torchvision.transforms.functional",
)


@functools.cache
def import_streaming() -> Any:
    """The ``streaming`` module, imported once per process; its stale shared memory cleaned.

    Streaming keeps its state in ``/dev/shm`` under names it numbers per local directory; a
    process killed before it released them leaves them behind, and they would be taken as
    live. Cleaning once, on import, leaves the loaders this process makes alone.
    """
    if "streaming" not in sys.modules and importlib.util.find_spec("torchvision") is None:
        sys.modules.update(_torchvision_placeholders())
        try:
            importlib.import_module("streaming")
        finally:
            for name in STUBBED:
                sys.modules.pop(name, None)
    streaming = importlib.import_module("streaming")
    importlib.import_module("streaming.base.util").clean_stale_shared_memory()
    return streaming


def _torchvision_placeholders() -> dict[str, types.ModuleType]:
    """The two names Streaming imports from torchvision; using either raises."""
    import torch.utils.data

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("torchvision is a placeholder here (peers_mosaic.py)")

    modules = {name: types.ModuleType(name) for name in STUBBED}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    vision = type("VisionDataset", (torch.utils.data.Dataset,), {"__init__": unavailable})
    modules["torchvision.datasets"].VisionDataset = vision  # type: ignore[attr-defined]
    modules["torchvision.transforms.functional"].to_tensor = unavailable  # type: ignore[attr-defined]
    return modules


def make_mosaic(root: Path) -> None:
    """The rows of ``root / "all.npy"``, in order, as MDS shards of 16,384 samples."""
    import numpy as np

    streaming = import_streaming()
    per_shard = SHARD_TOKENS // SEQ_LEN
    out = root / "mosaic"
    array = np.load(root / "all.npy", mmap_mode="r")
    header = 1024  # the shard's sample count, first offset and column config (under 1 KiB)
    limit = per_shard * SAMPLE_BYTES + header  # room for 16,384 samples, not one more
    columns = {"tokens": COLUMN}
    with streaming.MDSWriter(out=str(out), columns=columns, size_limit=limit, exist_ok=True) as mds:
        for start in range(0, len(array), per_shard):
            for row in np.asarray(array[start : start + per_shard]):
                mds.write({"tokens": row})
    sizes = [shard["samples"] for shard in json.loads((out / "index.json").read_text())["shards"]]
    if sum(sizes) != len(array) or any(size != per_shard for size in sizes[:-1]):
        raise RuntimeError(f"MDSWriter wrote shards of {sizes} samples, not of {per_shard}")


def stack_rows(rows: list[dict[str, Any]]) -> Any:
    """The batch: the rows' ``uint16`` arrays stacked, as a tensor (no dtype conversion)."""
    import numpy as np
    import torch

    return torch.from_numpy(np.stack([row["tokens"] for row in rows]))


def build_mosaic(root: Path, workers: int) -> Any:
    """Streaming's ``StreamingDataset`` + ``StreamingDataLoader`` over ``root / "mosaic"``."""
    streaming = import_streaming()
    dataset = streaming.StreamingDataset(
        local=str(root / "mosaic"), shuffle=True, shuffle_seed=SEED, batch_size=BATCH
    )
    return streaming.StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=workers, collate_fn=stack_rows
    )


def mosaic_state(root: Path, k: int) -> tuple[dict[str, Any], Any]:
    """The loader's state k batches in, and the batch that follows it (``None`` past 1,000).

    Up to 1,000 batches the state is the loader's own, after k batches read. Past that (the
    3.3M-sample set, k = 100,000) it is the state after one batch with ``sample_in_epoch``
    set to k x 32: the form ``state_dict`` gives (checked here), as it gave at k <= 1,000.
    """
    loader = build_mosaic(root, 0)
    iterator = iter(loader)
    for _ in range(k if k <= 1_000 else 1):
        next(iterator)
    state = dict(loader.state_dict())
    if k <= 1_000:
        return state, next(iterator)
    keys = {"epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed"}
    if not keys <= set(state) or state["sample_in_epoch"] != BATCH or state["epoch"] != 0:
        raise RuntimeError(f"Streaming's loader state has changed form: {state}")
    return {**state, "sample_in_epoch": k * BATCH}, None
