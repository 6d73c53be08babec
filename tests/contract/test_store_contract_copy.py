"""Store contract: the reads and the write a store-to-store copy needs (``vancetope-rag copy``).

``restore_document`` (a document stored as it is), ``settings_scopes`` (every scope holding a
setting), ``scan_cached_embeddings`` (the embedding cache in pages) and ``export_chunks``
(chunks with their vectors). Runs on every store of ``conftest.STORE_FACTORIES``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from test_store_contract import DIM, TA, TB, P, chunk, new_doc, rag_record, unit

from vancetope_rag.domain.records import Document, IndexState
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.port import ChunkStore, ControlStore, Store
from vancetope_rag.store.port.types import RagScope

T0 = datetime(2027, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


@pytest.fixture
def chunks(store: Store) -> ChunkStore:
    return store.chunks


def stored_doc(doc_id: str = "d" * 32, path: str = "notes/a.md") -> Document:
    return Document(
        id=doc_id,
        tenant_id=TA,
        project_id=P,
        path=path,
        mime_type="text/markdown",
        content="cats purr",
        summary="about cats",
        rag_enabled=True,
        rag_dirty=False,
        rag_version=7,
        index_state=IndexState.INDEXED,
        index_attempts=0,
        indexed_at=T0,
        rag_indexed_hash="hash-of-what-was-indexed",
        truncated=True,
        content_hash="content-hash",
        created_at=T0,
        updated_at=T0,
        extraction='{"v": 1}',
        metadata={"team": "support", "year": 2024},
    )


# -- restore_document ------------------------------------------------------------------------


def test_restore_document_keeps_every_field(control: ControlStore) -> None:
    doc = stored_doc()
    restored = control.restore_document(doc)
    assert restored == doc
    assert control.get_document(TA, P, doc.id) == doc
    assert control.get_document_by_path(TA, P, doc.path) == doc
    assert control.document_state_counts(TA, P)["indexed"] == 1
    assert control.count_truncated(TA, P) == 1


def test_restore_document_keeps_a_failed_and_a_pending_state(control: ControlStore) -> None:
    failed = replace(
        stored_doc("f" * 32, "bad.pdf"),
        index_state=IndexState.FAILED,
        index_attempts=3,
        index_last_error="no text layer",
        rag_indexed_hash=None,
        indexed_at=None,
    )
    pending = replace(
        stored_doc("e" * 32, "todo.md"), index_state=IndexState.PENDING, rag_dirty=True
    )
    assert control.restore_document(failed) == failed
    assert control.restore_document(pending) == pending
    # a restored dirty document is queued like any other
    claimed = control.claim_for_rag_index(TA, P, "w1", 10, 60.0)
    assert [d.id for d in claimed] == [pending.id]
    assert claimed[0].rag_version == 7


def test_restore_document_refuses_a_taken_id_or_path(control: ControlStore) -> None:
    control.restore_document(stored_doc())
    with pytest.raises(InvalidInputError):
        control.restore_document(replace(stored_doc(), path="other.md"))  # same id
    with pytest.raises(InvalidInputError):
        control.restore_document(stored_doc(doc_id="c" * 32))  # same path
    inserted = control.insert_document(new_doc("new.md"))
    with pytest.raises(InvalidInputError):
        control.restore_document(stored_doc(doc_id=inserted.id, path="x.md"))
    assert len(control.list_documents(TA, P)) == 2


def test_restore_document_is_scoped(control: ControlStore) -> None:
    doc = control.restore_document(stored_doc())
    assert control.get_document(TB, P, doc.id) is None
    # the same path in another tenant is another document
    control.restore_document(replace(stored_doc("b" * 32), tenant_id=TB))
    assert len(control.list_documents(TB, P)) == 1


# -- settings_scopes --------------------------------------------------------------------------


def test_settings_scopes_lists_every_scope_with_a_setting(control: ControlStore) -> None:
    assert control.settings_scopes() == []
    control.set_setting(TB, None, "rag.topK", "5")
    control.set_setting(TA, P, "rag.topK", "3")
    control.set_setting(TA, P, "rag.minScore", "0.2")
    control.set_setting(TA, None, "ai.embedding.provider", '"hashing"')
    control.set_setting(TA, "proj-0", "rag.topK", "1")
    control.set_setting(TA, "gone", "rag.topK", "1")
    control.set_setting(TA, "gone", "rag.topK", None)  # removed: the scope holds nothing
    assert control.settings_scopes() == [(TA, None), (TA, "proj-0"), (TA, P), (TB, None)]


# -- scan_cached_embeddings -------------------------------------------------------------------


def test_scan_cached_embeddings_pages_through_the_cache(control: ControlStore) -> None:
    assert control.scan_cached_embeddings() == []
    control.put_cached_embeddings("m2", {"h1": unit(1), "h0": unit(0)})
    control.put_cached_embeddings("m1", {f"h{i}": unit(i % DIM) for i in range(5)})
    everything = control.scan_cached_embeddings(limit=100)
    keys = [(m, h) for m, h, _ in everything]
    assert keys == sorted(keys) and len(keys) == 7
    assert everything[0] == ("m1", "h0", unit(0))
    pages, after = [], None
    while page := control.scan_cached_embeddings(after=after, limit=3):
        pages.append(page)
        after = (page[-1][0], page[-1][1])
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [e for p in pages for e in p] == everything
    assert control.scan_cached_embeddings(after=("m2", "h1")) == []
    assert control.scan_cached_embeddings(limit=0) == []


# -- export_chunks ----------------------------------------------------------------------------


def _vectors(n: int, seed: int = 3) -> list[list[float]]:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return [[float(x) for x in row] for row in v]


def test_export_chunks_returns_chunks_with_their_vectors(
    control: ControlStore, chunks: ChunkStore
) -> None:
    rag = control.insert_rag(rag_record(TA, P, "docs", rag_id="rag-x"))
    scope = RagScope.of(rag)
    vecs = _vectors(5)
    b = [
        chunk(scope, "b2", vecs[0], source="src-b", metadata={"section": "Two"}),
        chunk(scope, "b1", vecs[1], source="src-b", kind="summary", path=None),
    ]
    a = [chunk(scope, "a9", vecs[2], source="src-a"), chunk(scope, "a1", vecs[3], source="src-a")]
    chunks.replace_source(scope, "src-b", b)
    chunks.replace_source(scope, "src-a", a)
    chunks.replace_source(scope, "src-c", [chunk(scope, "c1", vecs[4], source="src-c")])
    exported = chunks.export_chunks(scope, ["src-b", "src-a", "missing"])
    # by source, then in write order; float32 vectors come back exactly
    assert exported == [*a, *b]
    assert chunks.export_chunks(scope, []) == []
    other = RagScope(TB, P, rag.id, DIM)  # the same RAG id under another tenant holds nothing
    assert chunks.export_chunks(other, ["src-a"]) == []


def test_export_chunks_sees_the_newest_chunk_version_only(
    control: ControlStore, chunks: ChunkStore
) -> None:
    rag = control.insert_rag(rag_record(TA, P, "docs", rag_id="rag-y"))
    scope = RagScope.of(rag)
    vecs = _vectors(3, seed=5)
    chunks.replace_source(scope, "s", [chunk(scope, "old", vecs[0], source="s")])
    new = [chunk(scope, "new1", vecs[1], source="s"), chunk(scope, "new2", vecs[2], source="s")]
    chunks.replace_source(scope, "s", new)
    assert chunks.export_chunks(scope, ["s"]) == new
    assert [h.chunk_id for h in chunks.get_chunks(scope)] == ["new1", "new2"]
