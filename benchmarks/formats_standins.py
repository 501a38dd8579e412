"""Stand-in writers of ``bench_formats.py``, used ONLY where the peers are not installed (CI).

The benchmark's corpora are written by the peers' own writers (``formats_paths.py``). CI's
test interpreter has none of the peers, so its ``--quick`` smoke run writes the MDS and
WebDataset corpora with these two small writers instead, which follow the peers' code:
Streaming 0.13.0's ``MDSWriter.encode_sample``/``encode_joint_shard``/``flush_shard`` and
its shard-size rule (the files are byte for byte ``MDSWriter``'s, checked against it), and
webdataset 1.0.2's ``TarWriter`` (members ``KEY.EXT`` in sorted order, mode 0444, owner
``bigdata``, a float mtime, so a PAX header each: every member at ``ShardWriter``'s offset;
only the mtimes differ). A result made from them records ``stand-in`` as the writer; its
numbers time this library's readers only, never a peer. LitData's format has no stand-in:
without litdata its paths are skipped.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

from formats_paths import mds_size_limit, sample


def write_mds_standin(out: Path, count: int, per_shard: int) -> None:
    """The corpus as ``MDSWriter(columns={"image": "png", "caption": "str", "label": "int"})``."""
    import numpy as np

    limit = mds_size_limit(per_shard)
    names, encodings, sizes = ["caption", "image", "label"], ["str", "png", "int"], [None, None, 8]
    config = {"version": 2, "format": "mds", "compression": None, "hashes": [],
              "size_limit": limit, "column_names": names, "column_encodings": encodings,
              "column_sizes": sizes}  # fmt: skip
    config_data = json.dumps(config, sort_keys=True).encode()
    out.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, object]] = []
    pending: list[bytes] = []

    def flush() -> None:
        offsets = np.array([0, *map(len, pending)]).cumsum().astype(np.uint32)
        offsets += 4 + offsets.nbytes + len(config_data)
        data = np.uint32(len(pending)).tobytes() + offsets.tobytes() + config_data
        data += b"".join(pending)
        name = f"shard.{len(shards):05d}.mds"
        (out / name).write_bytes(data)
        raw = {"basename": name, "bytes": len(data), "hashes": {}}
        shards.append({"samples": len(pending), "raw_data": raw, "zip_data": None, **config})
        pending.clear()

    size = 8 + len(config_data)  # MDSWriter's extra bytes per shard
    for i in range(count):
        row = sample(i)
        caption = row["caption"].encode()
        encoded = np.array([len(caption), len(row["png"])], np.uint32).tobytes()
        encoded += caption + row["png"] + np.int64(row["label"]).tobytes()
        if size + len(encoded) + 4 > limit:  # MDSWriter's rule: 4 bytes of offset a sample
            flush()
            size = 8 + len(config_data)
        pending.append(encoded)
        size += len(encoded) + 4
    if pending:
        flush()
    (out / "index.json").write_text(json.dumps({"version": 2, "shards": shards}, sort_keys=True))


def write_wds_standin(out: Path, count: int, per_shard: int) -> None:
    """The corpus as ``ShardWriter(maxcount=per_shard)`` writes it: ``KEY.{cls,png,txt}``."""
    out.mkdir(parents=True, exist_ok=True)
    now = time.time()  # a float: a PAX mtime header per member, as ShardWriter writes
    for number, start in enumerate(range(0, count, per_shard)):
        with tarfile.open(out / f"shard-{number:06d}.tar", "w") as tar:  # PAX, as it writes
            for i in range(start, min(start + per_shard, count)):
                row = sample(i)
                fields = {"cls": str(row["label"]).encode(), "png": row["png"],
                          "txt": row["caption"].encode()}  # fmt: skip
                for ext, data in fields.items():
                    info = tarfile.TarInfo(f"{i:08d}.{ext}")
                    info.size, info.mtime, info.mode = len(data), now, 0o444
                    info.uname = info.gname = "bigdata"
                    tar.addfile(info, io.BytesIO(data))
