"""Tools and pre_turn bound to tenant A never read or write tenant B, even with B's ids."""

from __future__ import annotations

from typing import Any

import pytest
from chat_fakes import RecordingLLM, index_docs

from fakes import P, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import RagRecord
from vancetope_rag.integrations.llamaindex.llm import RagContextLLM

A, B = "tenant-a", "tenant-b"
B_MARKER = "bravo-quokka-7f3a"
B_DOCS = {"documents/secret.md": f"Zebra stripes plan of tenant B: {B_MARKER} confidential."}
A_DOCS = {"documents/zebra.md": "Zebra stripes confuse biting flies on the savanna."}


@pytest.fixture
def two_tenants(app: RagApp) -> RagApp:
    """A and B on one store, the same project id, both AutoInject ON."""
    for tenant, docs in ((A, A_DOCS), (B, B_DOCS)):
        app.settings.set(tenant, None, "ai.embedding.provider", "hashing")
        app.settings.set(tenant, None, "rag.autoInject.enabled", "ON")
        app.settings.set(tenant, None, "rag.minScore", -1.0)
        index_docs(app, docs, tenant=tenant)
    # B also has a manual RAG, under a name A uses too
    b_notes = app.rags.create(B, P, "notes")
    app.rags.add_text(b_notes, "b-src", f"B's private notes {B_MARKER}")
    app.rags.create(A, P, "notes")
    return app


def _b(app: RagApp) -> tuple[RagRecord, RagRecord]:
    default = app.project_rags.find_default_rag(B, P)
    notes = app.rags.find(B, P, "notes")
    assert default is not None and notes is not None
    return default, notes


def _b_chunks(app: RagApp) -> tuple[int, int]:
    default, notes = _b(app)
    return app.rags.chunk_count(default), app.rags.chunk_count(notes)


def test_a_tools_cannot_touch_b_rags_by_id(two_tenants: RagApp) -> None:
    app = two_tenants
    tools = app.tools(A, P)
    b_default, b_notes = _b(app)
    before = _b_chunks(app)
    b_doc = app.documents.get_by_path(B, P, "documents/secret.md")
    assert b_doc is not None
    a_notes = app.rags.find(A, P, "notes")
    assert a_notes is not None

    calls: list[tuple[str, dict[str, Any], str]] = [
        ("rag_query", {"ragId": b_default.id, "query": "zebra"}, "RAG_NOT_FOUND"),
        ("rag_query", {"ragId": b_notes.id, "query": "notes"}, "RAG_NOT_FOUND"),
        ("rag_add_text", {"ragId": b_notes.id, "text": "injected by A"}, "RAG_NOT_FOUND"),
        ("rag_add_text", {"ragId": b_default.id, "text": "injected by A"}, "RAG_NOT_FOUND"),
        ("rag_delete", {"ragId": b_notes.id}, "RAG_NOT_FOUND"),
        ("rag_add_document", {"ragId": b_notes.id, "documentId": b_doc.id}, "RAG_NOT_FOUND"),
        # A's own RAG, B's document: the document is not found in A's project
        ("rag_add_document", {"ragId": a_notes.id, "documentId": b_doc.id}, "DOCUMENT_NOT_FOUND"),
        ("rag_add_path", {"ragId": b_notes.id, "pathPrefix": "documents/"}, "RAG_NOT_FOUND"),
        ("rag_add_workspace_file", {"ragId": b_notes.id, "path": "x.md"}, "RAG_NOT_FOUND"),
    ]
    for name, kwargs, code in calls:
        result = call_tool(tools, name, **kwargs)
        assert result.get("code") == code, (name, result)
        assert B_MARKER not in str(result)

    assert _b_chunks(app) == before
    assert app.rags.get(B, P, b_notes.id) == b_notes  # not deleted
    assert app.rags.chunk_count(a_notes) == 0  # B's document did not land in A's RAG


def test_a_tools_by_name_reach_only_a(two_tenants: RagApp) -> None:
    app = two_tenants
    tools = app.tools(A, P)
    before = _b_chunks(app)

    listed = call_tool(tools, "rag_list")
    a_ids = {r.id for r in app.rags.list_rags(A, P)}
    assert {r["ragId"] for r in listed["rags"]} == a_ids
    assert not a_ids & {r.id for r in _b(app)}

    hits = call_tool(tools, "rag_query", ragId="_documents", query="zebra stripes", topK=50)
    assert [h["path"] for h in hits["hits"]] == ["documents/zebra.md"]
    hits = call_tool(tools, "rag_query", ragId="notes", query="private notes", topK=50)
    assert hits["hits"] == []
    added = call_tool(tools, "rag_add_path", ragId="notes", pathPrefix="documents/")
    assert added["documentsAdded"] == 1  # A's one document, not B's
    assert call_tool(tools, "rag_delete", ragId="notes")["name"] == "notes"

    assert _b_chunks(app) == before
    assert app.rags.find(B, P, "notes") is not None


def test_pre_turn_of_a_never_shows_b(two_tenants: RagApp) -> None:
    app = two_tenants
    question = f"zebra stripes plan {B_MARKER} confidential"
    (a_block,) = app.pre_turn(A, P, [question])
    (b_block,) = app.pre_turn(B, P, [question])
    assert B_MARKER in b_block  # the same question does find it for B
    assert B_MARKER not in a_block and "documents/secret.md" not in a_block
    assert "documents/zebra.md" in a_block

    inner = RecordingLLM()
    RagContextLLM(inner, app, A, P).chat_with_tools([], user_msg=question)
    (sent,) = inner.calls
    assert [m.role.value for m in sent] == ["system", "user"]
    injected = sent[0].content or ""
    assert B_MARKER not in injected and "documents/zebra.md" in injected


def test_same_tenant_other_project_is_separate(two_tenants: RagApp) -> None:
    app = two_tenants
    index_docs(app, {"documents/other.md": "Other project about zebras."}, tenant=A, project="p2")
    tools_p2 = app.tools(A, "p2")
    a_default = app.project_rags.find_default_rag(A, P)
    assert a_default is not None
    result = call_tool(tools_p2, "rag_query", ragId=a_default.id, query="zebra")
    assert result["code"] == "RAG_NOT_FOUND"
    (block,) = app.pre_turn(A, "p2", ["zebra stripes"])
    assert "documents/other.md" in block and "documents/zebra.md" not in block
