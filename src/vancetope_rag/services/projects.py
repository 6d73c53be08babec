"""The project's default RAG (``_documents``) and the project lifecycle hooks (spec §6)."""

from __future__ import annotations

from dataclasses import dataclass

from vancetope_rag.domain.records import (
    DEFAULT_RAG_NAME,
    Project,
    ProjectStatus,
    RagRecord,
    RagStatus,
)
from vancetope_rag.errors import RagAlreadyExistsError, RagError
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.rag import RagService
from vancetope_rag.store.port import ControlStore

log = get_logger(__name__)


@dataclass(frozen=True)
class ReindexResult:
    rebuild: bool
    documents_queued: int

    def to_json(self) -> dict[str, object]:
        return {"rebuild": self.rebuild, "documentsQueued": self.documents_queued}


class ProjectRagService:
    """Ensure/dispose the ``_documents`` RAG, reindex, status."""

    def __init__(self, control: ControlStore, rags: RagService, documents: DocumentService) -> None:
        self.control = control
        self.rags = rags
        self.documents = documents

    def find_default_rag(self, tenant_id: str, project_id: str) -> RagRecord | None:
        return self.control.find_rag(tenant_id, project_id, DEFAULT_RAG_NAME)

    def ensure_default_rag(
        self, tenant_id: str, project_id: str, *, strict: bool = False
    ) -> RagRecord | None:
        """The project's ``_documents`` RAG, created with the current embedding settings.

        Provider ``none`` → None, silently. A misconfigured provider → warning and None
        (``strict=False``, the lifecycle path) or the error (``strict=True``).
        """
        existing = self.find_default_rag(tenant_id, project_id)
        if existing is not None:
            return existing
        if not self.rags.is_embedding_enabled(tenant_id, project_id):
            return None
        try:
            return self.rags.create(tenant_id, project_id, DEFAULT_RAG_NAME, system=True)
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
        rag = self.find_default_rag(tenant_id, project_id)
        if rag is None:
            return False
        self.rags.delete(tenant_id, project_id, rag.id, system=True)
        return True

    def reindex(self, tenant_id: str, project_id: str, *, rebuild: bool = False) -> ReindexResult:
        """Queue every eligible document; ``rebuild`` first drops and re-creates the RAG with
        the current embedding settings (spec §6.2)."""
        if rebuild:
            settings = self.rags.embedding_settings(tenant_id, project_id)
            if settings.enabled:  # a rebuild that cannot happen must not drop the index first
                self.rags.registry.load(settings)
            self.dispose_default_rag(tenant_id, project_id)
        self.ensure_default_rag(tenant_id, project_id, strict=True)
        queued = self.documents.mark_all_for_reindex(tenant_id, project_id)
        return ReindexResult(rebuild=rebuild, documents_queued=queued)

    def status(self, tenant_id: str, project_id: str) -> RagStatus:
        rag = self.find_default_rag(tenant_id, project_id)
        counts = self.control.document_state_counts(tenant_id, project_id)
        if rag is None:
            return RagStatus(exists=False, documents=counts)
        return RagStatus(
            exists=True,
            rag_id=rag.id,
            embedding_provider=rag.embedding_provider,
            embedding_model=rag.embedding_model,
            chunk_count=self.rags.chunk_count(rag),
            created_at=rag.created_at,
            documents=counts,
        )


class ProjectLifecycle:
    """bring / suspend / close anchors of the project RAG (spec §6.1)."""

    def __init__(self, control: ControlStore, project_rags: ProjectRagService) -> None:
        self.control = control
        self.project_rags = project_rags

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
