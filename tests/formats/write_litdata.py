"""Write LitData corpora with LitData's own ``litdata.optimize``, for tests/formats/test_litdata.py.

Run under the peers' interpreter (``.venv-peers/bin/python``, which has ``litdata``):
``python tests/formats/write_litdata.py OUT_DIR`` writes one corpus per sub-directory of
``OUT_DIR`` (see :data:`CORPORA`). The item rules below import neither ``litdata`` nor this
package, so the test module imports them to compute the expected samples itself.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

ITEMS = 40  # items of the pytree corpora
SCALARS = 30
ROWS = 25
DOCS = 12  # documents of the token corpus
BLOCK_SIZE = 8  # the TokensLoader block size the tests read with
PASSWORD = "lrd-test"


def pytree_item(i: int) -> dict[str, Any]:
    """Item ``i``: one leaf of each serializer LitData picks for a dict (and a nested tuple)."""
    rng = np.random.default_rng(i)
    return {
        "id": i,  # int
        "name": f"sample-{i}-" + "é" * (i % 4),  # str
        "array": rng.standard_normal((2, 1 + i % 3)).astype(np.float32),  # numpy
        "tokens": rng.integers(0, 1000, 3 + i % 5).astype(np.int32),  # no_header_numpy:2
        "tensor": torch.arange(6, dtype=torch.int64).reshape(2, 3) * i,  # tensor
        "vector": torch.linspace(0, 1, 2 + i % 3, dtype=torch.float32) + i,  # no_header_tensor:1
        "score": i / 7,  # float
        "flag": i % 3 == 0,  # bool
        "blob": bytes(range(i % 11)),  # bytes
        "tags": [f"t{j}" for j in range(i % 4)],  # a list: LitData stores it as one json leaf
        "extra": complex(i, -i),  # pickle
        "pair": (i * 2, f"p{i}"),  # a nested tuple node of two leaves
    }


def scalar_item(i: int) -> tuple[int, float, str]:
    """Item ``i`` of the tuple corpus."""
    return i, i * 0.5, "x" * (i % 6)


def token_doc(i: int) -> torch.Tensor:
    """Document ``i`` of the token corpus (a 1-D int32 tensor of 5 to 24 tokens)."""
    return torch.arange(100 * i, 100 * i + 5 + (7 * i) % 20, dtype=torch.int32)


def row_item(i: int) -> dict[str, Any]:
    """Item ``i`` of the JSON-row corpus (LitData stores such rows as an Arrow footer)."""
    return {"id": i, "text": f"row {i}", "labels": list(range(i % 3))}


def _identity(fn: Any, i: int) -> Any:
    return fn(i)


CORPORA: dict[str, dict[str, Any]] = {
    "pytree": {"rule": pytree_item, "n": ITEMS, "chunk_bytes": 3000},
    "scalars": {"rule": scalar_item, "n": SCALARS, "chunk_size": 7},
    "tokens": {"rule": token_doc, "n": DOCS, "chunk_size": 60, "tokens": True},
    "zstd": {"rule": pytree_item, "n": ITEMS, "chunk_bytes": 3000, "compression": "zstd",
             "compression_batch_size": 4},
    "zstd_chunk": {"rule": pytree_item, "n": ITEMS, "chunk_bytes": 3000, "compression": "zstd",
                   "compression_level": "chunk"},
    "zstd_sample": {"rule": pytree_item, "n": ITEMS, "chunk_bytes": 3000, "compression": "zstd",
                    "compression_level": "sample"},
    "rows": {"rule": row_item, "n": ROWS, "chunk_size": 10},
    "encrypted": {"rule": scalar_item, "n": 6, "chunk_size": 3, "encrypted": True},
}  # fmt: skip


def write(out_dir: Path) -> None:
    """Write every corpus of :data:`CORPORA` under ``out_dir`` with ``litdata.optimize``."""
    from litdata import optimize
    from litdata.streaming.item_loader import TokensLoader
    from litdata.utilities.encryption import FernetEncryption

    for name, spec in CORPORA.items():
        keys = ("chunk_bytes", "chunk_size", "compression", "compression_level",
                "compression_batch_size")  # fmt: skip
        options: dict[str, Any] = {k: spec[k] for k in keys if k in spec}
        if spec.get("tokens"):
            options["item_loader"] = TokensLoader()
        if spec.get("encrypted"):
            options["encryption"] = FernetEncryption(password=PASSWORD, level="chunk")
        optimize(
            fn=functools.partial(_identity, spec["rule"]),
            inputs=list(range(spec["n"])),
            output_dir=str(out_dir / name),
            num_workers=1,
            verbose=False,
            **options,
        )


if __name__ == "__main__":
    write(Path(sys.argv[1]).resolve())
