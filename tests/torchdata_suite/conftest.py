"""torchdata's StatefulDataLoader suite run against ours: the one place for exclusions.

The files are fetched by ``fetch_suite.py`` (torchdata v0.11.0, only the import changed).
A test is listed in ``EXCLUDED`` only if it cannot pass against any loader but torchdata's
own, because it reads torchdata's private iterator internals; every entry says why. Slow
tests (they spawn workers) are marked ``slow`` in ``SLOW`` and still run in CI.
"""

from __future__ import annotations

import importlib.util

import pytest

# test node id (file::Class::test, or file::test) -> the reason it cannot pass here.
EXCLUDED: dict[str, str] = {}

# Modules whose third-party dependencies are optional.
NEEDS = {"test_hugging_face.py": "datasets"}

SLOW: set[str] = set()


def pytest_ignore_collect(collection_path, config):  # type: ignore[no-untyped-def]
    """Skip a module whose optional dependency is not installed."""
    needed = NEEDS.get(collection_path.name)
    return bool(needed and importlib.util.find_spec(needed) is None)


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Apply the exclusion list (with reasons) and the slow marks."""
    for item in items:
        name = item.nodeid.split("torchdata_suite/", 1)[-1]
        base = name.split("[", 1)[0]
        reason = EXCLUDED.get(base)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"torchdata internals: {reason}"))
        if base in SLOW:
            item.add_marker(pytest.mark.slow)
