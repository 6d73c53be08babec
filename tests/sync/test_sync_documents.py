"""Acceptance 1: eligibility and the dirty flag through DocumentService (spec §4.1-§4.3)."""

from __future__ import annotations

import pytest
from synchelpers import chunk_count, chunks, default_rag, doc, ticks_until_idle

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.errors import DocumentNotFoundError, InvalidInputError
from vancetope_rag.store.port.types import DocumentChange


@pytest.fixture
def running(app: RagApp) -> RagApp:
    app.bring(T, P)
    return app


def _indexed(app: RagApp, path: str, content: str, **kw: object) -> str:
    """Create a document and run the indexer until it is clean; returns its id."""
    d = app.documents.create(T, P, path, content, **kw)  # type: ignore[arg-type]
    ticks_until_idle(app)
    assert not doc(app, d.id).rag_dirty
    return d.id


# -- eligibility (override × prefix × MIME) on create ----------------------------------------


@pytest.mark.parametrize(
    ("path", "mime", "override", "dirty"),
    [
        ("documents/notes/topic.md", None, None, True),  # prefix + textual (guessed)
        ("documents/src/main.py", None, None, True),  # code MIME type
        ("documents/data.json", "application/json", None, True),  # whitelisted application/*
        ("documents/photo.png", "image/png", None, False),  # binary MIME
        ("documents/blob.bin", "application/octet-stream", None, False),
        ("notes/topic.md", None, None, False),  # outside documents/
        ("_vance/trash/old.md", None, None, False),
        ("_chatbox/log.txt", "text/plain", None, False),
        ("documents/notes/topic.md", None, False, False),  # "never index" beats the filter
        ("notes/topic.md", None, True, True),  # "always index" beats the prefix ...
        ("documents/photo.png", "image/png", True, True),  # ... and the MIME type
        ("_vance/x.bin", "application/octet-stream", True, True),  # ... and both
    ],
)
def test_create_sets_dirty_only_when_eligible(
    running: RagApp, path: str, mime: str | None, override: bool | None, dirty: bool
) -> None:
    d = running.documents.create(T, P, path, "some text", mime_type=mime, rag_enabled=override)
    assert d.rag_dirty is dirty
    assert d.index_state is (IndexState.PENDING if dirty else IndexState.NONE)
    assert running.documents.is_rag_eligible(d) is dirty
    # the indexer agrees: only eligible documents get chunks
    ticks_until_idle(running)
    assert len(chunks(running, default_rag(running), d.id)) == (1 if dirty else 0)


# -- update triggers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"content": "new body text"},
        {"path": "documents/moved/topic.md"},
        {"path": "archive/topic.md"},  # moved out: dirty so the indexer removes the chunks
        {"rag_enabled": False},
        {"rag_enabled": True},
        {"summary": "a fresh summary"},
        {"mime_type": "image/png"},
    ],
    ids=["content", "path", "path-out", "override-off", "override-on", "summary", "mime"],
)
def test_update_of_relevant_field_sets_dirty(running: RagApp, change: dict[str, object]) -> None:
    doc_id = _indexed(running, "documents/topic.md", "old body text")
    version = doc(running, doc_id).rag_version
    after = running.documents.update(T, P, doc_id, **change)  # type: ignore[arg-type]
    assert after.rag_dirty
    assert after.index_state is IndexState.PENDING
    assert after.rag_version > version


def test_unchanged_update_does_not_set_dirty(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "body", summary="sum")
    after = running.documents.update(
        T, P, doc_id, content="body", path="documents/topic.md", summary="sum", rag_enabled=None
    )
    assert not after.rag_dirty
    assert after.index_state is IndexState.INDEXED
    assert running.scheduler.tick().claimed == 0


def test_update_of_never_eligible_document_does_not_set_dirty(running: RagApp) -> None:
    d = running.documents.create(T, P, "notes/private.md", "v1")
    after = running.documents.update(T, P, d.id, content="v2", path="notes/other.md")
    assert not after.rag_dirty
    assert after.index_state is IndexState.NONE


def test_moving_into_documents_sets_dirty(running: RagApp) -> None:
    d = running.documents.create(T, P, "notes/private.md", "now public")
    assert not d.rag_dirty
    after = running.documents.update(T, P, d.id, path="documents/public.md")
    assert after.rag_dirty
    ticks_until_idle(running)
    assert [c.text for c in chunks(running, default_rag(running), d.id)] == ["now public"]


# -- the tristate override and mark_rag_dirty --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stored"), [("auto", None), ("on", True), ("off", False), (" OFF ", False)]
)
def test_set_rag_enabled_override_sets_value_and_dirty(
    running: RagApp, value: str, stored: bool | None
) -> None:
    doc_id = _indexed(running, "documents/topic.md", "body")
    after = running.documents.set_rag_enabled_override(T, P, doc_id, value)
    assert after.rag_enabled is stored
    assert after.rag_dirty
    assert after.index_state is IndexState.PENDING


@pytest.mark.parametrize("bad", ["yes", "", "true", None, 1, True])
def test_set_rag_enabled_override_rejects_bad_value(running: RagApp, bad: object) -> None:
    doc_id = _indexed(running, "documents/topic.md", "body")
    with pytest.raises(InvalidInputError, match="auto"):
        running.documents.set_rag_enabled_override(T, P, doc_id, bad)  # type: ignore[arg-type]
    after = doc(running, doc_id)
    assert after.rag_enabled is None
    assert not after.rag_dirty


def test_mark_rag_dirty(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "body")
    after = running.documents.mark_rag_dirty(T, P, doc_id)
    assert after.rag_dirty
    assert after.index_state is IndexState.PENDING
    with pytest.raises(DocumentNotFoundError):
        running.documents.mark_rag_dirty(T, P, "no-such-document")


