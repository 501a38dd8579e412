"""What the examples share: quiet output and a kept run folder.

Lightning prints banners, tips and warnings that say nothing about what an example shows
(which accelerators exist, a cloud-logging tip, a deprecation inside Lightning itself, a
checkpoint folder that differs on purpose between the two runs of an example). The examples
filter those known messages, by their text, so that their verdict is what a reader sees;
the library itself never filters anything. Set ``LRD_EXAMPLES_VERBOSE=1`` to see it all.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Final

__all__ = ["inspect_hint", "quiet_lightning", "run_folder"]

# Warnings Lightning (or torch) issues in every example run, whatever the example does.
_WARNINGS: Final = (
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",  # inside Lightning, not ours
    r".*The dirpath has changed from.*",  # the resumed run writes to its own folder
    r".*does not have many workers.*",  # tiny examples use few workers on purpose
    r".*is smaller than the logging interval.*",
    r".*`tensorboardX` has been removed as a dependency.*",
)
# Info lines Lightning logs at the start of every fit.
_INFO: Final = re.compile(
    r"^(GPU available|TPU available|HPU available|💡 Tip|Restoring states from|"
    r"Restored all states from|`Trainer.fit` stopped|Seed set to)"
)


class _DropKnownInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _INFO.match(record.getMessage())


def quiet_lightning() -> None:
    """Silence Lightning's known banners, tips and warnings for this process.

    Call it before building a ``Trainer`` or ``Fabric``. Worker processes inherit the
    warning filters through ``PYTHONWARNINGS``, set here too.
    """
    if os.environ.get("LRD_EXAMPLES_VERBOSE"):
        return
    for pattern in _WARNINGS:
        warnings.filterwarnings("ignore", pattern)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.addFilter(_DropKnownInfo())
        for handler in logger.handlers:
            handler.addFilter(_DropKnownInfo())


def run_folder(example: str, *, fresh: bool = True) -> Path:
    """``./runs/<example>/`` (ignored by git), emptied first unless ``fresh=False``.

    The checkpoints stay there after the example ends, for ``lrd inspect`` to look at.
    """
    folder = Path("runs") / example
    if fresh and folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def inspect_hint(checkpoint: Path) -> str:
    """The line that tells the reader how to look into a kept checkpoint.

    ``lrd`` is named by its path next to this interpreter (``.venv/bin/lrd`` after ``make
    demo``), so the line runs as printed whether or not the venv is activated.
    """
    lrd = Path(sys.executable).with_name("lrd")
    command = "lrd"
    if lrd.is_file():
        relative = os.path.relpath(lrd)
        command = relative if not relative.startswith("..") else str(lrd)
    return f"Look into the checkpoint: {command} inspect {checkpoint}"
