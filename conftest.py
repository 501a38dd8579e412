"""The test session's set-up: README/docs snippets run through Sybil; Hypothesis replays.

Every Python snippet of README.md and docs/ runs as written, through Sybil.

A page's snippets share one namespace, top to bottom, so a page can show its set-up once
(a visible block of stand-in datasets and a model) and the snippets after it use those
names. Each page runs in a fresh temporary folder: checkpoints and shards the snippets write
land there. A snippet that cannot run here (it needs a GPU cluster) is preceded by a
visible ``<!-- skip: next "reason" -->`` comment in the page's source.

Every property test draws its examples from a seed derived from the test itself
(Hypothesis's ``derandomize``), so two runs of the suite on the same code test the same
inputs and a CI failure reproduces with the same command. Fresh examples are an explicit
choice: ``LRD_HYPOTHESIS=explore``, implied by the fault campaign's soak (``make soak``).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest
from hypothesis import settings
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

collect_ignore_glob = ["docs/*.py"]  # the docs' build helpers are not tests

# `make quick` leaves out the tests marked `slow`: these files train Lightning models, start
# servers or processes, or run a campaign. Marked by path, so a test added to one is too.
SLOW_PATHS = (
    "README.md",
    "docs/",
    "tests/faults/",
    "tests/formats/",
    "tests/matrix/",
    "tests/test_benchmarks_run.py",
    "tests/torchdata_suite/",
    "tests/test_callback_mutants_",
    "tests/test_callback_survivors.py",
    "tests/test_data_doc_promises.py",
    "tests/test_datamodule",
    "tests/test_doc_snippets_resume.py",
    "tests/test_docs_from_a_user.py",
    "tests/test_documents_resume.py",
    "tests/test_examples.py",
    "tests/test_fabric.py",
    "tests/test_index_statistics.py",
    "tests/test_lightning",
    "tests/test_mixing_promises.py",
    "tests/test_mixing_resume.py",
    "tests/test_online_mixing.py",
    "tests/test_remote_",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_PATHS` ``slow``."""
    root = str(config.rootpath) + os.sep
    for item in items:
        if str(item.path).removeprefix(root).startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)


# no deadline: a property test checks results, not speed (and shares the CPU under xdist)
settings.register_profile("replay", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
_SOAK = os.environ.get("LRD_SOAK", "") not in ("", "0")
settings.load_profile(
    "explore" if _SOAK or os.environ.get("LRD_HYPOTHESIS") == "explore" else "replay"
)


def _enter(namespace: dict[str, Any]) -> None:
    namespace["_lrd_cwd"] = os.getcwd()
    namespace["_lrd_tmp"] = tempfile.TemporaryDirectory(prefix="lrd-docs-")
    os.chdir(namespace["_lrd_tmp"].name)


def _leave(namespace: dict[str, Any]) -> None:
    os.chdir(namespace["_lrd_cwd"])
    namespace["_lrd_tmp"].cleanup()


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["*.md"],
    setup=_enter,
    teardown=_leave,
).pytest()
