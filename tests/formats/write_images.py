"""Write one image-caption set three ways, with each peer's own writer, for training tests.

Run under the peers' interpreter (``.venv-peers/bin/python``, ``make setup``)::

    python tests/formats/write_images.py OUT_DIR

The set is :data:`SAMPLES` small RGB images (:func:`pixels`, ``8 x 8``) with a caption each
(:func:`caption`), both pure functions of the sample id (NumPy only: the test module imports
them). It writes into ``OUT_DIR``:

* ``png/<id>.png``: the images as PNG files (Pillow), the set as it lies on disk;
* ``mds/``: ``streaming.MDSWriter`` with columns ``id`` (``int``), ``png`` (``png``: MDS
  encodes the PIL image itself) and ``caption`` (``str``), a few samples per shard;
* ``wds/shard-<n>.tar``: ``webdataset.ShardWriter`` samples ``{"__key__", "png", "txt",
  "cls"}`` (the PNG file's bytes, the caption, the id), :data:`WDS_MAXCOUNT` per shard;
* ``litdata/``: ``litdata.optimize`` of a dict item ``{"id", "image", "caption"}``, the
  image a ``litdata.Image(path=...)`` of the PNG file, :data:`LITDATA_CHUNK` items a chunk;
* ``images.json``: the peers' versions and, per format, the SHA-256 of the PNG bytes each
  writer stored for every id (MDS's from its own ``png`` encoder), so that a test process
  without Pillow can still check the bytes it reads.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import io
import json
import sys
from pathlib import Path
from typing import Any, Final

import numpy as np

SAMPLES: Final = 24
SEED: Final = 29
SIZE: Final = (8, 8)  # height, width
MDS_SIZE_LIMIT: Final = 1_400  # bytes: about 4 samples a shard, uneven counts
WDS_MAXCOUNT: Final = 5  # samples per tar: 5, 5, 5, 5, 4
LITDATA_CHUNK: Final = 7  # items per chunk: 7, 7, 7, 3
FORMATS: Final = ("mds", "wds", "litdata")
WORDS: Final = ("a", "red", "small", "grid", "of", "noise", "café", "über", "naïve", "🙂")


def pixels(i: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The ``(8, 8, 3)`` uint8 RGB pixels of image ``i``.

    Example:
        >>> pixels(3).shape, pixels(3).dtype.name, bool((pixels(3) == pixels(3)).all())
        ((8, 8, 3), 'uint8', True)
    """
    rng = np.random.default_rng([SEED, i])
    return rng.integers(0, 256, size=(*SIZE, 3), dtype=np.uint8)


def caption(i: int) -> str:
    """The caption of image ``i``: its id and a few words (some not ASCII).

    Example:
        >>> caption(0).startswith("image 0:")
        True
    """
    rng = np.random.default_rng([SEED, i, 1])
    words = rng.choice(len(WORDS), size=1 + i % 5)
    return f"image {i}: " + " ".join(WORDS[int(w)] for w in words)


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data`` (what ``images.json`` records).

    Example:
        >>> sha256(b"")[:16]
        'e3b0c44298fc1c14'
    """
    return hashlib.sha256(data).hexdigest()


def _png_bytes(i: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels(i)).save(out, format="PNG")
    return out.getvalue()


def _litdata_item(png_dir: str, i: int) -> dict[str, Any]:
    from litdata import Image

    return {"id": i, "image": Image(path=f"{png_dir}/{i:06d}.png"), "caption": caption(i)}


def write_mds(out: Path) -> list[str]:
    """``out / "mds"`` by ``MDSWriter``; the SHA-256 of the PNG it encodes for each id."""
    from PIL import Image

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
    from formats.write_mds import import_streaming  # the torchvision placeholders MDS needs

    streaming = import_streaming()
    from streaming.base.format.mds.encodings import mds_encode

    columns = {"id": "int", "png": "png", "caption": "str"}
    hashes = []
    with streaming.MDSWriter(
        out=str(out / "mds"), columns=columns, size_limit=MDS_SIZE_LIMIT
    ) as writer:
        for i in range(SAMPLES):
            image = Image.fromarray(pixels(i))
            writer.write({"id": i, "png": image, "caption": caption(i)})
            hashes.append(sha256(mds_encode("png", image)))
    return hashes


def write_wds(out: Path, png: list[bytes]) -> list[str]:
    """``out / "wds"`` by ``webdataset.ShardWriter``; the SHA-256 of each stored PNG."""
    webdataset = importlib.import_module("webdataset")  # the peers' venv only
    (out / "wds").mkdir()
    pattern = str(out / "wds" / "shard-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=WDS_MAXCOUNT, verbose=0) as writer:
        for i in range(SAMPLES):
            writer.write({"__key__": f"{i:06d}", "png": png[i], "txt": caption(i), "cls": i})
    return [sha256(data) for data in png]


def write_litdata(out: Path, png: list[bytes]) -> list[str]:
    """``out / "litdata"`` by ``litdata.optimize``; the SHA-256 of each stored PNG."""
    from litdata import optimize

    optimize(
        fn=functools.partial(_litdata_item, str(out / "png")),
        inputs=list(range(SAMPLES)),
        output_dir=str(out / "litdata"),
        chunk_size=LITDATA_CHUNK,
        num_workers=1,
        verbose=False,
    )
    return [sha256(data) for data in png]


def main(out: Path) -> None:
    """Write the PNG files, the three corpora and ``images.json`` under ``out``."""
    (out / "png").mkdir(parents=True)
    png = [_png_bytes(i) for i in range(SAMPLES)]
    for i, data in enumerate(png):
        (out / "png" / f"{i:06d}.png").write_bytes(data)
    stored = {
        "mds": write_mds(out),
        "wds": write_wds(out, png),
        "litdata": write_litdata(out, png),
    }
    packages = ("mosaicml-streaming", "webdataset", "litdata", "pillow")
    info = {
        "samples": SAMPLES,
        "versions": {name: importlib.metadata.version(name) for name in packages},
        "png_sha256": stored,
    }
    (out / "images.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR")
    main(Path(sys.argv[1]).resolve())
