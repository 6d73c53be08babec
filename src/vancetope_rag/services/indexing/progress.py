"""Progress of a project's indexing work and of its latest rebuild, read from the store.

Rates come from completion times the store keeps (documents' ``indexed_at``, queue items'
``completed_at``) on the store's clock, so every process — the CLI, the REST API, another
pod — reports the same numbers.
"""

from __future__ import annotations

from datetime import timedelta

from vancetope_rag.domain.rebuilds import (
    ACTIVE_S,
    RATE_WINDOW_S,
    ItemState,
    ProjectProgress,
    RebuildProgress,
    progress,
)
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, IndexState
from vancetope_rag.metrics import WorkState
from vancetope_rag.store.port import ChunkStore, ControlStore, RebuildStore


def node_work_state(
    control: ControlStore,
    rebuild_store: RebuildStore,
    node_id: str,
    chunks: ChunkStore | None = None,
) -> WorkState:
    """Document states and running rebuilds' items, summed over the projects the node
    indexes (the scheduler's projects): the queue depth and rebuild progress of /metrics;
    and, from a chunk store that sweeps replaced chunk versions (MongoDB Atlas), its
    backlog and probe lag (store-wide: the sweep serves every project)."""
    documents: dict[str, int] = {}
    items: dict[str, int] = {}
    running = 0
    for project in control.projects_for_node(node_id):
        t, p = project.tenant_id, project.project_id
        for state, n in control.document_state_counts(t, p).items():
            documents[state] = documents.get(state, 0) + n
        for m in rebuild_store.active_rebuilds(t, p):
            running += 1
            for state, n in rebuild_store.item_counts(m.id).items():
                items[state] = items.get(state, 0) + n
    backlog = getattr(chunks, "sweep_backlog", None)  # only stores with a sweep have one
    if callable(backlog):
        counts, lag = backlog()
        return WorkState(documents, running, items, counts, lag)
    return WorkState(documents, running, items)


def project_progress(
    control: ControlStore,
    rebuild_store: RebuildStore,
    tenant_id: str,
    project_id: str,
    *,
    paused: str | None = None,
) -> ProjectProgress:
    """The indexer's work on the live ``_documents`` and its latest rebuild (running, or how
    the last one ended), with rates over the last minute and ETAs: only while the work runs
    (a document processing, or one finished in the last :data:`ACTIVE_S`), none for a
    rebuild that ended, nor while ``paused`` says why the project's work does not run now."""
    now = control.now()
    since = now - timedelta(seconds=RATE_WINDOW_S)
    lately = now - timedelta(seconds=ACTIVE_S)
    counts = control.document_state_counts(tenant_id, project_id)
    recent, oldest = rebuild_store.indexing_activity(tenant_id, project_id, since)
    pending = counts[IndexState.PENDING.value] + counts[IndexState.PROCESSING.value]
    running = counts[IndexState.PROCESSING.value] > 0 or (
        recent > 0 and rebuild_store.indexing_activity(tenant_id, project_id, lately)[0] > 0
    )
    indexing = progress(
        counts[IndexState.INDEXED.value],
        counts[IndexState.FAILED.value],
        pending,
        recent,
        oldest,
        now,
        running=running,
        paused=paused,
    )
    m = rebuild_store.latest_rebuild(tenant_id, project_id, DEFAULT_RAG_NAME)
    if m is None:
        return ProjectProgress(indexing)
    c = rebuild_store.item_counts(m.id)
    recent, oldest = rebuild_store.item_activity(m.id, since)
    running = m.state.active and (
        c[ItemState.PROCESSING.value] > 0
        or (recent > 0 and rebuild_store.item_activity(m.id, lately)[0] > 0)
    )
    work = progress(
        c[ItemState.DONE.value],
        c[ItemState.FAILED.value],
        c[ItemState.PENDING.value] + c[ItemState.PROCESSING.value],
        recent,
        oldest,
        now,
        running=running,
        paused=paused if m.state.active else None,
        skipped=c[ItemState.SKIPPED.value],
    )
    return ProjectProgress(indexing, RebuildProgress(m, work))
