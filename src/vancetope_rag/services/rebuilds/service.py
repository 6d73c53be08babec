"""Rebuilds without downtime: a new generation of ``_documents`` fills beside the live one and
replaces it in one atomic step (see :mod:`vancetope_rag.domain.rebuilds`).

:class:`RebuildService` starts and cancels rebuilds, advances them on the indexer's ticks
and reports progress. One tick of a running rebuild:

1. The kill switch (``ai.embedding.provider=none``) cancels it; ``rag.project.enabled=false``
   pauses it; a new dimension's search indexes still building make it wait.
2. A batch of its queue is claimed and indexed into the shadow (:mod:`.shadow_indexer`).
3. Once nothing is queued: over the failure threshold → ``failed``, the shadow disposed, the
   live generation untouched. Else the queue is reconciled with the documents (an edit whose
   re-queue a crash lost, a document created meanwhile) and, when nothing was missing and
   search sees the whole shadow (Atlas lags), the switch: the store makes the shadow live in
   one step; documents whose new chunks do not match their current version are queued for
   the (new) live indexer, so nothing an edit changed is lost at the switch.
4. Generations nobody uses any more are disposed: shadows of ended rebuilds at once, retired
   generations once ``retired_grace_s`` has passed (a reader that looked the RAG up just
   before the switch still finds its chunks).

Every step is idempotent and every state change conditional, so a worker killed at any point
leaves a state the next tick (any worker's) continues from, and the switch happens once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.eligibility import is_rag_eligible
from vancetope_rag.domain.rebuilds import (
    ItemState,
    ProjectProgress,
    Rebuild,
    RebuildState,
    failures_exceed,
    model_label,
)
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, IndexState, RagRecord, RagState
from vancetope_rag.errors import NoRebuildError, RebuildRunningError
from vancetope_rag.metrics import Metrics
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.calibration import Calibrator
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.indexing.batch import BatchResult
from vancetope_rag.services.indexing.progress import project_progress
from vancetope_rag.services.indexing.sources import unreadable_reason
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.rebuilds.shadow_indexer import ShadowIndexer
from vancetope_rag.services.settings import SettingsService, SettingsSnapshot
from vancetope_rag.store.port import ChunkStore, ControlStore, RebuildStore
from vancetope_rag.store.port.types import DocumentHead, RagScope

log = get_logger(__name__)

KILL_SWITCH_REASON = (
    "embeddings were switched off (ai.embedding.provider=none) during the rebuild; the live "
    "generation is unchanged"
)


@dataclass(frozen=True)
class RebuildStarted:
    migration: Rebuild
    documents_queued: int


def _wanted(head: DocumentHead) -> bool:
    """A document a generation must account for: eligible, or it may still have chunks."""
    return is_rag_eligible(head.path, head.mime_type, head.rag_enabled) or (
        head.indexed_at is not None
    )


@dataclass(eq=False, repr=False, kw_only=True)
class RebuildService:
    """Start, cancel, advance and report rebuilds of a project's ``_documents``."""

    control: ControlStore
    rebuild_store: RebuildStore
    chunks: ChunkStore
    rags: RagService
    documents: DocumentService
    settings: SettingsService
    shadows: ShadowIndexer
    config: EngineConfig
    metrics: Metrics
    calibrator: Calibrator | None = None

    # -- start and cancel ------------------------------------------------------------------

    def start(self, live: RagRecord, snapshot: SettingsSnapshot) -> RebuildStarted:
        """Start filling a new generation of ``live`` pinned to the configured model.

        Raises:
            RebuildRunningError: A rebuild of that RAG is running already.
            EmbeddingError: The configured provider cannot make its model.
        """
        t, p = live.tenant_id, live.project_id
        shadow = self._next_generation(live, snapshot)
        migration = self.rebuild_store.start_rebuild(
            Rebuild(
                id=uuid.uuid4().hex,
                tenant_id=t,
                project_id=p,
                rag_name=live.name,
                from_rag_id=live.id,
                to_rag_id=shadow.id,
                from_model=model_label(live.embedding_provider, live.embedding_model),
                to_model=model_label(shadow.embedding_provider, shadow.embedding_model),
                max_failure_ratio=float(snapshot.effective["rag.rebuild.maxFailureRatio"]),
            )
        )
        try:
            # the migration exists before its shadow: a shadow no active migration claims
            # is an abandoned one (see collect)
            self.chunks.prepare_dimension(shadow.embedding_dimension)
            self.rebuild_store.insert_generation(shadow)
            queued = self.rebuild_store.queue_items(
                migration, self.documents.reindex_candidates(t, p)
            )
        except BaseException:
            self._end(migration, RebuildState.FAILED, "the rebuild could not be started")
            raise
        log.info(
            "project %s/%s: rebuild %s started (%s -> %s, %d documents)",
            t,
            p,
            migration.id,
            migration.from_model,
            migration.to_model,
            queued,
        )
        return RebuildStarted(migration, queued)

    def _next_generation(self, live: RagRecord, snapshot: SettingsSnapshot) -> RagRecord:
        """The new generation of ``live`` (not stored yet): same name and texts, pinned to the
        configured model with that model's chunking."""
        return replace(
            live,
            id=uuid.uuid4().hex,
            **self.rags.pinned_model(snapshot),
            created_at=None,
            state=RagState.SHADOW,
            generation=live.generation + 1,
            replaces=live.id,
            retired_at=None,
            calibration=None,  # another model, other chunks: measured again before the switch
        )

    def active(self, tenant_id: str, project_id: str) -> Rebuild | None:
        """The running (or switching) rebuild of ``_documents``, if any."""
        for m in self.rebuild_store.active_rebuilds(tenant_id, project_id):
            if m.rag_name == DEFAULT_RAG_NAME:
                return m
        return None

    def cancel(
        self, tenant_id: str, project_id: str, *, reason: str = "cancelled by a user"
    ) -> Rebuild:
        """Cancel the running rebuild: its new generation is disposed, the live one stays.

        Raises:
            NoRebuildError: No rebuild is running.
            RebuildRunningError: It is switching over already (too late to cancel).
        """
        m = self.active(tenant_id, project_id)
        if m is None:
            raise NoRebuildError(
                f"no rebuild is running in project {project_id!r}; nothing to cancel",
                tenant_id=tenant_id,
                project_id=project_id,
                rag_name=DEFAULT_RAG_NAME,
            )
        if not self._end(m, RebuildState.CANCELLED, reason):
            current = self.rebuild_store.get_rebuild(tenant_id, project_id, m.id)
            if current is not None and current.state is RebuildState.SWITCHING:
                raise RebuildRunningError(
                    "the rebuild is switching over to its new generation; it can no longer "
                    "be cancelled (run another rebuild to go back)",
                    tenant_id=tenant_id,
                    project_id=project_id,
                    rag_name=DEFAULT_RAG_NAME,
                )
            raise NoRebuildError(
                f"the rebuild ended meanwhile ({current.state.value if current else 'gone'})",
                tenant_id=tenant_id,
                project_id=project_id,
                rag_name=DEFAULT_RAG_NAME,
            )
        ended = self.rebuild_store.get_rebuild(tenant_id, project_id, m.id)
        assert ended is not None
        return ended

    def cancel_all(self, tenant_id: str, project_id: str, reason: str) -> None:
        """End every active rebuild of the project (project close); never raises on a race."""
        for m in self.rebuild_store.active_rebuilds(tenant_id, project_id):
            self._end(m, RebuildState.CANCELLED, reason)

    def _end(self, m: Rebuild, state: RebuildState, reason: str) -> bool:
        """End a running rebuild and dispose its shadow (a switching one cannot be ended)."""
        ended = self.rebuild_store.end_rebuild(
            m, state=state, expected=[RebuildState.RUNNING], reason=reason
        )
        if ended:
            log.info(
                "project %s/%s: rebuild %s %s: %s",
                m.tenant_id,
                m.project_id,
                m.id,
                state.value,
                reason,
            )
            self.metrics.rebuilds.labels(outcome=state.value).inc()
            self._dispose(m.tenant_id, m.project_id, m.to_rag_id)
        return ended

    def _dispose(self, tenant_id: str, project_id: str, rag_id: str) -> None:
        rag = self.rebuild_store.get_any_rag(tenant_id, project_id, rag_id)
        if rag is None or rag.state is RagState.LIVE:
            return
        self.chunks.drop_rag(RagScope.of(rag))
        self.control.delete_rag(tenant_id, project_id, rag.id)

    # -- the tick --------------------------------------------------------------------------

    def work(self, tenant_id: str, project_id: str, worker_id: str) -> tuple[BatchResult, int]:
        """One tick of every active rebuild of the project, then cleanup. Returns what was
        indexed into new generations and how many documents were claimed for it."""
        result, claimed = BatchResult(), 0
        actives = self.rebuild_store.active_rebuilds(tenant_id, project_id)
        if actives:
            snapshot = self.settings.snapshot(tenant_id, project_id)
            for m in actives:
                claimed += self._advance(m, worker_id, snapshot, result)
        self.collect(tenant_id, project_id)
        return result, claimed

    def _advance(
        self, m: Rebuild, worker_id: str, snapshot: SettingsSnapshot, result: BatchResult
    ) -> int:
        if not snapshot.embeddings_enabled():
            self._end(m, RebuildState.CANCELLED, KILL_SWITCH_REASON)
            return 0
        if not snapshot.project_rag_enabled():
            return 0  # paused with the project RAG
        shadow = self.rebuild_store.get_any_rag(m.tenant_id, m.project_id, m.to_rag_id)
        if m.state is RebuildState.SWITCHING or (shadow and shadow.state is RagState.LIVE):
            self._switch(m)  # a switch a crash interrupted: finish it
            return 0
        if shadow is None:
            if not self._start_abandoned(m):
                return 0  # its start is still creating it (another process's, maybe)
            self._end(
                m,
                RebuildState.FAILED,
                "its new generation is missing (interrupted "
                "before it was created); start the rebuild again",
            )
            return 0
        if not self.rags.index_ready(shadow):
            return 0  # the new dimension's search indexes are building
        items = self.rebuild_store.claim_items(
            m, worker_id, self.config.indexer_batch_size, self.config.claim_ttl_s
        )
        result.add(self.shadows.index_items(m, shadow, items, worker_id, snapshot))
        self._finish_if_done(m, shadow)
        return len(items)

    def _start_abandoned(self, m: Rebuild) -> bool:
        """Was the start of this migration, which has no new generation yet, interrupted?

        :meth:`start` records the migration, then creates the new dimension's chunk table
        (DDL, which on PostgreSQL waits for the store's DDL lock) and only then the new
        generation: a tick of another worker in between must not take that start for a
        dead one. A start is given as long as a claim lasts (``claim_ttl_s``), as a worker
        killed in a batch is."""
        if m.created_at is None:
            return True
        return self.control.now() - m.created_at > timedelta(seconds=self.config.claim_ttl_s)

    def _finish_if_done(self, m: Rebuild, shadow: RagRecord) -> None:
        counts = self.rebuild_store.item_counts(m.id)
        failed, total = counts[ItemState.FAILED.value], sum(counts.values())
        if failures_exceed(failed, total, m.max_failure_ratio):
            # documents whose file could not be read fail with any model: not the new one's
            unreadable = self._unreadable_failures(m)
            failed, total = failed - unreadable, total - unreadable
        if failures_exceed(failed, total, m.max_failure_ratio):
            self._end(m, RebuildState.FAILED, self._failure_reason(m, failed, total))
            return
        if counts[ItemState.PENDING.value] or counts[ItemState.PROCESSING.value]:
            return
        if self._reconcile_queue(m, shadow):
            return  # documents were missing from the queue: index them first
        if not self.chunks.visible(RagScope.of(shadow)):
            return  # Atlas: readers switch only to what search already sees
        self._calibrate(shadow)
        self._switch(m)

    def _calibrate(self, shadow: RagRecord) -> None:
        """The new generation's ``minScore: auto``, measured before readers switch to it:
        the old generation's threshold belongs to another model. A failure does not hold
        the switch back; the indexer's next pass calibrates the new live RAG."""
        if self.calibrator is None:
            return
        try:
            self.calibrator.calibrate_if_due(shadow)
        except Exception as exc:
            log.warning(
                "project %s/%s: the new generation of %s is not calibrated yet: %s",
                shadow.tenant_id,
                shadow.project_id,
                shadow.name,
                error_text(exc),
            )

    def _unreadable_failures(self, m: Rebuild) -> int:
        """How many of the rebuild's failed items are documents whose file could not be
        read (counted as failed, as in the live index, but no failure of the new model)."""
        n = 0
        for item in self.rebuild_store.list_items(m.id):
            if item.state is ItemState.FAILED:
                doc = self.control.get_document(m.tenant_id, m.project_id, item.document_id)
                n += doc is not None and unreadable_reason(doc) is not None
        return n

    def _failure_reason(self, m: Rebuild, failed: int, total: int) -> str:
        errors = [i.last_error for i in self.rebuild_store.list_items(m.id) if i.last_error]
        last = f"; last error: {errors[-1]}" if errors else ""
        return (
            f"{failed} of {total} documents failed with {m.to_model} (more than "
            f"{m.max_failure_ratio:.0%}); the live generation ({m.from_model}) is unchanged"
            f"{last}"
        )

    def _reconcile_queue(self, m: Rebuild, shadow: RagRecord) -> bool:
        """Queue what the shadow lacks: documents never queued, and ones whose chunks were
        built from an older version (a re-queue a crash lost). True when anything was."""
        heads = {h.id: h for h in self.rebuild_store.document_heads(m.tenant_id, m.project_id)}
        items = {i.document_id: i for i in self.rebuild_store.list_items(m.id)}
        gone = [d for d in items if d not in heads]
        if gone:  # deleted documents: nothing of them may reach the new generation
            for doc_id in gone:
                self.rags.remove_by_source(shadow, doc_id)
            self.rebuild_store.remove_items(m.id, gone)
        missing = [h.id for h in heads.values() if _wanted(h) and h.id not in items]
        stale = [
            d
            for d, i in items.items()
            if d in heads and i.state.settled and i.doc_version != heads[d].rag_version
        ]
        if missing or stale:
            self.rebuild_store.queue_items(m, [*missing, *stale])
            return True
        return False

    def _switch(self, m: Rebuild) -> None:
        """The shadow becomes live (one store transaction on SQLite, the pointer flip on
        MongoDB); documents its chunks do not match go to the live indexer."""
        with self.control.transaction():
            if not self.rebuild_store.switch_live(m):
                return  # cancelled or failed meanwhile
            self._reconcile_after_switch(m)
        self.metrics.rebuilds.labels(outcome=RebuildState.COMPLETED.value).inc()
        log.info(
            "project %s/%s: rebuild %s switched to %s", m.tenant_id, m.project_id, m.id, m.to_model
        )

    def _reconcile_after_switch(self, m: Rebuild) -> None:
        t, p = m.tenant_id, m.project_id
        items = {i.document_id: i for i in self.rebuild_store.list_items(m.id)}
        adopt: dict[str, tuple[int, str | None]] = {}
        dirty: list[str] = []
        heads = self.rebuild_store.document_heads(t, p)
        for h in heads:
            item = items.get(h.id)
            current = item is not None and item.doc_version == h.rag_version
            if item is not None and current and item.state.settled:
                adopt[h.id] = (h.rag_version, item.indexed_hash)
                if h.index_state is IndexState.FAILED:  # failed with the old model only
                    dirty.append(h.id)
            elif _wanted(h):  # changed since, failed with the new model, or never queued
                dirty.append(h.id)
        live = self.rebuild_store.get_any_rag(t, p, m.to_rag_id)
        known = {h.id for h in heads}
        if live is not None:
            for doc_id in items:
                if doc_id not in known:
                    self.rags.remove_by_source(live, doc_id)
        self.rebuild_store.adopt_indexed_hashes(t, p, adopt)
        if dirty:
            self.control.mark_dirty(t, p, dirty)

    # -- cleanup ---------------------------------------------------------------------------

    def collect(self, tenant_id: str, project_id: str) -> int:
        """Dispose generations nobody uses: shadows of ended rebuilds, and retired ones past
        the grace time. Returns how many went."""
        # generations first: a shadow listed here had its migration recorded before it
        generations = self.rebuild_store.rag_generations(tenant_id, project_id)
        if all(r.state is RagState.LIVE for r in generations):
            return 0
        targets = {m.to_rag_id for m in self.rebuild_store.active_rebuilds(tenant_id, project_id)}
        cutoff = self.control.now() - timedelta(seconds=self.config.retired_grace_s)
        gone = 0
        for rag in generations:
            abandoned = rag.state is RagState.SHADOW and rag.id not in targets
            expired = rag.state is RagState.RETIRED and (
                rag.retired_at is None or rag.retired_at <= cutoff
            )
            if abandoned or expired:
                self.chunks.drop_rag(RagScope.of(rag))
                self.control.delete_rag(tenant_id, project_id, rag.id)
                gone += 1
        return gone

    def dispose_all(self, tenant_id: str, project_id: str, name: str) -> int:
        """Every generation of a RAG name goes (project close)."""
        generations = self.rebuild_store.rag_generations(tenant_id, project_id, name)
        for rag in generations:
            self.chunks.drop_rag(RagScope.of(rag))
            self.control.delete_rag(tenant_id, project_id, rag.id)
        return len(generations)

    def find_generation(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        """The RAG row with this id in any state (live, shadow or retired), or None."""
        return self.rebuild_store.get_any_rag(tenant_id, project_id, rag_id)

    # -- progress --------------------------------------------------------------------------

    def progress(
        self, tenant_id: str, project_id: str, *, provider_paused: str | None = None
    ) -> ProjectProgress:
        """The indexer's work on the live RAG and the latest rebuild (:func:`project_progress`),
        paused (no ETA) while the settings keep the project's work from running, or while
        ``provider_paused`` says the embedding provider's circuit is open."""
        return project_progress(
            self.control,
            self.rebuild_store,
            tenant_id,
            project_id,
            paused=self.paused(tenant_id, project_id) or provider_paused,
        )

    def paused(self, tenant_id: str, project_id: str) -> str | None:
        """Why the project's waiting documents are not indexed now, or None: what status shows
        instead of an ETA."""
        snapshot = self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            return "embeddings are off (ai.embedding.provider is none)"
        if not snapshot.project_rag_enabled():
            return "the project RAG is off (rag.project.enabled is false)"
        return None

    def pending(self, projects: Iterable[tuple[str, str]]) -> int:
        """Rebuild work left in these projects: queued items, plus one per active rebuild
        (its switch) — what ``run_until_idle`` waits for."""
        total = 0
        for t, p in projects:
            for m in self.rebuild_store.active_rebuilds(t, p):
                c = self.rebuild_store.item_counts(m.id)
                total += 1 + c[ItemState.PENDING.value] + c[ItemState.PROCESSING.value]
        return total
