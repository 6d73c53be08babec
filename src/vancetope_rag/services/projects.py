"""The project's default RAG (``_documents``) and the project lifecycle hooks (spec §6)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain.heartbeats import (
    IndexerStatus,
    WorkerHeartbeat,
    indexer_status,
    live_circuits,
)
from vancetope_rag.domain.rebuilds import Rebuild
from vancetope_rag.domain.records import (
    DEFAULT_RAG_NAME,
    Project,
    ProjectStatus,
    RagRecord,
    RagStatus,
)
from vancetope_rag.domain.suggest import did_you_mean
from vancetope_rag.embeddings import EmbeddingRegistry
from vancetope_rag.errors import (
    ProjectClosedError,
    ProjectNotFoundError,
    RagAlreadyExistsError,
    RagError,
)
from vancetope_rag.model_profiles import profile_from_json
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.rebuilds.service import RebuildService
from vancetope_rag.services.settings import SettingsService, SettingsSnapshot, embeddings_disabled
from vancetope_rag.store.port import ChunkStore, ControlStore, ProjectStore
from vancetope_rag.store.port.types import RagScope

log = get_logger(__name__)

#: The status lists this many of the documents that need attention (and counts them all).
ATTENTION_SHOWN = 50


@dataclass(frozen=True)
class ReindexResult:
    rebuild: bool
    documents_queued: int
    #: The rebuild started (None for a plain reindex, and for a rebuild of a project that
    #: had no index yet: that one is created directly).
    migration: Rebuild | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "rebuild": self.rebuild,
            "documentsQueued": self.documents_queued,
            "migration": self.migration.ref_json() if self.migration else None,
        }


def require_open_project(control: ProjectStore, tenant_id: str, project_id: str) -> Project:
    """The project, when work on its RAG may start: known and not closed.

    Raises:
        ProjectNotFoundError: The host never brought the project up.
        ProjectClosedError: The project is closed (its RAG was disposed).
    """
    project = control.get_project(tenant_id, project_id)
    if project is None:
        raise ProjectNotFoundError(
            f"project {project_id!r} is not known in tenant {tenant_id!r}; the host brings a "
            "project up (bring) before its RAG can be reindexed",
            tenant_id=tenant_id,
            project_id=project_id,
        )
    if project.status is ProjectStatus.CLOSED:
        raise ProjectClosedError(
            f"project {project_id!r} is closed; bring it up again before reindexing",
            tenant_id=tenant_id,
            project_id=project_id,
        )
    return project


@dataclass(eq=False, repr=False, kw_only=True)
class ProjectRagService:
    """Ensure/dispose the ``_documents`` RAG, reindex, status."""

    control: ControlStore
    chunks: ChunkStore
    embeddings: EmbeddingRegistry
    rags: RagService
    documents: DocumentService
    settings: SettingsService
    rebuilds: RebuildService

    def find_default_rag(self, tenant_id: str, project_id: str) -> RagRecord | None:
        return self.control.find_rag(tenant_id, project_id, DEFAULT_RAG_NAME)

    def ensure_default_rag(
        self,
        tenant_id: str,
        project_id: str,
        *,
        strict: bool = False,
        snapshot: SettingsSnapshot | None = None,
    ) -> RagRecord | None:
        """The project's ``_documents`` RAG, created with the current embedding settings.

        Provider ``none`` → None, silently. A misconfigured provider → warning and None
        (``strict=False``, the lifecycle path) or the error (``strict=True``).
        """
        existing = self.find_default_rag(tenant_id, project_id)
        if existing is not None:
            return existing
        snapshot = snapshot or self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            return None
        try:
            return self.rags.create(
                tenant_id, project_id, DEFAULT_RAG_NAME, system=True, snapshot=snapshot
            )
        except RagAlreadyExistsError:  # another worker created it a moment ago
            return self.find_default_rag(tenant_id, project_id)
        except RagError as exc:
            if strict:
                raise
            log.warning(
                "project %s/%s: default RAG not created: %s", tenant_id, project_id, exc.message
            )
            return None

    def dispose_default_rag(self, tenant_id: str, project_id: str) -> bool:
        """Every generation of ``_documents`` goes, a running rebuild with them."""
        self.rebuilds.cancel_all(tenant_id, project_id, "the project was closed")
        return bool(self.rebuilds.dispose_all(tenant_id, project_id, DEFAULT_RAG_NAME))

    def indexable_rag(
        self, tenant_id: str, project_id: str, snapshot: SettingsSnapshot | None = None
    ) -> RagRecord:
        """The ``_documents`` RAG, created if needed, with its pinned model loadable now.

        Raises:
            EmbeddingDisabledError: The kill switch is on (``ai.embedding.provider=none``).
            EmbeddingError: The provider is misconfigured (no key, unknown name, missing
                extra) or now makes vectors of another size than the RAG was pinned with.
        """
        snapshot = snapshot or self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            raise embeddings_disabled(
                tenant_id,
                project_id,
                "nothing can be indexed; enable them with: vancetope-rag settings set "
                "ai.embedding.provider embedded --scope tenant",
            )
        rag = self.ensure_default_rag(tenant_id, project_id, strict=True, snapshot=snapshot)
        assert rag is not None  # enabled + strict: created or raised
        self.rags.model_for(rag, snapshot)
        return rag

    def reindex(self, tenant_id: str, project_id: str, *, rebuild: bool = False) -> ReindexResult:
        """Queue every eligible document; ``rebuild`` instead starts a new generation pinned
        to the current embedding settings, filled beside the live one, which every reader
        keeps using until the new one replaces it (spec §6.2 without the downtime). Returns
        at once; the indexer does the work (``status`` shows its progress).

        Raises:
            ProjectNotFoundError: The project was never brought up.
            ProjectClosedError: The project is closed.
            EmbeddingDisabledError: ``rebuild`` while the kill switch is on.
            EmbeddingError: ``rebuild`` with a provider that cannot load; nothing is touched.
            RebuildRunningError: ``rebuild`` while another rebuild runs.
        """
        require_open_project(self.control, tenant_id, project_id)
        if not rebuild:
            rag = self.ensure_default_rag(tenant_id, project_id, strict=True)
            self.collect_garbage(tenant_id, project_id, rag)
            queued = self.documents.mark_all_for_reindex(tenant_id, project_id)
            return ReindexResult(rebuild=False, documents_queued=queued)
        snapshot = self.settings.snapshot(tenant_id, project_id)
        if not snapshot.embeddings_enabled():
            raise embeddings_disabled(
                tenant_id,
                project_id,
                "set a provider before rebuilding; the index is kept as it is",
                rag_name=DEFAULT_RAG_NAME,
            )
        self.embeddings.load(snapshot.embedding())  # refuse before anything is written
        live = self.find_default_rag(tenant_id, project_id)
        if live is None:  # nothing to keep serving: create the index directly
            self.ensure_default_rag(tenant_id, project_id, strict=True, snapshot=snapshot)
            queued = self.documents.mark_all_for_reindex(tenant_id, project_id)
            return ReindexResult(rebuild=True, documents_queued=queued)
        self.collect_garbage(tenant_id, project_id, live)  # what the old index holds is not copied
        started = self.rebuilds.start(live, snapshot)
        return ReindexResult(True, started.documents_queued, started.migration)

    def cancel_rebuild(self, tenant_id: str, project_id: str) -> Rebuild:
        """Cancel the running rebuild; its new generation goes, the live one stays.

        Raises:
            NoRebuildError: No rebuild is running.
            RebuildRunningError: It is switching over already.
        """
        return self.rebuilds.cancel(tenant_id, project_id)

    def collect_garbage(self, tenant_id: str, project_id: str, rag: RagRecord | None) -> int:
        """Remove chunks no document or RAG owns; returns how many.

        * in ``_documents``, chunks whose source ref is no current document of the project:
          manual writes (spec §9: "only as a quick test") and chunks of documents deleted
          behind the services' back; no indexer pass would ever overwrite them;
        * chunks of RAG ids with no catalog row any more, in any state (a RAG row deleted by
          direct database access, spec §10): unreachable, but still stored. A rebuild's new
          generation and a retired one have rows: their chunks are not garbage.

        Chunks are listed before their owners are looked up, so a document or RAG created
        meanwhile (its chunks come after its row) is never taken for garbage.
        """
        removed = 0
        chunk_rags = self.chunks.chunk_rags(tenant_id, project_id)
        for rag_id, dim in chunk_rags.items():
            if self.rebuilds.find_generation(tenant_id, project_id, rag_id) is None:
                removed += self.chunks.drop_rag(RagScope(tenant_id, project_id, rag_id, dim))
        if rag is not None:
            scope = RagScope.of(rag)
            refs = self.chunks.source_refs(scope)
            live = self.control.document_paths(tenant_id, project_id, refs)
            stale = [r for r in refs if r not in live]
            for start in range(0, len(stale), 500):
                batch = stale[start : start + 500]
                removed += self.chunks.remove_chunks(scope, filters={"sourceRef": batch})
        if removed:
            log.info("project %s/%s: removed %d orphaned chunks", tenant_id, project_id, removed)
        return removed

    def status(self, tenant_id: str, project_id: str) -> RagStatus:
        rag = self.find_default_rag(tenant_id, project_id)
        counts = self.control.document_state_counts(tenant_id, project_id)
        truncated = self.control.count_truncated(tenant_id, project_id)
        snapshot = self.settings.snapshot(tenant_id, project_id)
        beats = self.control.list_heartbeats()
        # this process's circuit, else one a live worker's heartbeat carries
        elsewhere = live_circuits(beats, self.control.now())
        circuit = self.rags.circuit_state(rag, snapshot, elsewhere) if rag is not None else None
        paused = circuit.describe() if circuit else None
        if not snapshot.embeddings_enabled():
            paused = (
                f"paused: embeddings are switched off for tenant {tenant_id!r} "
                "(ai.embedding.provider=none); set a provider to resume indexing"
            )
        # an open circuit pauses the work too: no ETA while the provider is down
        progress = self.rebuilds.progress(tenant_id, project_id, provider_paused=paused)
        attention_count, attention = self.control.needs_attention(
            tenant_id, project_id, limit=ATTENTION_SHOWN
        )
        embedding = snapshot.embedding()
        configured = self.embeddings.label(embedding)
        status = RagStatus(
            exists=False,
            documents=counts,
            truncated_documents=truncated,
            progress=progress,
            needs_attention=attention,
            needs_attention_count=attention_count,
            configured_model=configured,
            indexer=self.indexer_status(tenant_id, project_id, counts, beats),
            paused=paused,
        )
        if rag is None:
            return dataclasses.replace(status, no_rag_reason=self.embeddings.problem(embedding))
        return dataclasses.replace(
            status,
            exists=True,
            rag_id=rag.id,
            embedding_provider=rag.embedding_provider,
            embedding_model=rag.embedding_model,
            chunk_count=self.rags.chunk_count(rag),
            created_at=rag.created_at,
            provider_circuit=circuit.to_json() if circuit else None,
            calibration=rag.calibration,
            profile_note=self.rags.profile_note(rag),
            model_profile=pinned_profile_json(rag),
            chunk_counting=self.rags.chunk_counting(rag),
        )

    def indexer_status(
        self,
        tenant_id: str,
        project_id: str,
        counts: dict[str, int],
        beats: list[WorkerHeartbeat] | None = None,
    ) -> IndexerStatus:
        """The live workers that index this project (its node's), and with documents
        waiting and none of them, since when none ran (the workers' heartbeats, read here
        unless given)."""
        project = self.control.get_project(tenant_id, project_id)
        waiting = counts.get("pending", 0) + counts.get("processing", 0)
        return indexer_status(
            self.control.list_heartbeats() if beats is None else beats,
            home_node=project.home_node if project else None,
            waiting=waiting,
            now=self.control.now(),
        )


class ProjectLifecycle:
    """bring / suspend / close anchors of the project RAG (spec §6.1)."""

    def __init__(self, *, control: ControlStore, project_rags: ProjectRagService) -> None:
        self.control = control
        self.project_rags = project_rags

    def get_project(self, tenant_id: str, project_id: str) -> Project | None:
        """The project's record (status, home node), or None when it was never brought up."""
        return self.control.get_project(tenant_id, project_id)

    def require_project(self, tenant_id: str, project_id: str, *, named_by: str = "") -> Project:
        """The project's record; a project never brought up is an error that names the
        tenant's close projects first (a mistyped id), then all of them.

        Raises:
            ProjectNotFoundError: No such project in the tenant.
        """
        project = self.control.get_project(tenant_id, project_id)
        if project is not None:
            return project
        known = [p.project_id for p in self.control.list_projects(tenant_id=tenant_id)]
        where = f" ({named_by} names it)" if named_by else ""
        raise ProjectNotFoundError(
            f"no project {project_id!r} in tenant {tenant_id!r}{where}; "
            f"{did_you_mean(project_id, known)}"
            + (f"known projects: {', '.join(known)}" if known else "the tenant has no project yet"),
            tenant_id=tenant_id,
            project_id=project_id,
        )

    def bring_unless_running(self, tenant_id: str, project_id: str) -> str | None:
        """Bring the project up unless it is RUNNING; say why it was needed.

        The CLI's choice before ``import``/``index``/``reindex``: an operator working on a
        project from the command line wants it served. Returns what the project was (for a
        notice), or None when it was already running and nothing was done.
        """
        project = self.get_project(tenant_id, project_id)
        if project is not None and project.status is ProjectStatus.RUNNING:
            return None
        was = "not known yet" if project is None else project.status.value.lower()
        # No home node: a podless project is served by whichever process indexes it next.
        self.bring(tenant_id, project_id)
        return f"project {project_id!r} of tenant {tenant_id!r} was {was}"

    def bring(self, tenant_id: str, project_id: str, *, home_node: str | None = None) -> Project:
        """Mark the project RUNNING and ensure its default RAG (best effort, never raises)."""
        project = self.control.upsert_project(
            tenant_id, project_id, status=ProjectStatus.RUNNING, home_node=home_node
        )
        self.project_rags.ensure_default_rag(tenant_id, project_id)
        return project

    def suspend(self, tenant_id: str, project_id: str) -> Project:
        """SUSPENDED; the RAG stays (index storage is cheap, resume uses it at once)."""
        current = self.control.get_project(tenant_id, project_id)
        return self.control.upsert_project(
            tenant_id,
            project_id,
            status=ProjectStatus.SUSPENDED,
            home_node=current.home_node if current else None,
        )

    def close(self, tenant_id: str, project_id: str) -> Project:
        """CLOSED; the default RAG and its chunks are disposed (best effort)."""
        current = self.control.get_project(tenant_id, project_id)
        project = self.control.upsert_project(
            tenant_id,
            project_id,
            status=ProjectStatus.CLOSED,
            home_node=current.home_node if current else None,
        )
        try:
            self.project_rags.dispose_default_rag(tenant_id, project_id)
        except RagError as exc:
            log.warning("project %s/%s: default RAG not disposed: %s", tenant_id, project_id, exc)
        return project


def pinned_profile_json(rag: RagRecord) -> dict[str, Any]:
    """The model profile ``rag`` pinned, as status shows it: the dimension, the window (the
    most tokens of one input; null before model profiles) and the prefixes."""
    profile = profile_from_json(rag.embedding_profile) if rag.embedding_profile else None
    return {
        "dimension": rag.embedding_dimension,
        "window": profile.max_input_tokens if profile else None,
        "queryPrefix": profile.query_prefix if profile else "",
        "documentPrefix": profile.document_prefix if profile else "",
    }
