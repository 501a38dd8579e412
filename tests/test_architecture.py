"""The layering of docs/architecture.md holds: no upward import, no cycle, small modules.

``docs/make_architecture.py --check`` (also run by ``make docs``) in the test suite's form,
plus checks that the checker itself catches what it must.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_architecture", ROOT / "docs" / "make_architecture.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_no_upward_import_no_cycle_no_unexplained_large_module() -> None:
    checker = _checker()
    assert list(checker.findings(checker.import_graph())) == []


def test_the_architecture_page_is_generated_from_the_imports() -> None:
    checker = _checker()
    text = checker.PAGE.read_text()
    block = text.split(checker.START)[1].split(checker.END)[0].strip()
    assert block == checker.render(checker.import_graph())


def test_every_module_is_in_a_layer() -> None:
    checker = _checker()
    layers = {checker.layer_of(module) for module in checker.import_graph()}
    assert layers == set(range(len(checker.LAYERS)))


def test_the_check_catches_a_cycle_and_an_upward_import() -> None:
    checker = _checker()
    graph = checker.import_graph()
    upward = {**graph, "lightning_resumable_data.index.keys": {"lightning_resumable_data.loader"}}
    assert any(
        f.startswith("upward import: lightning_resumable_data.index.keys")
        for f in checker.findings(upward)
    )
    a, b = "lightning_resumable_data.state", "lightning_resumable_data.pins"
    cyclic = {**graph, a: graph[a] | {b}, b: graph[b] | {a}}
    assert checker.cycles(cyclic) == [sorted([a, b])]


def test_contributing_names_modules_that_exist() -> None:
    """CONTRIBUTING.md's table of where each behaviour lives names real files."""
    import re

    text = (ROOT / "CONTRIBUTING.md").read_text()
    paths = set(re.findall(r"`(lightning_resumable_data/[\w/]+(?:\.py)?)`", text))
    assert len(paths) >= 15
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []
