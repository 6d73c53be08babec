"""Every store keeps the import a document came from and the error of the last read of its file:
written on insert and update, listed without texts for an import's
sync, and counted as "needs attention" while the document is not FAILED; all scoped by tenant
and project."""

from __future__ import annotations

import dataclasses

import pytest

from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port import ControlStore, Store
from vancetope_rag.store.port.documents import CleanMark
from vancetope_rag.store.port.types import DocumentChange, NewDocument

T, P = "tenant-x", "proj-x"
ORIGIN = '["/srv/files","documents/"]'
TTL = 60.0


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


def doc(
    path: str = "documents/a.md", tenant: str = T, project: str = P, **kwargs: object
) -> NewDocument:
    return dataclasses.replace(
        NewDocument(tenant, project, path, "text/markdown", "text", rag_dirty=True), **kwargs
    )


def test_the_import_origin_is_written_and_listed_without_texts(control: ControlStore) -> None:
    a = control.insert_document(doc(import_origin=ORIGIN, extraction='{"v":1}'))
    assert a.import_origin == ORIGIN and a.extraction_error is None
    b = control.insert_document(doc("documents/sub/b.md"))
    assert b.import_origin is None
    control.insert_document(doc("archive/c.md", import_origin=ORIGIN))
    control.insert_document(doc("documents/d.md", tenant="other", import_origin=ORIGIN))
    control.insert_document(doc("documents/e.md", project="other", import_origin=ORIGIN))
    heads = control.import_heads(T, P, path_prefix="documents/")
    assert [(h.path, h.import_origin) for h in heads] == [
        ("documents/a.md", ORIGIN),
        ("documents/sub/b.md", None),
    ]
    assert heads[0].id == a.id and heads[0].content_hash == a.content_hash
    assert heads[0].extraction == '{"v":1}' and heads[1].extraction is None
    assert len(control.import_heads(T, P, path_prefix="")) == 3
    # prefixes are literal text, never a pattern
    control.insert_document(doc("documents.x/f.md"))
    assert [h.path for h in control.import_heads(T, P, path_prefix="documents.")] == [
        "documents.x/f.md"
    ]
    moved = control.update_document(
        T, P, b.id, DocumentChange(path="documents/b2.md", import_origin=ORIGIN)
    )
    assert moved.import_origin == ORIGIN and moved.path == "documents/b2.md"
    cleared = control.update_document(T, P, a.id, DocumentChange(import_origin=None))
    assert cleared.import_origin is None
    kept = control.update_document(T, P, moved.id, DocumentChange(content="new"))
    assert kept.import_origin == ORIGIN  # UNSET changes nothing


def test_needs_attention_counts_documents_kept_from_an_earlier_read(
    control: ControlStore,
) -> None:
    assert control.needs_attention(T, P, limit=10) == (0, [])
    kept = control.insert_document(doc("documents/z.pdf"))
    control.update_document(T, P, kept.id, DocumentChange(extraction_error="the PDF is encrypted"))
    broken = control.insert_document(
        doc("documents/y.pdf", content="", failed_reason="corrupt", extraction_error="corrupt")
    )
    assert broken.extraction_error == "corrupt" and broken.index_state is IndexState.FAILED
    other = control.insert_document(doc("documents/x.pdf", extraction_error="x" * 5000))
    assert other.extraction_error is not None and len(other.extraction_error) == 2000
    count, first = control.needs_attention(T, P, limit=1)
    assert count == 2  # the FAILED one is in the failed list, not here
    assert [(a.path, a.document_id) for a in first] == [("documents/x.pdf", other.id)]
    _, both = control.needs_attention(T, P, limit=10)
    assert [(a.path, a.error) for a in both][1] == ("documents/z.pdf", "the PDF is encrypted")
    # indexing the kept text keeps the error: it is the file's, not the index's
    control.mark_dirty(T, P, [kept.id])
    claimed = {d.id: d for d in control.claim_for_rag_index(T, P, "w1", 10, TTL)}
    assert control.mark_rag_clean(CleanMark.of(claimed[kept.id], "w1", IndexState.INDEXED))
    after = control.get_document(T, P, kept.id)
    assert after is not None and after.extraction_error == "the PDF is encrypted"
    assert control.needs_attention(T, P, limit=10)[0] == 2
    assert control.needs_attention("other", P, limit=10) == (0, [])
    assert control.needs_attention(T, "other", limit=10) == (0, [])
    control.update_document(T, P, kept.id, DocumentChange(extraction_error=None))
    assert control.needs_attention(T, P, limit=10)[0] == 1


def test_restore_keeps_both_fields(control: ControlStore) -> None:
    made = control.insert_document(doc(import_origin=ORIGIN, extraction_error="locked"))
    control.delete_document(T, P, made.id)
    restored = control.restore_document(made)
    assert (restored.import_origin, restored.extraction_error) == (ORIGIN, "locked")


def test_read_failures_are_listed_without_texts_in_their_scope(control: ControlStore) -> None:
    """What the background retry of machine-side read failures looks through: documents
    with an extraction error, FAILED or kept from before, of this tenant and project only."""
    kept = control.insert_document(doc(import_origin=ORIGIN, extraction='{"v":1}'))
    control.update_document(T, P, kept.id, DocumentChange(extraction_error="tesseract missing"))
    control.insert_document(
        doc("documents/b.png", extraction_error="vision down", failed_reason="vision down")
    )
    control.insert_document(doc("documents/c.md"))
    control.insert_document(doc("documents/d.md", tenant="other", extraction_error="x"))
    control.insert_document(doc("documents/e.md", project="other", extraction_error="x"))
    heads = control.read_failures(T, P)
    assert [(h.path, h.import_origin) for h in heads] == [
        ("documents/a.md", ORIGIN),
        ("documents/b.png", None),
    ]
    assert heads[0].id == kept.id and heads[0].extraction == '{"v":1}'
    control.update_document(T, P, kept.id, DocumentChange(extraction_error=None))
    assert [h.path for h in control.read_failures(T, P)] == ["documents/b.png"]
