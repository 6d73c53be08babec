"""Read-outs of the project-RAG sync tests: what the store holds after the indexer ran."""

from __future__ import annotations

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Document, Hit, RagRecord
from vancetope_rag.store.port.types import RagScope

# -- read-outs ---------------------------------------------------------------------------------


def default_rag(app: RagApp, tenant: str = T, project: str = P) -> RagRecord:
    rag = app.store.control.find_rag(tenant, project, DEFAULT_RAG_NAME)
    assert rag is not None, f"no {DEFAULT_RAG_NAME} RAG in {tenant}/{project}"
    return rag


def chunks(app: RagApp, rag: RagRecord, source_ref: str | None = None) -> list[Hit]:
    """Every stored chunk of ``rag`` (of one document when ``source_ref`` is given)."""
    filters = {"sourceRef": source_ref} if source_ref is not None else None
    return app.store.chunks.get_chunks(RagScope.of(rag), filters=filters)


def chunk_count(app: RagApp, rag: RagRecord) -> int:
    return app.store.chunks.count_chunks(RagScope.of(rag))


def doc(app: RagApp, doc_id: str, tenant: str = T, project: str = P) -> Document:
    return app.documents.get(tenant, project, doc_id)


def states(app: RagApp, tenant: str = T, project: str = P) -> dict[str, int]:
    return {k: v for k, v in app.store.control.document_state_counts(tenant, project).items() if v}


def ticks_until_idle(app: RagApp, max_ticks: int = 500) -> int:
    """Tick (no sleeps) until a tick claims nothing; returns the number of claiming ticks."""
    n = 0
    while app.scheduler.tick().claimed:
        n += 1
        assert n < max_ticks, "indexer never went idle"
    return n
