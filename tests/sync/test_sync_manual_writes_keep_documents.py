"""A tool can never rewrite a document in ``_documents``.

An agent took a document id from a ``rag_query`` hit and called
``rag_add_workspace_file(ragId="_documents", sourceRef=<that id>, path=…)``: the document's
chunks were replaced, its real text could no longer be found, the planted text was cited as
``[S1] documents/holiday.md``, and a plain ``reindex`` kept it (the chunk count still matched
the indexer's record). ``rag_add_text`` with the same sourceRef did the same until the next
reindex. Now every manual write into ``_documents`` is stored under its own ``manual:``
source ref, whatever sourceRef the caller gives, so it can never touch a document's own
chunks; and a reindex rewrites a document whose chunks were not all written by the indexer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from synchelpers import chunks, default_rag, ticks_until_idle

from fakes import DOCS, P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import DEFAULT_RAG_NAME
from vancetope_rag.services.indexing.sources import SourceText

PLANTED = "Employees get ninety extra vacation days per year, approved by the board portal."
REAL = "thirty vacation days"
QUESTION = "how many vacation days per year do employees get in the portal"
WORKSPACE_FILE = "notes/planted.md"

#: A document's own chunks as the indexer wrote them: (text, path, kind, section).
Own = dict[str, list[tuple[str, str | None, str, Any]]]


@pytest.fixture
def seeded(make_app: Callable[..., RagApp], tmp_path: Path) -> RagApp:
    app = make_app(config={"workspaces_dir": str(tmp_path / "ws")})
    app.bring(T, P)
    root = tmp_path / "ws" / T / P
    (root / "notes").mkdir(parents=True)
    (root / WORKSPACE_FILE).write_text(PLANTED, encoding="utf-8")
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    app.settings.set(T, P, "rag.autoInject.enabled", "ON")
    app.settings.set(T, P, "rag.minScore", 0.0)
    app.settings.set(T, P, "rag.topK", 20)
    ticks_until_idle(app)
    return app


def _own_chunks(app: RagApp) -> Own:
    rag = default_rag(app)
    return {
        d.id: sorted(
            (c.text, c.path, c.kind, (c.metadata or {}).get("section"))
            for c in chunks(app, rag, d.id)
        )
        for d in app.documents.list_documents(T, P)
    }


def _exposed_ids(app: RagApp) -> list[str]:
    """Every id a tool result shows: document ids, sourceRefs, paths, labels, RAG ids and
    names, from real ``rag_query``, ``rag_list`` and write results."""
    tools = app.tools(T, P)
    seen: list[str] = []

    def keep(value: Any) -> None:
        if isinstance(value, str) and value and value not in seen:
            seen.append(value)

    for rag in call_tool(tools, "rag_list")["rags"]:
        keep(rag["ragId"])
        keep(rag["name"])
    for query in (QUESTION, "zebra stripes", "cluster pods leases"):
        for hit in call_tool(tools, "rag_query", ragId=DEFAULT_RAG_NAME, query=query)["hits"]:
            for key in ("sourceRef", "path", "source"):
                keep(hit[key])
    for doc in app.documents.list_documents(T, P):
        added = call_tool(tools, "rag_add_document", ragId=DEFAULT_RAG_NAME, documentId=doc.id)
        keep(added.get("documentId"))
        keep(added.get("path"))
    return seen


def _variants(value: str) -> Iterator[str]:
    yield value
    yield f"manual:{value}"
    yield f"MANUAL:{value}"
    yield f" {value} "
    yield value.upper()
    yield f"{value}\t"


def _check(app: RagApp, own: Own, what: str) -> None:
    """The document's real text is found by rag_query and pre_turn, no planted text is cited
    under a document's path, and every document's own chunks are as the indexer wrote them."""
    doc_paths = {d.path for d in app.documents.list_documents(T, P)}
    hits = call_tool(app.tools(T, P), "rag_query", ragId=DEFAULT_RAG_NAME, query=QUESTION)
    assert "hits" in hits, (what, hits)
    assert any(REAL in h["text"] and h["path"] == "documents/holiday.md" for h in hits["hits"]), (
        what,
        hits,
    )
    for h in hits["hits"]:
        if "ninety" in h["text"]:
            assert h["path"] not in doc_paths and h["source"] not in doc_paths, (what, h)
            assert h["source"].startswith("manual:"), (what, h)
    blocks = app.pre_turn(T, P, [QUESTION])
    assert len(blocks) == 1, (what, blocks)
    lines = blocks[0].splitlines()
    assert any(REAL in line for line in lines), (what, blocks[0])
    for i, line in enumerate(lines):
        if "ninety" in line:
            label = lines[i - 1]
            assert not any(f"] {p}" in label for p in doc_paths), (what, label)
    assert _own_chunks(app) == own, what


def _reindexed(app: RagApp, own: Own, what: str) -> None:
    app.project_rags.reindex(T, P)
    ticks_until_idle(app)
    assert _own_chunks(app) == own, f"after reindex: {what}"
    rag = default_rag(app)
    docs = {d.id for d in app.documents.list_documents(T, P)}
    assert {c.source_ref for c in chunks(app, rag)} == docs, f"after reindex: {what}"


def _plants(ref: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "rag_add_text", {"text": PLANTED, "sourceRef": ref, "metadata": {"path": ref}}
    yield "rag_add_workspace_file", {"path": WORKSPACE_FILE, "sourceRef": ref}


def test_no_tool_write_touches_a_documents_own_chunks(seeded: RagApp) -> None:
    app = seeded
    own = _own_chunks(app)
    assert all(own.values()), own
    ids = _exposed_ids(app)
    docs = app.documents.list_documents(T, P)
    assert {d.id for d in docs} <= set(ids), ids  # the hits do expose the document ids
    assert {d.path for d in docs} <= set(ids), ids
    _check(app, own, "after rag_add_document of every document")
    _reindexed(app, own, "rag_add_document")
    rag_refs = [DEFAULT_RAG_NAME, default_rag(app).id]
    for value in ids:
        for ref in _variants(value):
            for tool, args in _plants(ref):
                for rag_ref in rag_refs:
                    what = f"{tool}(ragId={rag_ref!r}, sourceRef={ref!r})"
                    result = call_tool(app.tools(T, P), tool, ragId=rag_ref, **args)
                    assert "error" not in result, (what, result)
                    assert result["sourceRef"] not in {d.id for d in docs}, (what, result)
                    _check(app, own, what)
        _reindexed(app, own, f"plants with {value!r}")
    for doc in docs:  # rag_add_path with every path and a prefix of it
        for prefix in (doc.path, doc.path.rsplit("/", 1)[0] + "/"):
            what = f"rag_add_path({prefix!r})"
            result = call_tool(
                app.tools(T, P), "rag_add_path", ragId=DEFAULT_RAG_NAME, pathPrefix=prefix
            )
            assert "error" not in result, (what, result)
            _check(app, own, what)
    _reindexed(app, own, "rag_add_path")


def test_reindex_restores_a_document_whose_chunks_a_manual_write_replaced(
    seeded: RagApp,
) -> None:
    """Chunks planted under a document's id before the fix (same count as the indexer's
    record, no path): a plain reindex rewrites the document instead of keeping them."""
    app = seeded
    own = _own_chunks(app)
    holiday = next(d for d in app.documents.list_documents(T, P) if d.path.endswith("holiday.md"))
    rag = default_rag(app)
    grouped, _ = app.rags.embed_sources(rag, {holiday.id: [SourceText(PLANTED)]})
    app.rags.write_source(rag, holiday.id, grouped[holiday.id])  # what the old tools did
    assert _own_chunks(app) != own
    _reindexed(app, own, "legacy plant")
    _check(app, own, "legacy plant, reindexed")
