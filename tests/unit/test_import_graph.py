"""No import loop inside vancetope_rag, ``if TYPE_CHECKING:`` imports included.

Every module under ``src/vancetope_rag`` is parsed with :mod:`ast` (nothing is imported) and
every ``import`` / ``from … import`` of a ``vancetope_rag`` module becomes an edge: at module
level, under ``if TYPE_CHECKING:`` and inside functions alike — a deferred import still
couples the two modules, it only hides the loop from the interpreter. ``from pkg import name``
points at the submodule ``pkg.name`` when that is a module, else at ``pkg``. Relative imports
are resolved against the importing module. A package ``__init__`` importing its own
submodules is an ordinary edge (no exception is needed today); a submodule importing its
package's ``__init__`` is one too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import vancetope_rag

PACKAGE = "vancetope_rag"
ROOT = Path(vancetope_rag.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _absolute(module: str, path: Path, level: int, name: str | None) -> str:
    """``from <level dots><name> import …`` in ``module`` as an absolute module name."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not _is_package(path):
        base.pop()  # a plain module's own package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _edges(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):  # every level: module, TYPE_CHECKING blocks, functions
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node.level, node.module)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in known else source)
    edges: set[str] = set()
    for target in targets:
        # `import a.b.c` names a.b.c (and loads its packages, which are not the dependency)
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.startswith(PACKAGE) and target != module:
            edges.add(target)
    return edges


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    return {module: _edges(module, path, known) for module, path in known.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as its modules in order (first repeated last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt, BLACK) == GREY:
                return [*stack[stack.index(nxt) :], nxt]
            if colour.get(nxt) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = BLACK
        return None

    for start in sorted(graph):
        if colour[start] == WHITE:
            found = visit(start)
            if found:
                return found
    return None


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "vancetope_rag.app" in graph
    assert "vancetope_rag.services.rag" in graph["vancetope_rag.app"]


def test_from_package_import_module_is_an_edge_to_the_module() -> None:
    graph = import_graph()
    # `from vancetope_rag.store import Store` names the package; submodule names resolve
    assert all(not m.endswith(".") for edges in graph.values() for m in edges)


def test_find_cycle_reports_a_loop() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
