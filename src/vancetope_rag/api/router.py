"""The JSON endpoints: spec §7 (status, reindex, rebuild cancel), the documents list, §8.1
override, and the test query (what a turn would get for a question)."""

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
from starlette.exceptions import HTTPException

from vancetope_rag.api.auth import AuthError, Principal, TokenVerifier
from vancetope_rag.api.errors import redact
from vancetope_rag.api.limits import WriteRate, retry_after
from vancetope_rag.api.models import (
    CancelResponse,
    DocumentListResponse,
    DocumentResponse,
    QueryResponse,
    ReindexResponse,
    StatusResponse,
    error_responses,
)
from vancetope_rag.app import RagApp
from vancetope_rag.domain.block.citations import cite
from vancetope_rag.domain.records import Document, IndexState
from vancetope_rag.domain.retrieval.calibration import resolve_min_score
from vancetope_rag.domain.retrieval.hit_order import fused_json, order_of
from vancetope_rag.domain.retrieval.ranking import MAX_TOP_K
from vancetope_rag.domain.retrieval.relevance import CutResult
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


#: A fixed relevance cut: a cosine gap (a JSON number, never a boolean).
_Gap = Annotated[float, Field(ge=0, le=2, strict=True)]


#: A character that is neither whitespace (as Python's ``str.strip`` sees it, which the query
#: check applies) nor NUL (dropped): the schema says what the server accepts, so a query of
#: only spaces, NULs or U+0085 is refused by validation (422), not later with a 400.
NON_BLANK = (
    r"[^\x00\t\n\r\x0b\x0c\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)


class QueryRequest(BaseModel):
    """A question to try: what would a chat turn get from ``_documents`` for it?"""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=10_000,
        pattern=NON_BLANK,
        description="the question, as a user would ask it (not only whitespace)",
    )
    top_k: int | None = Field(
        default=None,
        alias="topK",
        ge=1,
        le=MAX_TOP_K,
        description="hits to return; omitted: the project's rag.topK, as a turn uses",
    )
    relevance_cut: _Gap | Literal["auto", "off"] | None = Field(
        default=None,
        alias="relevanceCut",
        description="auto: keep only the hits likely relevant against the best one (the RAG's "
        "calibrated gap); a number: that gap (cosine); off or omitted: topK hits",
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
    """Dependency: a valid bearer token with WRITE on the path's tenant and project; with a
    ``rate``, also within the write rate of the token's subject on the project (429 with
    ``Retry-After`` beyond ``VANCETOPE_RAG_API_WRITES_PER_MINUTE``)."""

    def __init__(self, verifier: TokenVerifier, rate: WriteRate | None = None) -> None:
        self.verifier = verifier
        self.rate = rate

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
        wait = self.rate.take((tenant, project, principal.subject)) if self.rate else 0.0
        if wait > 0:
            assert self.rate is not None
            raise HTTPException(
                429,
                f"more than {self.rate.per_minute} write requests a minute for this project; "
                f"retry in {retry_after(wait)} s (VANCETOPE_RAG_API_WRITES_PER_MINUTE)",
                headers={"Retry-After": retry_after(wait)},
            )
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
    rate = WriteRate(app.config.api_writes_per_minute)
    write: Any = Depends(WriteGate(verifier, rate))  # routes that change or cost

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
        responses=error_responses(*COMMON, 404, 409, 429, 502),
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
        scope: ProjectScope = write,
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
        responses=error_responses(*COMMON, 404, 409, 429),
        dependencies=[Depends(KnownQuery())],
    )
    def rag_cancel_rebuild(scope: ProjectScope = write) -> CancelResponse:
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
        dependencies=[Depends(KnownQuery("state", "q", "withError", "limit", "offset"))],
    )
    def rag_documents(
        state: Annotated[
            IndexState | None, Query(description="only documents in this index state")
        ] = None,
        q: Annotated[
            str | None,
            Query(
                max_length=500, description="only documents whose path holds this text (any case)"
            ),
        ] = None,
        with_error: Annotated[
            bool,
            Query(
                alias="withError",
                description="only documents whose last attempt failed: failed for good, or "
                "waiting for another try (a reindex queued them again)",
            ),
        ] = False,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="page size")] = 500,
        offset: Annotated[int, Query(ge=0, description="documents to skip")] = 0,
        scope: ProjectScope = gate,
    ) -> DocumentListResponse:
        """The project's documents with their index state, by path; ``lastError`` says why
        the last attempt failed. ``total`` counts the matching documents, not the page."""
        docs = app.documents.list_documents(scope.tenant, scope.project)
        if state is not None:
            docs = [d for d in docs if d.index_state is state]
        if q:
            needle = q.casefold()
            docs = [d for d in docs if needle in d.path.casefold()]
        if with_error:
            docs = [d for d in docs if d.index_last_error]
        known = secrets_of(scope.tenant, scope.project)
        page = [document_json(app, d, known) for d in docs[offset : offset + limit]]
        return DocumentListResponse.model_validate({"total": len(docs), "documents": page})

    @router.post(
        f"{prefix}/rag/query",
        tags=["rag"],
        response_model=QueryResponse,
        responses=error_responses(*COMMON, 409, 413, 429, 502),
        dependencies=[Depends(KnownQuery())],
    )
    def rag_query(body: QueryRequest, scope: ProjectScope = write) -> QueryResponse:
        """What a chat turn would get from ``_documents`` for ``query``: the hits with their
        scores and citation labels, by the project's settings (topK, minScore,
        maxPerDocument, mode) unless ``topK`` is given. ``reason`` says why nothing is
        queried; ``cut`` what a ``relevanceCut`` cut the hits by (the reranker's rule, or the
        cosine gap this query used) and ``dropped`` the hits it left out, each with why.
        Costs one embedding call, hence the write gate and its rate limit.

        502 when the embedding provider fails; 409 when the index no longer fits the
        provider's model (a rebuild is due).
        """
        overrides: dict[str, Any] = {} if body.top_k is None else {"top_k": body.top_k}
        if body.relevance_cut is not None:
            overrides["relevance_cut"] = body.relevance_cut
        retriever = app.as_retriever(scope.tenant, scope.project, **overrides)
        plan = retriever.plan()
        result = retriever.retrieve_cut(body.query) if plan.rag is not None else CutResult(())
        hits = list(result.kept)
        p = plan.params
        known = secrets_of(scope.tenant, scope.project)
        return QueryResponse.model_validate(
            {
                "ragId": plan.rag.id if plan.rag is not None else None,
                "reason": plan.reason,
                "params": {
                    "topK": p.top_k,
                    # auto as the number it stands for (the RAG's calibration)
                    "minScore": resolve_min_score(
                        p.min_score, plan.rag.calibration if plan.rag is not None else None
                    ),
                    "maxPerDocument": p.max_per_doc,
                    "mode": p.mode,
                    "relevanceCut": retriever.gap_for(plan.rag, p.mode)
                    if plan.rag is not None
                    else None,
                },
                "order": order_of(hits),
                "hits": [
                    {
                        **c.to_json(),
                        **fused_json(c.hit),
                        "rank": rank,
                        "text": redact(c.to_json()["text"], known),
                    }
                    for rank, c in enumerate(cite(hits, project_rag=True), 1)
                ],
                "cut": result.cut_json(),
                "dropped": [
                    {**d.to_json(), "text": redact(d.hit.text, known)} for d in result.dropped
                ],
            }
        )

    @router.patch(
        f"{prefix}/documents/{{documentId}}",
        tags=["documents"],
        response_model=DocumentResponse,
        responses=error_responses(*COMMON, 404, 413, 429),
        dependencies=[Depends(KnownQuery())],
    )
    def update_document(
        document_id: Annotated[str, Path(alias="documentId", description="the document's id")],
        body: DocumentUpdateRequest,
        scope: ProjectScope = write,
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
