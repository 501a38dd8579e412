"""Write a WebDataset corpus with WebDataset's own writers, and what WebDataset reads from it.

Run under the peers' interpreter (``.venv-peers/bin/python``, ``make setup``)::

    python tests/formats/write_wds.py OUT_DIR

It writes into ``OUT_DIR``:

* ``shard-000000.tar`` ... ``shard-000003.tar``: :data:`N` samples of :func:`sample` by
  ``webdataset.ShardWriter(maxcount=10)`` (jpg bytes, cls int, json dict, txt str, npy
  array; a ``.gz`` text field; a field in upper case);
* ``edge-000000.tar``: odd samples by ``webdataset.TarWriter`` (a key in a folder, a
  key over 100 characters, a two-dot field, an empty field, a large member);
* ``gnu-000000.tar``: a tar by :mod:`tarfile` in GNU format with members WebDataset skips
  (a folder, a link, a file without a dot, ``__meta__``) and a key that comes back later;
* ``expected.json``: every sample ``webdataset.WebDataset(url, shardshuffle=False)``
  yields from each shard (raw fields in base64), the same shards read with ``.decode()``
  (JSON-able values; arrays as ``{"dtype", "shape", "data"}``), and ``braceexpand`` of a
  few patterns.

The test imports :func:`sample` (this module imports no peer at its top) and checks both.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

N = 37  # 4 shards of maxcount=10: 10, 10, 10, 7
MAXCOUNT = 10
PATTERNS = [
    "shard-{000000..000003}.tar",
    "a{1..3..2}b{x,y}",
    "{07..10}",
    "{a..c}-{2..0}",
    "x{a,b{1,2}}y",
    "{single}",
    r"esc\{0,1\}",
    "{,pre}fix",
]


def sample(i: int) -> dict[str, Any]:
    """Sample ``i`` of the main corpus, as given to ``ShardWriter.write`` (the test's rule)."""
    rng = np.random.default_rng(i)
    size = int(rng.integers(0, 3000))
    jpg = b"\xff\xd8\xff\xe0" + rng.bytes(size) + b"\xff\xd9"  # JPEG-framed bytes
    array = rng.standard_normal((i % 4, 3)).astype(np.float32 if i % 2 else np.float64)
    return {
        "__key__": f"{i:06d}",
        "jpg": jpg,
        "cls": i % 7,
        "json": {"id": i, "caption": f"sample {i}", "tags": ["a"] * (i % 3), "score": i / 8},
        "txt": "" if i == 3 else f"text {i} é✓ " * (i % 5),
        "npy": array if i % 3 else np.arange(i, dtype=np.int64),
        "txt.gz": f"zipped {i}",
        "IDX": str(i * 11),  # written as "<key>.IDX", read as field "idx"
    }


def edge_samples() -> list[dict[str, Any]]:
    """The samples of ``edge-000000.tar`` (by ``TarWriter``)."""
    return [
        {"__key__": "folder/sub/000001", "txt": "in a folder", "seg.npy": np.eye(2)},
        {"__key__": "k" * 120, "txt": "a key over 100 characters", "cls": 1},
        {"__key__": "empty", "txt": "", "json": []},
        {"__key__": "big", "bin": bytes(range(256)) * 40, "cls": 2},
    ]


def write_gnu(path: Path) -> None:
    """``gnu-000000.tar``: GNU format, members WebDataset skips, a key that returns."""
    members: list[tuple[str, bytes | None]] = [
        ("dir/", None),
        ("README", b"no dot: skipped"),
        ("__meta__", b"skipped"),
        ("__meta__/info.txt", b"skipped too"),
        ("a.txt", b"first a"),
        ("a.cls", b"1"),
        ("b.txt", b"b"),
        ("b.lnk", b"a.txt"),  # a symbolic link: skipped
        ("a.json", b'{"again": true}'),  # the key "a" again: a new sample
        ("dir/" + "n" * 110 + ".txt", b"a GNU long name"),
    ]
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif name.endswith(".lnk"):
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "data": value.tolist()}
    return value


def main(out: Path) -> None:
    """Write the corpus into ``out`` and record what WebDataset reads from it."""
    wds = importlib.import_module("webdataset")
    braceexpand = importlib.import_module("braceexpand")
    out.mkdir(parents=True, exist_ok=True)
    with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=MAXCOUNT, verbose=0) as writer:
        for i in range(N):
            writer.write(sample(i))
    with wds.TarWriter(str(out / "edge-000000.tar")) as writer:
        for item in edge_samples():
            writer.write(item)
    write_gnu(out / "gnu-000000.tar")
    shards = sorted(str(path) for path in out.glob("*.tar"))
    raw: dict[str, list[dict[str, Any]]] = {}
    decoded: dict[str, list[dict[str, Any]]] = {}
    for shard in shards:
        dataset = wds.WebDataset(shard, shardshuffle=False)
        raw[shard] = [{k: _jsonable(v) for k, v in item.items()} for item in dataset]
        dataset = wds.WebDataset(shard, shardshuffle=False).decode()
        decoded[shard] = [{k: _jsonable(v) for k, v in item.items()} for item in dataset]
    expected = {
        "webdataset": wds.__version__,
        "shards": shards,
        "raw": raw,
        "decoded": decoded,
        "braceexpand": {p: list(braceexpand.braceexpand(p)) for p in PATTERNS},
    }
    (out / "expected.json").write_text(json.dumps(expected))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
