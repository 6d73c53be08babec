"""A copy from the embedded store into every store of ``conftest.STORE_FACTORIES`` (what
``vancetope-rag copy`` does), checked through the ports: a store that joins the contract
suite is a tested copy target at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_store_contract import DIM, TA, TB, P, chunk, new_doc, rag_record

from vancetope_rag.domain.records import IndexState, ProjectStatus
from vancetope_rag.services.store_copy import StoreCopier
from vancetope_rag.store import open_store
from vancetope_rag.store.port import Store
from vancetope_rag.store.port.documents import CleanMark, Release
from vancetope_rag.store.port.types import RagScope


def embedded_source(tmp_path: Path, clock: object) -> Store:
    """A SQLite store, filled through the ports: two tenants, a RAG with chunks of three
    sources, documents in three states, settings at both scopes, cached embeddings."""
    source = open_store(f"sqlite:///{tmp_path / 'source.db'}", clock=clock)  # type: ignore[arg-type]
    control = source.control
    for tenant in (TA, TB):
        control.upsert_project(tenant, P, status=ProjectStatus.RUNNING, home_node="node-1")
    control.set_setting(TA, None, "ai.embedding.provider", '"hashing"')
    control.set_setting(TA, P, "rag.topK", "4")
    rag = control.insert_rag(rag_record(TA, P, "_documents", rag_id="rag-a"))
    scope = RagScope.of(rag)
    vectors = np.random.default_rng(7).standard_normal((9, DIM)).astype(np.float32)
    for i, path in enumerate(("a.md", "b.md", "c.md")):
        doc = control.insert_document(new_doc(path, content=f"text {i}", dirty=True))
        (claimed,) = control.claim_for_rag_index(TA, P, "w", 1, 60.0)
        assert claimed.id == doc.id
        source.chunks.replace_source(
            scope,
            doc.id,
            [
                chunk(scope, f"{doc.id}-{j}", vectors[3 * i + j], source=doc.id, path=path)
                for j in range(3)
            ],
            chunk_version=claimed.rag_claim_token,
        )
        control.mark_rag_clean(
            CleanMark(
                TA, P, doc.id, "w", claimed.rag_version, state=IndexState.INDEXED, indexed_hash="h"
            )
        )
    control.insert_document(new_doc("todo.md", content="later", dirty=True))
    control.insert_document(new_doc("b.md", tenant=TB))
    control.put_cached_embeddings("hashing:hashing-8", {"x": vectors[0].tolist()})
    return source


def test_a_copy_from_the_embedded_store_gives_the_same_store(
    store: Store, settle, tmp_path: Path, fake_clock
) -> None:
    source = embedded_source(tmp_path, fake_clock)
    try:
        report = StoreCopier(source, store, batch_size=2).run()
        assert (report.written.projects, report.written.documents) == (2, 5)
        assert (report.written.rags, report.written.chunks, report.written.settings) == (1, 9, 2)
        assert report.written.cached_embeddings == 1
        settle()
        for tenant in (TA, TB):
            theirs = source.control.list_documents(tenant, P)
            ours = store.control.list_documents(tenant, P)
            assert [(d.id, d.path, d.content, d.index_state, d.rag_version) for d in ours] == [
                (d.id, d.path, d.content, d.index_state, d.rag_version) for d in theirs
            ]
            assert store.control.get_settings(tenant, P) == source.control.get_settings(tenant, P)
            assert store.control.get_settings(tenant, None) == source.control.get_settings(
                tenant, None
            )
        (rag,) = store.control.list_rags(TA, P)
        assert rag == source.control.list_rags(TA, P)[0]
        scope = RagScope.of(rag)
        assert store.chunks.get_chunks(scope) == source.chunks.get_chunks(scope)
        query = np.random.default_rng(8).standard_normal(DIM).tolist()
        theirs = [(h.chunk_id, round(h.score, 5)) for h in source.chunks.query(scope, query, 9)]
        ours = [(h.chunk_id, round(h.score, 5)) for h in store.chunks.query(scope, query, 9)]
        assert ours == theirs
        assert store.control.scan_cached_embeddings() == source.control.scan_cached_embeddings()
        # the target's indexer has the pending document to do, nothing else
        claimed = store.control.claim_for_rag_index(TA, P, "w2", 10, 60.0)
        assert [d.path for d in claimed] == ["todo.md"]
        store.control.release_rag_claim(
            Release(TA, P, claimed[0].id, "w2", error="x", retry_delay_s=0, max_attempts=5)
        )

        again = StoreCopier(source, store, batch_size=2).run()
        assert again.written.total() == 0 and again.present.chunks == 9
    finally:
        source.close()
