"""The corpora of ``bench_formats.py``, written once per format by the peers' own writers.

Sample ``i`` is :func:`formats_paths.sample` (a 32x32 RGB PNG, a caption, an int label):

* MDS: Streaming's ``MDSWriter`` (columns ``image: png``, ``caption: str``, ``label: int``;
  its ``png`` column takes a PIL image and encodes it itself);
* LitData: ``litdata.optimize`` (items ``{"image": PNG bytes, "caption", "label"}``,
  ``per_shard`` items a chunk);
* WebDataset: webdataset's ``ShardWriter`` (members ``KEY.png``, ``KEY.txt``, ``KEY.cls``,
  ``maxcount=per_shard``), with wids's shard listing beside it.

Where a peer is not installed (CI), :func:`write_corpora` writes the MDS and WebDataset
corpora with the stand-ins of ``formats_standins.py`` and says so; LitData's has none.
"""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _harness import package_version
from formats_paths import WIDS_LISTING, installed, mds_size_limit, sample
from formats_standins import write_mds_standin, write_wds_standin

WRITERS = {  # format: (the peer's writer, its module, its distribution)
    "mds": ("MDSWriter", "streaming", "mosaicml-streaming"),
    "litdata": ("optimize", "litdata", "litdata"),
    "wds": ("ShardWriter", "webdataset", "webdataset"),
}


def write_mds(out: Path, count: int, per_shard: int) -> None:
    """The corpus as MDS shards, by Streaming's ``MDSWriter``."""
    from peers_mosaic import import_streaming

    image = importlib.import_module("PIL.Image")
    columns = {"image": "png", "caption": "str", "label": "int"}
    limit = mds_size_limit(per_shard)
    writer = import_streaming().MDSWriter
    with writer(out=str(out), columns=columns, size_limit=limit, exist_ok=True) as mds:
        for i in range(count):
            row = sample(i)
            png = image.open(io.BytesIO(row["png"]))  # MDSWriter's png column takes an image
            mds.write({"image": png, "caption": row["caption"], "label": row["label"]})


def write_litdata(out: Path, count: int, per_shard: int) -> None:
    """The corpus as LitData chunks, by ``litdata.optimize`` (``per_shard`` items each)."""
    litdata = importlib.import_module("litdata")
    litdata.optimize(
        fn=litdata_items,
        inputs=[(start, min(start + per_shard, count)) for start in range(0, count, per_shard)],
        output_dir=str(out),
        chunk_size=per_shard,
        num_workers=1,
        mode="overwrite",
    )


def litdata_items(span: tuple[int, int]) -> Iterator[dict[str, Any]]:
    """LitData's items of samples ``[start, stop)`` (a generator: one input, many items)."""
    for i in range(*span):
        row = sample(i)
        yield {"image": row["png"], "caption": row["caption"], "label": row["label"]}


def write_wds(out: Path, count: int, per_shard: int) -> None:
    """The corpus as WebDataset tar shards, by webdataset's ``ShardWriter``."""
    webdataset = importlib.import_module("webdataset")
    out.mkdir(parents=True, exist_ok=True)
    pattern = str(out / "shard-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i in range(count):
            row = sample(i)
            sink.write({"__key__": f"{i:08d}", "png": row["png"], "txt": row["caption"],
                        "cls": row["label"]})  # fmt: skip


def write_wids_listing(out: Path, count: int, per_shard: int) -> None:
    """wids's dataset description of the tar shards (what ``widsindex create`` writes)."""
    shards = [{"url": f"shard-{n:06d}.tar", "nsamples": min(per_shard, count - start)}
              for n, start in enumerate(range(0, count, per_shard))]  # fmt: skip
    listing = {"__kind__": "wids-shard-index-v1", "wids_version": 1, "shardlist": shards}
    (out / WIDS_LISTING).write_text(json.dumps(listing))


def write_corpora(root: Path, samples: int, per_shard: int) -> dict[str, str]:
    """Each format's corpus, by the peer's writer or (without it) a stand-in; who wrote it."""
    writers: dict[str, str] = {}
    peers: dict[str, Callable[[Path, int, int], None]] = {
        "mds": write_mds, "litdata": write_litdata, "wds": write_wds,
    }  # fmt: skip
    standins = {"mds": write_mds_standin, "wds": write_wds_standin}
    for name, (writer, module, distribution) in WRITERS.items():
        write = peers[name] if installed(module) else standins.get(name)
        if write is None:
            continue
        write(root / name, samples, per_shard)
        version = package_version(distribution)
        writers[name] = (
            f"{writer} ({distribution} {version})"
            if installed(module)
            else ("stand-in (formats_standins.py; the peer is not installed)")
        )
    if "wds" in writers:
        write_wids_listing(root / "wds", samples, per_shard)
    return writers


def warm(root: Path) -> int:
    """Read every file of the corpora once (the page cache is warm for every path)."""
    total = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            total += len(path.read_bytes())
    return total


def shard_sizes(root: Path, name: str) -> list[int]:
    """Samples per shard of a written corpus (from its own index, or the wids listing)."""
    index = {"mds": "index.json", "litdata": "index.json", "wds": "wids.json"}[name]
    data = json.loads((root / name / index).read_text())
    entries = data.get("shards") or data.get("chunks") or data.get("shardlist") or []
    return [int(e.get("samples", e.get("chunk_size", e.get("nsamples", 0)))) for e in entries]
