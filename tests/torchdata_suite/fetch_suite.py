"""Fetch torchdata's own StatefulDataLoader test suite (v0.11.0) to run against ours.

The suite is torchdata's (BSD licence, header kept in every file); it is fetched, not kept
in this repository. The only change is the import of ``StatefulDataLoader``, which is
pointed at :class:`lightning_resumable_data.StatefulDataLoader`; everything else, including
the licence header, is byte for byte upstream's. ``conftest.py`` lists the tests that
cannot pass against any other loader (they read torchdata's private iterator internals)
with the reason for each.

Usage (CI does this, see ``make torchdata-suite``)::

    python tests/torchdata_suite/fetch_suite.py          # writes test_*.py next to this file
    python -m pytest tests/torchdata_suite -q
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

TAG = "v0.11.0"
BASE = f"https://raw.githubusercontent.com/pytorch/data/{TAG}/test/stateful_dataloader/"
FILES = (
    "test_dataloader.py",
    "test_state_dict.py",
    "test_hugging_face.py",
    "test_sampler.py",
    "test_incremental_state.py",
)
HERE = Path(__file__).resolve().parent
_IMPORT = re.compile(
    r"^from torchdata\.stateful_dataloader import (?P<names>\(?[^\n]*?StatefulDataLoader[^\n]*)$",
    re.MULTILINE,
)


def point_at_ours(source: str) -> str:
    """Rewrite the import of ``StatefulDataLoader`` (and only it) to this package's.

    Example:
        >>> line = "from torchdata.stateful_dataloader import Stateful, StatefulDataLoader"
        >>> print(point_at_ours(line))
        from torchdata.stateful_dataloader import Stateful
        from lightning_resumable_data import StatefulDataLoader
    """

    def replace(match: re.Match[str]) -> str:
        names = [n.strip() for n in match["names"].strip("()").split(",") if n.strip()]
        others = [n for n in names if n != "StatefulDataLoader"]
        lines = [f"from torchdata.stateful_dataloader import {', '.join(others)}"] if others else []
        return "\n".join([*lines, "from lightning_resumable_data import StatefulDataLoader"])

    rewritten, count = _IMPORT.subn(replace, source)
    if count != 1 and "StatefulDataLoader" in source:
        raise SystemExit(f"expected one import of StatefulDataLoader, found {count}; check {TAG}")
    return rewritten


def main(argv: list[str] | None = None) -> int:
    """Download the suite's files next to this script (or into ``--into``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", type=Path, default=HERE)
    args = parser.parse_args(argv)
    for name in FILES:
        try:
            with urllib.request.urlopen(BASE + name, timeout=60) as response:
                source = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                print(f"{name}: not in {TAG}, skipped")
                continue
            raise
        (args.into / name).write_text(point_at_ours(source))
        print(f"{name}: fetched from {TAG}, import pointed at lightning_resumable_data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
