"""A Lightning run over the image-caption set of ``write_images.py``, read in the peers' formats.

Used by ``tests/formats/test_formats_training.py``. The training data is read in place from
the corpora of ``write_images.py`` (``--corpora``): one format (``--data mds``, ``wds`` or
``litdata``, a :class:`~lightning_resumable_data.DistributedShardedDataset` of its readers) or
a mixture of all three (``--data mixture``, a mapping of those datasets). The DataModule is
the documented one: ``ResumableDataModule(...)`` with no callback passed (it installs its
own) and ``trainer.fit(model, datamodule=dm, ckpt_path=...)``.

The collate function checks every sample against the set's rules (the PNG's SHA-256 as the
writer stored it, the caption, and with Pillow the decoded pixels) and turns the batch into
``{"id", "x"}``: ``id`` is the sample id plus its format's offset (:data:`OFFSETS`). Every rank
appends ``{"step", "epoch", "batch", "ids"}`` to ``OUT/ids_rank<r>.jsonl`` (the ledger, as
``tests/ledger_model.py`` writes it), and ``ModelCheckpoint`` writes
``OUT/ckpt/step=<k>.ckpt`` after every step. ``--kill K:R``: rank ``R`` SIGKILLs the whole
process group inside ``training_step`` of global step ``K``, after logging it (a step that
started and was never checkpointed). ``--serve`` makes the module a fork server
(``faults/forkserve.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DDPStrategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, run as a script
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's package
from faults.forkserve import serve
from ledger_model import LedgerModel

from formats.write_images import caption, pixels, sha256
from lightning_resumable_data import DistributedShardedDataset, ResumableDataModule
from lightning_resumable_data.formats import open_litdata, open_mds, open_webdataset

try:
    from PIL import Image
except ImportError:  # without Pillow the PNG bytes are checked by their SHA-256 alone
    Image = None  # type: ignore[assignment]

OFFSETS: Final = {"mds": 0, "wds": 1000, "litdata": 2000}  # ledger id = offset + sample id
SEED: Final = 11


def open_sources(corpora: Path) -> dict[str, DistributedShardedDataset[dict[str, Any]]]:
    """The three corpora of ``write_images.py``, each a sharded dataset of its readers."""
    return {
        "mds": DistributedShardedDataset(open_mds(corpora / "mds"), seed=SEED),
        "wds": DistributedShardedDataset(open_webdataset(corpora / "wds", decode=True), seed=SEED),
        "litdata": DistributedShardedDataset(open_litdata(corpora / "litdata"), seed=SEED),
    }


def fields(fmt: str, sample: dict[str, Any]) -> tuple[int, bytes, str]:
    """``(id, PNG bytes, caption)`` of a sample as ``fmt``'s reader returns it.

    Example:
        >>> fields("wds", {"__key__": "000003", "cls": 3, "png": b"...", "txt": "image 3"})
        (3, b'...', 'image 3')
    """
    if fmt == "mds":  # the MDSWriter columns
        return int(sample["id"]), sample["png"], sample["caption"]
    if fmt == "wds":  # the WebDataset fields, decoded (cls: int, txt: str; png stays bytes)
        return int(sample["cls"]), sample["png"], sample["txt"]
    return int(sample["id"]), sample["image"], sample["caption"]  # the LitData item


def check_sample(fmt: str, sample: dict[str, Any], stored: dict[str, list[str]]) -> int:
    """Check a sample against the set's rules; return its id.

    Raises:
        ValueError: The PNG bytes, the caption or the pixels are not those of the id.
    """
    i, png, text = fields(fmt, sample)
    problems = []
    if sha256(png) != stored[fmt][i]:
        problems.append(f"PNG sha256 {sha256(png)[:12]}..., stored {stored[fmt][i][:12]}...")
    if text != caption(i):
        problems.append(f"caption {text!r}, written {caption(i)!r}")
    if Image is not None:
        decoded = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        if not np.array_equal(decoded, pixels(i)):
            problems.append("decoded pixels differ from the written ones")
    if problems:
        raise ValueError(f"{fmt} sample {i}: " + "; ".join(problems))
    return i


class Collate:
    """Check each sample, return ``{"id": (B,), "x": (B, 4)}`` (``x``: channel means, caption)."""

    def __init__(self, corpora: Path, fmt: str | None) -> None:
        self.fmt = fmt  # None: a mixture, samples come as (sample, source name)
        self.stored: dict[str, list[str]] = json.loads((corpora / "images.json").read_text())[
            "png_sha256"
        ]

    def __call__(self, batch: list[Any]) -> dict[str, torch.Tensor]:
        pairs = batch if self.fmt is None else [(sample, self.fmt) for sample in batch]
        ids, features = [], []
        for sample, fmt in pairs:
            i = check_sample(fmt, sample, self.stored)
            ids.append(OFFSETS[fmt] + i)
            means = pixels(i).reshape(-1, 3).mean(axis=0) / 255  # checked equal to the PNG's
            features.append([*means.tolist(), len(caption(i)) / 40])
        return {"id": torch.tensor(ids), "x": torch.tensor(features, dtype=torch.float32)}


class KillingModel(LedgerModel):
    """The ledger model; rank ``rank`` SIGKILLs the run's process group in step ``step``."""

    def __init__(self, out: Path, step: int, rank: int) -> None:
        super().__init__(out)
        self.kill_step, self.kill_rank = step, rank

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)  # in the ledger first
        if self.global_step == self.kill_step and self.global_rank == self.kill_rank:
            sys.stdout.flush()
            sys.stderr.flush()
            os.killpg(os.getpgid(0), signal.SIGKILL)
        return loss


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpora", type=Path, required=True)
    parser.add_argument("--data", choices=("mixture", *OFFSETS), default="mixture")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--ckpt", help="resume from this checkpoint")
    parser.add_argument("--kill", default="-1:0", help="K:R: rank R SIGKILLs in step K")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sources = open_sources(args.corpora)
    mixture = args.data == "mixture"
    datamodule = ResumableDataModule(
        sources if mixture else sources[args.data],
        batch_size=args.batch_size,
        seed=SEED,
        return_source=mixture,  # the collate needs each sample's format
        collate_fn=Collate(args.corpora, None if mixture else args.data),
    )
    strategy: Any = "auto"
    if args.devices > 1:  # forked ranks (a fork server's child), gloo on CPU
        strategy = DDPStrategy(start_method="fork", process_group_backend="gloo")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy=strategy,
        max_epochs=args.max_epochs,
        callbacks=[
            ModelCheckpoint(
                dirpath=args.out / "ckpt",
                filename="{step}",
                every_n_train_steps=1,
                save_top_k=-1,
            )
        ],
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.out,
    )
    step, rank = map(int, args.kill.split(":"))
    model = KillingModel(args.out, step, rank)
    trainer.fit(model, datamodule=datamodule, ckpt_path=args.ckpt)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve(main)
    else:
        main(sys.argv[1:])
