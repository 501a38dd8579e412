"""The options of ``lrd trace``/``lrd find`` that name a packed run's corpus (no torch import).

``lrd --help`` builds every parser without importing torch, so the packing modes are
spelled here; a test checks them against ``PackedDataset``'s.
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["PACKING_MODES", "add_document_options"]

PACKING_MODES: Final = ("concat", "pad")  # documents.packed.PACKING_MODES


def add_document_options(parser: argparse.ArgumentParser) -> None:
    """The options that name the run's corpus and packing (``trace`` and ``find``)."""
    group = parser.add_argument_group("packed documents (a PackedDataset run)")
    group.add_argument(
        "--documents",
        metavar="SPEC",
        help="the corpus the run packed: a Megatron prefix (or its .bin/.idx), Parquet "
        "files (comma-separated), or a save_to_disk folder; NAME=SPEC for a mixture source",
    )
    group.add_argument("--seq-len", type=int, metavar="N", help="the run's seq_len")
    group.add_argument("--eos-id", type=int, metavar="ID", help="the run's eos_id (default none)")
    group.add_argument("--packing-mode", choices=PACKING_MODES, default="concat")
    group.add_argument("--packing-seed", type=int, default=0, metavar="S", help="its seed")
    group.add_argument(
        "--no-shuffle-documents", action="store_true", help="the run had shuffle_documents=False"
    )
    group.add_argument("--column", default="input_ids", help="Parquet/Arrow token column")
