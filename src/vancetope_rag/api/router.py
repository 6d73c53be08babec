"""The JSON endpoints: spec §7 (status, reindex, rebuild cancel), failed-document listing,
§8.1 override."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field

from vancetope_rag.api.auth import AuthError, Principal, TokenVerifier
from vancetope_rag.api.errors import redact
from vancetope_rag.api.models import (
    CancelResponse,
    DocumentListResponse,
    DocumentResponse,
    ReindexResponse,
    StatusResponse,
    error_responses,
)
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import Document, IndexState
from vancetope_rag.extraction.records import ExtractionRecord

MAX_PAGE = 1000


@dataclass(frozen=True)
class ProjectScope:
    """A tenant/project the caller was verified to hold WRITE on."""

    tenant: str
    project: str
    principal: Principal


class DocumentUpdateRequest(BaseModel):
    """Spec §8.1 wire format; only the RAG override is changeable here."""

    model_config = ConfigDict(extra="forbid")

    rag_enabled: Literal["auto", "on", "off"] = Field(
        alias="ragEnabled",
        description="auto: the path/MIME filter decides; on: always index; off: never index",
    )


def check_metrics_token(token: str, authorization: str | None) -> None:
    """Raise a 401 :class:`AuthError` unless ``authorization`` is ``Bearer <token>``;
    compared in constant time, so the answer's timing says nothing about the token."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )
    if not ok:
        raise AuthError(
            401,
            "UNAUTHENTICATED",
            "/metrics needs the header 'Authorization: Bearer <VANCETOPE_RAG_METRICS_TOKEN>'",
        )


def override_wire(value: bool | None) -> str:
    return "auto" if value is None else ("on" if value else "off")


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def truncated_reason(doc: Document) -> str | None:
    """Why a truncated document is indexed only in part: its file was read up to a budget
    (pages, slides, sheets, cells), or its text is longer than the engine's limit."""
    if not doc.truncated:
        return None
    record = ExtractionRecord.from_json(doc.extraction)
    if record is not None and record.truncated and record.applies_to(doc.content_hash):
        return record.truncated
    return "indexed up to the text limit"


def document_json(app: RagApp, doc: Document, secrets: list[str | None]) -> dict[str, Any]:
    """A document without its content: what the documents list and the PATCH answer show."""
    error = doc.index_last_error
    return {
        "id": doc.id,
        "path": doc.path,
        "mimeType": doc.mime_type,
        "ragEnabled": override_wire(doc.rag_enabled),
        "eligible": app.documents.is_rag_eligible(doc),
        "ragDirty": doc.rag_dirty,
        "state": doc.index_state.value,
        "attempts": doc.index_attempts,
        "truncated": doc.truncated,
        "truncatedReason": truncated_reason(doc),
        "lastError": redact(error, secrets) if error else None,
        "indexedAt": _iso(doc.indexed_at),
        "updatedAt": _iso(doc.updated_at),
    }


#: The bearer scheme of every project route, as ``/openapi.json`` declares it. The gate reads
#: the header itself (its messages say what is wrong: missing, malformed, expired, …).
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    bearerFormat="JWT",
    description="HS256 JWT with claims sub, tenant, projects (list or '*'), perm (WRITE), exp",
)

METRICS_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="metricsToken",
    description="the VANCETOPE_RAG_METRICS_TOKEN value (only when one is configured)",
)

Tenant = Annotated[str, Path(description="tenant id (must be the token's tenant)")]
Project = Annotated[str, Path(description="project id (one of the token's projects)")]


class WriteGate:
    """Dependency: a valid bearer token with WRITE on the path's tenant and project."""

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    def __call__(
        self,
        request: Request,
        tenant: Tenant,
        project: Project,
        _declared: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    ) -> ProjectScope:
        principal = self.verifier.principal(request.headers.get("authorization"))
        principal.may_write(tenant, project)  # spec §7: WRITE for status read and reindex
        RagApp.check_ids(tenant, project)  # a token may name ids no project can have
        return ProjectScope(tenant, project, principal)


class KnownQuery:
    """Dependency: refuse query parameters the route does not declare (422), so a misspelt
    one (``?rebiuld=true``) is an error instead of a plain reindex."""

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def __call__(self, request: Request) -> None:
        unknown = sorted(set(request.query_params) - self.names)
        if unknown:
            accepted = ", ".join(sorted(self.names)) or "none"
            raise RequestValidationError(
                [
                    {
                        "loc": ("query", name),
                        "msg": f"unknown parameter; this endpoint accepts: {accepted}",
                        "type": "unknown_parameter",
                    }
                    for name in unknown
                ]
            )


#: Every project route can answer these (auth, ids, validation, the store).
COMMON = (400, 401, 403, 422, 503)


SecretsOf = Callable[[str, str], list[str | None]]


