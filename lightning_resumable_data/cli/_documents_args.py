"""The options of ``lrd trace``/``lrd find`` that name a packed run's corpus (no torch import).

``lrd --help`` builds every parser without importing torch, so the packing modes are
spelled here; a test checks them against ``PackedDataset``'s. An option not given is
taken from the checkpoint (a ``ResumableDataModule`` saves its packed sources' packing).
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["PACKING_MODES", "UNSET", "add_document_options"]

PACKING_MODES: Final = ("concat", "pad")  # documents.packed.PACKING_MODES
UNSET: Final = "unset"  # --eos-id not given (None is "no separator")


def _eos(text: str) -> int | str | None:
    """``--eos-id``: a token id, or ``none`` for no separator (argparse parses the default)."""
    if text == UNSET:
        return UNSET
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token id or 'none'") from None


def add_document_options(parser: argparse.ArgumentParser) -> None:
    """The options that name the run's corpus and packing (``trace`` and ``find``)."""
    group = parser.add_argument_group("packed documents (a PackedDataset run)")
    group.add_argument(
        "--documents",
        action="append",  # given twice: refused (one corpus at a time), not the last kept
        metavar="SPEC",
        help="the corpus the run packed: a Megatron prefix (or its .bin/.idx), Parquet "
        "files (comma-separated), or a save_to_disk folder; NAME=SPEC for a mixture source",
    )
    group.add_argument("--seq-len", type=int, metavar="N", help="the run's seq_len")
    group.add_argument(
        "--eos-id", type=_eos, default=UNSET, metavar="ID", help="the run's eos_id (or none)"
    )
    group.add_argument("--packing-mode", choices=PACKING_MODES, help="the run's mode")
    group.add_argument("--packing-seed", type=int, metavar="S", help="the run's PackedDataset seed")
    group.add_argument(
        "--no-shuffle-documents",
        action="store_const",
        const=False,
        dest="shuffle_documents",
        help="the run had shuffle_documents=False",
    )
    group.add_argument("--column", default="input_ids", help="Parquet/Arrow token column")
