"""Imports run one way, down the layers of docs/architecture.md, and no store engine stands on
another.

The graph is :func:`test_import_graph.import_graph`'s: every module under
``src/vancetope_rag`` parsed with :mod:`ast`, every import an edge (``if TYPE_CHECKING:``
and deferred imports included). Each module belongs to one layer (the longest prefix listed in
:data:`LAYERS` wins); an edge from a layer to a higher one fails, as does an import from one
engine package of ``store/`` into another, an import of an engine from the in-process indexes,
the ports or ``store/sql/``, or a module no layer claims (a new top-level module must be placed).
"""

from __future__ import annotations

from test_import_graph import find_cycle, import_graph

P = "vancetope_rag"

#: The layers, lowest first; a module may import its own layer and those before it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("domain", (f"{P}.domain", f"{P}.errors", f"{P}.secrets")),
    ("extraction", (f"{P}.extraction",)),
    (
        "runtime",
        (
            f"{P}.config",
            f"{P}.recipes",
            f"{P}.bundled_recipes",
            f"{P}.machine",
            f"{P}.running",
            f"{P}.coalesce",
            f"{P}.health",
            f"{P}.outbound_http",
        ),
    ),
    ("store", (f"{P}.store",)),
    (
        "services",
        (
            f"{P}.services",
            f"{P}.embeddings",
            f"{P}.model_profiles",
            f"{P}.provider_table",
            f"{P}.rerankers",
            f"{P}.metrics",
            # the reranker as a LlamaIndex postprocessor: what the app composes, not a surface
            f"{P}.integrations.llamaindex.rerank",
        ),
    ),
    (
        "plugins",
        (f"{P}.hookspecs", f"{P}.plugins", f"{P}.default_plugins", f"{P}.tools"),
    ),
    ("composition", (f"{P}.app",)),
    ("surfaces", (f"{P}.cli", f"{P}.api", f"{P}.integrations", f"{P}.proxy", P)),
]

ENGINES = ("sqlite", "postgres", "mongo")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest prefix that holds ``module``."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return best[1] if best else None


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    arrows = []
    for module, targets in graph.items():
        here = layer_of(module)
        for target in targets:
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                arrows.append(f"{module} ({LAYERS[here][0]}) -> {target} ({LAYERS[there][0]})")
    return sorted(arrows)


def _store_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "store" else None


def engine_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one engine package into another, or from ``inprocess``, ``port`` or ``sql``
    into an engine (the in-process indexes, the ports and the SQL code the two SQL engines
    share serve every engine, never stand on one)."""
    arrows = []
    for module, targets in graph.items():
        here = _store_part(module)
        if here not in (*ENGINES, "inprocess", "port", "sql"):
            continue
        for target in targets:
            there = _store_part(target)
            if there in ENGINES and there != here:
                arrows.append(f"{module} -> {target}")
    return sorted(arrows)


def test_every_module_has_a_layer() -> None:
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_the_checks_catch_what_they_should() -> None:
    graph = {
        f"{P}.domain.x": {f"{P}.services.y"},
        f"{P}.store.postgres.a": {f"{P}.store.sqlite.b"},
        f"{P}.store.inprocess.c": {f"{P}.store.mongo.d"},
        f"{P}.store.sqlite.b": {f"{P}.store.inprocess.c", f"{P}.store.port.types"},
        f"{P}.store.sql.control": {f"{P}.store.postgres.db"},
    }
    assert upward_arrows(graph) == [f"{P}.domain.x (domain) -> {P}.services.y (services)"]
    assert engine_arrows(graph) == [
        f"{P}.store.inprocess.c -> {P}.store.mongo.d",
        f"{P}.store.postgres.a -> {P}.store.sqlite.b",
        f"{P}.store.sql.control -> {P}.store.postgres.db",
    ]
    assert layer_of(f"{P}.integrations.llamaindex.llm") == len(LAYERS) - 1
    assert LAYERS[layer_of(f"{P}.integrations.llamaindex.rerank") or 0][0] == "services"


def test_no_import_runs_up_the_layers() -> None:
    assert upward_arrows(import_graph()) == []


def test_no_store_engine_imports_another() -> None:
    assert engine_arrows(import_graph()) == []


def test_no_import_cycle_between_layers_or_modules() -> None:
    assert find_cycle(import_graph()) is None
