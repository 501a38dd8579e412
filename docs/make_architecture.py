"""The package's layers, read from its own imports, and the check that keeps them.

``docs/architecture.md`` shows the layers with the imports the code really has between
them; this script writes that block from the source, and ``--check`` (run by ``make docs``
and by ``tests/test_architecture.py``) fails when the block is stale, when a module imports
a layer above its own, when two modules import each other (directly or round a cycle), or
when a module is over 300 lines without a ``# size:`` reason in its first five lines::

    .venv/bin/python docs/make_architecture.py          # rewrites the marked block
    .venv/bin/python docs/make_architecture.py --check  # exits 1 on any finding

Imports inside functions count (a deferred import still ties two modules together);
imports under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "lightning_resumable_data"
PAGE = ROOT / "docs" / "architecture.md"
START, END = "<!-- layers:start -->", "<!-- layers:end -->"
MAX_LINES = 300

# Bottom to top: a module may import its own layer and the layers before it, never after.
LAYERS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("index", ("index",), "pure index math on integers and NumPy arrays"),
    ("foundation", ("state", "pins", "randomness", "seeding", "_lazy"), "states, pins, keyed RNGs"),
    ("datasets", ("datasets",), "the mixture dataset: sources at global offsets"),
    ("samplers", ("samplers",), "position and configuration; call the index math"),
    (
        "loader",
        ("_batching", "_direct", "_progress", "_rows", "resume", "loader"),
        "batches and resume strategies",
    ),
    ("shards", ("shards",), "token shards: readers, residency, the shard loader"),
    ("remote", ("remote",), "object storage: cache, retries, ranges, remote readers"),
    ("documents", ("documents",), "document corpora and packing, local or remote"),
    ("formats", ("formats",), "peers' formats read in place: MDS, LitData, WebDataset shards"),
    ("integration", ("lightning", "fabric"), "Lightning's DataModule and Callback, Fabric"),
    ("cli", ("cli",), "the lrd command line"),
)


def module_name(path: Path) -> str:
    """``lightning_resumable_data.x.y`` for ``lightning_resumable_data/x/y.py``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str) -> set[str]:
    """The package's modules (or names in them) that ``path`` imports at run time."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            hidden = guarded or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            )
            if not hidden and isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif not hidden and isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - child.level + 1], base])
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child, hidden)

    visit(ast.parse(path.read_text()), False)
    return {name for name in found if name.startswith(PACKAGE + ".")}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules it imports (the root package excluded)."""
    files = {module_name(f): f for f in sorted((ROOT / PACKAGE).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        if name == PACKAGE:
            continue  # the root only re-exports names lazily, by their module's name
        deps = set()
        for target in imports(path, name):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target not in (name, PACKAGE) and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    return graph


def layer_of(module: str) -> int:
    """The index of ``module``'s layer in :data:`LAYERS`."""
    top = module.split(".")[1]
    for index, (_, packages, _) in enumerate(LAYERS):
        if top in packages:
            return index
    raise SystemExit(f"{module} is in no layer: add {top!r} to LAYERS in {Path(__file__).name}")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles (strongly connected components of two or more modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


def findings(graph: dict[str, set[str]]) -> Iterator[str]:
    """Every upward import, cycle and unexplained large module, one line each."""
    for module, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if layer_of(dep) > layer_of(module):
                above = LAYERS[layer_of(dep)][0]
                yield f"upward import: {module} -> {dep} (layer {above!r} is above)"
    for cycle in cycles(graph):
        yield "import cycle: " + " <-> ".join(cycle)
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES and not any(line.startswith("# size:") for line in lines[:5]):
            yield (
                f"{path.relative_to(ROOT)}: {len(lines)} lines, over {MAX_LINES} with no "
                "'# size: <reason>' line in its first 5 lines"
            )


def render(graph: dict[str, set[str]]) -> str:
    """The page's block: the layers, top first, with the lower layers each one imports."""
    uses: dict[int, set[int]] = {i: set() for i in range(len(LAYERS))}
    for module, deps in graph.items():
        uses[layer_of(module)].update(layer_of(d) for d in deps if layer_of(d) != layer_of(module))
    rows = [
        "| layer | packages and modules | what it holds | imports from |",
        "| --- | --- | --- | --- |",
    ]
    for i in reversed(range(len(LAYERS))):
        name, packages, holds = LAYERS[i]
        below = ", ".join(LAYERS[j][0] for j in sorted(uses[i], reverse=True)) or "(nothing)"
        listed = ", ".join(f"`{p}`" for p in packages)
        rows.append(f"| {i + 1}. {name} | {listed} | {holds} | {below} |")
    return "\n".join(rows)


def main() -> int:
    """Rewrite the page's block (or check it with ``--check``); 1 on any finding."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on a finding or a stale page")
    args = parser.parse_args()
    graph = import_graph()
    problems = list(findings(graph))
    text = PAGE.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    page = f"{head}{START}\n{render(graph)}\n{END}{tail}"
    if args.check:
        if page != text:
            problems.append(
                f"{PAGE.relative_to(ROOT)} is stale: run python docs/make_architecture.py"
            )
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    PAGE.write_text(page)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