# -- delete ------------------------------------------------------------------------------------


def test_delete_removes_chunks_at_once(running: RagApp) -> None:
    keep = _indexed(running, "documents/keep.md", "zebra keeper notes")
    gone = _indexed(running, "documents/gone.md", "walrus farewell notes", summary="walrus sum")
    rag = default_rag(running)
    assert chunk_count(running, rag) == 3
    hits = running.rags.query(rag, "walrus farewell", top_k=10)
    assert gone in {h.source_ref for h in hits}

    assert running.documents.delete(T, P, gone)  # no tick in between

    assert chunk_count(running, rag) == 1
    assert chunks(running, rag, gone) == []
    hits = running.rags.query(rag, "walrus farewell", top_k=10)
    assert {h.source_ref for h in hits} == {keep}
    assert running.documents.get_by_path(T, P, "documents/gone.md") is None


def test_document_deleted_hook_removes_chunks(running: RagApp) -> None:
    running.document_saved(T, P, "documents/a.md", "alpha text")
    ticks_until_idle(running)
    rag = default_rag(running)
    assert chunk_count(running, rag) == 1
    running.document_deleted(T, P, "documents/a.md")
    assert chunk_count(running, rag) == 0


# -- summary chunks ----------------------------------------------------------------------------


def _kinds(app: RagApp, doc_id: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in chunks(app, default_rag(app), doc_id):
        out.setdefault(c.kind, []).append(c.text)
    return out


def test_set_summary_writes_summary_chunk_on_next_tick(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "the body")
    assert _kinds(running, doc_id) == {"content": ["the body"]}
    running.documents.set_summary(T, P, doc_id, "the summary")
    assert _kinds(running, doc_id) == {"content": ["the body"]}  # not before the tick
    assert running.scheduler.tick().indexed == 1
    assert _kinds(running, doc_id) == {"content": ["the body"], "summary": ["the summary"]}
    summary = [c for c in chunks(running, default_rag(running), doc_id) if c.kind == "summary"]
    assert summary[0].path == "documents/topic.md"


def test_summary_driver_path_mark_rag_dirty_writes_summary_chunk(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "the body")
    # the summary driver stores its summary, then calls markRagDirty (spec §4.2)
    running.store.control.update_document(T, P, doc_id, DocumentChange(summary="driver summary"))
    assert running.scheduler.tick().claimed == 0  # storing alone queues nothing
    running.documents.mark_rag_dirty(T, P, doc_id)
    running.scheduler.tick()
    assert _kinds(running, doc_id) == {"content": ["the body"], "summary": ["driver summary"]}
    hits = running.rags.query(default_rag(running), "driver summary", top_k=1)
    assert (hits[0].kind, hits[0].source_ref) == ("summary", doc_id)


@pytest.mark.parametrize("scope", ["tenant", "project"])
def test_no_summary_chunks_when_include_summaries_false(running: RagApp, scope: str) -> None:
    running.settings.set(T, None if scope == "tenant" else P, "rag.project.includeSummaries", False)
    d = running.documents.create(T, P, "documents/topic.md", "the body", summary="a summary")
    running.documents.set_summary(T, P, d.id, "another summary")
    ticks_until_idle(running)
    assert _kinds(running, d.id) == {"content": ["the body"]}
    assert doc(running, d.id).index_state is IndexState.INDEXED


def test_summary_removed_when_cleared(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "the body", summary="old summary")
    assert "summary" in _kinds(running, doc_id)
    running.documents.set_summary(T, P, doc_id, None)
    ticks_until_idle(running)
    assert _kinds(running, doc_id) == {"content": ["the body"]}


# -- documents that become ineligible lose their chunks on the next tick -----------------------


def test_override_off_removes_chunks_on_next_tick(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "the body", summary="s")
    rag = default_rag(running)
    assert len(chunks(running, rag, doc_id)) == 2
    running.documents.set_rag_enabled_override(T, P, doc_id, "off")
    tick = running.scheduler.tick()
    assert tick.removed == 1
    assert chunks(running, rag, doc_id) == []
    after = doc(running, doc_id)
    assert (after.rag_dirty, after.index_state) == (False, IndexState.NONE)
    # and back on: indexed again
    running.documents.set_rag_enabled_override(T, P, doc_id, "auto")
    running.scheduler.tick()
    assert len(chunks(running, rag, doc_id)) == 2


def test_moved_out_of_documents_removes_chunks_on_next_tick(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "the body")
    rag = default_rag(running)
    running.documents.update(T, P, doc_id, path="_vance/trash/topic.md")
    assert len(chunks(running, rag, doc_id)) == 1  # until the tick
    assert running.scheduler.tick().removed == 1
    assert chunks(running, rag, doc_id) == []
    assert doc(running, doc_id).index_state is IndexState.NONE


def test_override_on_indexes_outside_documents(running: RagApp) -> None:
    d = running.documents.create(T, P, "_vance/notes.md", "forced in")
    assert not d.rag_dirty
    running.documents.set_rag_enabled_override(T, P, d.id, "on")
    running.scheduler.tick()
    [c] = chunks(running, default_rag(running), d.id)
    assert (c.text, c.kind, c.path) == ("forced in", "content", "_vance/notes.md")


def test_content_update_replaces_chunks(running: RagApp) -> None:
    doc_id = _indexed(running, "documents/topic.md", "first version")
    running.documents.update(T, P, doc_id, content="second version")
    running.scheduler.tick()
    assert [c.text for c in chunks(running, default_rag(running), doc_id)] == ["second version"]