def build_router(app: RagApp, verifier: TokenVerifier, secrets_of: SecretsOf) -> APIRouter:
    """Routes bound to ``app``; every project route checks the bearer token first.

    ``secrets_of(tenant, project)`` lists what must never leave the API (see ``redact``).
    """
    router = APIRouter()
    # A default value rather than a local Annotated alias: FastAPI resolves the (postponed)
    # annotations of these closures against the module's globals.
    gate: Any = Depends(WriteGate(verifier))

    prefix = "/brain/{tenant}/projects/{project}"

    @router.get(
        f"{prefix}/rag/status",
        tags=["rag"],
        response_model=StatusResponse,
        responses=error_responses(*COMMON),
        dependencies=[Depends(KnownQuery())],
    )
    def rag_status(scope: ProjectScope = gate) -> StatusResponse:
        """Spec §7 snapshot of the ``_documents`` RAG, per-state document counts, the
        progress of the indexer and of a rebuild (``progress.busy``: poll while true), and
        the documents that need attention (indexed from an earlier readable version of their
        file)."""
        status = app.project_rags.status(scope.tenant, scope.project)
        data = status.to_json()
        known = secrets_of(scope.tenant, scope.project)
        data["needsAttention"] = [
            {"path": a.path, "error": redact(a.error, known)} for a in status.needs_attention
        ]
        return StatusResponse.model_validate(data)

    @router.post(
        f"{prefix}/rag/reindex",
        tags=["rag"],
        response_model=ReindexResponse,
        responses=error_responses(*COMMON, 404, 409, 502),
        dependencies=[Depends(KnownQuery("rebuild"))],
    )
    def rag_reindex(
        rebuild: Annotated[
            bool,
            Query(
                description="true: build a new generation with the current embedding model "
                "beside the live one, which keeps answering until the new one replaces it"
            ),
        ] = False,
        scope: ProjectScope = gate,
    ) -> ReindexResponse:
        """Queue every eligible document; ``rebuild=true`` starts a rebuild (answers at once
        with the migration it started; ``status`` shows its progress).

        404 for a project never brought up; 409 for a closed one, a rebuild the current
        embedding settings cannot carry out (nothing is touched) and a second rebuild while
        one runs.
        """
        result = app.project_rags.reindex(scope.tenant, scope.project, rebuild=rebuild)
        return ReindexResponse.model_validate(result.to_json())

    @router.delete(
        f"{prefix}/rag/rebuild",
        tags=["rag"],
        response_model=CancelResponse,
        responses=error_responses(*COMMON, 404, 409),
        dependencies=[Depends(KnownQuery())],
    )
    def rag_cancel_rebuild(scope: ProjectScope = gate) -> CancelResponse:
        """Cancel the running rebuild: its new generation is disposed, the live one stays as
        it was. 404 when none runs; 409 once it is switching over (too late to cancel)."""
        app.project_rags.cancel_rebuild(scope.tenant, scope.project)
        progress = app.rebuilds.progress(scope.tenant, scope.project)
        assert progress.migration is not None
        return CancelResponse.model_validate(
            {"cancelled": True, "migration": progress.migration.to_json()}
        )

    @router.get(
        f"{prefix}/rag/documents",
        tags=["rag"],
        response_model=DocumentListResponse,
        responses=error_responses(*COMMON),
        dependencies=[Depends(KnownQuery("state", "limit", "offset"))],
    )
    def rag_documents(
        state: Annotated[
            IndexState | None, Query(description="only documents in this index state")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")] = 500,
        offset: Annotated[int, Query(ge=0, description="documents to skip")] = 0,
        scope: ProjectScope = gate,
    ) -> DocumentListResponse:
        """The project's documents with their index state; ``state=failed`` says why."""
        docs = app.documents.list_documents(scope.tenant, scope.project)
        if state is not None:
            docs = [d for d in docs if d.index_state is state]
        known = secrets_of(scope.tenant, scope.project)
        page = [document_json(app, d, known) for d in docs[offset : offset + limit]]
        return DocumentListResponse.model_validate({"total": len(docs), "documents": page})

    @router.patch(
        f"{prefix}/documents/{{documentId}}",
        tags=["documents"],
        response_model=DocumentResponse,
        responses=error_responses(*COMMON, 404, 413),
        dependencies=[Depends(KnownQuery())],
    )
    def update_document(
        document_id: Annotated[str, Path(alias="documentId", description="the document's id")],
        body: DocumentUpdateRequest,
        scope: ProjectScope = gate,
    ) -> DocumentResponse:
        """Spec §8.1 tristate; marks the document dirty so the indexer adjusts its chunks."""
        doc = app.documents.set_rag_enabled_override(
            scope.tenant, scope.project, document_id, body.rag_enabled
        )
        known = secrets_of(scope.tenant, scope.project)
        return DocumentResponse.model_validate(document_json(app, doc, known))

    token = app.config.metrics_token.get_secret_value() if app.config.metrics_token else None
    exposition: dict[int | str, dict[str, Any]] = {
        200: {
            "description": "Prometheus text exposition format",
            "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
        }
    }
    # Declared only when configured: without a token the endpoint is open.
    guard = [Security(METRICS_BEARER)] if token else []

    @router.get(
        "/metrics",
        tags=["ops"],
        response_class=Response,
        responses={**exposition, **(error_responses(401) if token else {})},
        dependencies=guard,
    )
    def metrics(request: Request) -> Response:
        """Prometheus exposition: queue depth, indexing, embeddings, retrieval, HTTP and
        rebuilds (docs/operations.md lists every family; no tenant or project labels).
        With ``VANCETOPE_RAG_METRICS_TOKEN`` set, only for ``Authorization: Bearer <it>``."""
        if token:
            check_metrics_token(token, request.headers.get("authorization"))
        return Response(app.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
