"""Response models of the REST API: the wire format, declared (so ``/openapi.json`` has it)
and checked on the way out, the error body included.

Field names are the wire names (camelCase); the services' ``to_json`` produce exactly these
shapes, and the routes validate them through these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vancetope_rag.domain.records import IndexState
from vancetope_rag.domain.retrieval.calibration import (
    MIN_CALIBRATION_CHUNKS,
    UNCALIBRATED_MIN_SCORE,
)

MigrationStateName = Literal["running", "switching", "completed", "failed", "cancelled"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkProgress(_Model):
    """One piece of work in documents: done, failed, skipped and pending are separate
    numbers (a failed or skipped document is not progress), with the rate and, while it
    runs, the time left."""

    done: int = Field(description="documents finished")
    failed: int = Field(description="documents that failed for good")
    skipped: int = Field(
        default=0, description="documents not eligible for the RAG: finished, nothing indexed"
    )
    pending: int = Field(description="documents waiting or being processed")
    total: int = Field(description="done + failed + skipped + pending")
    rate: float = Field(description="documents per second over the last minute")
    etaSeconds: float | None = Field(
        description="expected seconds until pending is 0, only while the work runs and its "
        "rate is known; null when nothing is pending, nothing finished lately, the work "
        "ended (a cancelled or failed rebuild) or is paused"
    )
    paused: str | None = Field(
        default=None, description="why the pending documents are not worked on now, else null"
    )


class MigrationRef(_Model):
    """A rebuild as ``reindex?rebuild=true`` started it."""

    id: str
    fromModel: str = Field(description="provider:model of the live generation")
    toModel: str = Field(description="provider:model the new generation is pinned to")


class MigrationProgress(WorkProgress, MigrationRef):
    """A rebuild and how far its new generation has come (or how it ended)."""

    state: MigrationStateName
    fromRagId: str
    toRagId: str
    maxFailureRatio: float = Field(
        description="share of documents that may fail before the rebuild is abandoned"
    )
    reason: str | None = Field(description="why it failed or was cancelled")
    startedAt: str | None
    finishedAt: str | None


class StatusProgress(_Model):
    busy: bool = Field(description="work is pending: a client may poll until it is false")
    indexing: WorkProgress = Field(description="the indexer's work on the live generation")
    migration: MigrationProgress | None = Field(
        description="the running rebuild, else the last one (null: never rebuilt)"
    )


class AttentionEntry(_Model):
    """A document indexed from an earlier readable version of its file."""

    path: str
    error: str = Field(description="why the last read of the file failed (secrets removed)")


class ProbeResponse(_Model):
    """``/healthz`` and ``/readyz``: ``ok`` / ``ready``, or ``unavailable`` with a reason."""

    status: Literal["ok", "ready", "unavailable"]
    reason: str | None = Field(
        default=None,
        description="why not ready: 'store unreachable', 'store not initialised: …' (never "
        "a host, database or driver message)",
    )


class IndexerWorker(_Model):
    """A live indexer worker of the project's node (its heartbeat)."""

    workerId: str
    nodeId: str
    version: str = Field(description="the vancetope-rag version it runs")
    intervalS: float = Field(description="its seconds between ticks")
    startedAt: str
    lastTick: str


class IndexerInfo(_Model):
    """Is any indexer running for this project? From the workers' heartbeats."""

    note: str | None = Field(
        description="with documents waiting and no live worker: 'no indexer has run for N "
        "min' (or 'yet') and what to start; null otherwise"
    )
    lastTick: str | None = Field(
        description="the last tick of any worker of the project's node (null: none ever)"
    )
    workers: list[IndexerWorker] = Field(
        description="live workers: not stopped, last tick within 3 of their intervals + 60 s"
    )


class ProviderCircuit(_Model):
    """An embedding endpoint found down (or refusing the settings, or answering vectors of
    another dimension than the RAG pinned) by this process or a live indexer worker."""

    state: Literal["unreachable", "configError", "wrongDimension"] = Field(
        description="unreachable: connection, timeout, 5xx or 429; configError: 401/403/404; "
        "wrongDimension: vectors of another dimension than the RAG pinned (rebuild the RAG, "
        "or point the settings back at the pinned model)"
    )
    provider: str
    baseUrl: str | None = Field(description="null: the provider's default endpoint")
    since: str = Field(description="when the first failed call was made (UTC, ISO 8601)")
    retryInSeconds: float = Field(description="until the next call is tried (0: due now)")
    failures: int = Field(description="failed calls since it went down")
    error: str = Field(description="the last failure, redacted")
    message: str = Field(description="the same as the status's paused line")


class RerankCut(_Model):
    """The relevance cut in the project's reranker's scale (``relevanceCut: auto`` for hits
    the reranker scored)."""

    reranker: str = Field(description="provider:model it was measured with")
    rule: Literal["relative", "absolute"] = Field(
        description="relative: a hit is kept within value of the turn's best rerank score; "
        "absolute: with a rerank score of value or more"
    )
    value: float = Field(description="the floor below the best, or the threshold, in its scale")
    separation: float = Field(
        description="how well the rule told the pseudo-queries' sources from their background "
        "(Youden's J: 1 apart, 0 not at all)"
    )
    chunks: int = Field(description="the chunk count it was measured against")
    calibratedAt: str | None = Field(description="when it was measured (ISO 8601)")
    keeps: str = Field(description="the rule in words")


class RerankUnmeasurable(_Model):
    """A measurement of the rerank cut that found nothing to measure."""

    chunks: int = Field(description="the chunk count it was measured at")
    measuredAt: str | None = Field(description="when (ISO 8601)")
    means: str = Field(description="what it means for the RAG's turns, in words")


class MinScoreAuto(_Model):
    """What ``minScore: auto`` means for the RAG: its calibrated noise floor."""

    minScore: float = Field(description="the cosine threshold auto resolves to")
    chunks: int = Field(description="the chunk count it was measured against")
    calibratedAt: str | None = Field(description="when it was measured (ISO 8601)")
    gap: float | None = Field(
        default=None,
        description="the relevance cut's gap relevanceCut auto resolves to (cosine below the "
        "turn's best hit); null when not measured",
    )
    rerank: RerankCut | None = Field(
        default=None,
        description="the cut of hits the project's reranker scored (null: no reranker, not "
        "measured yet, it was unreachable, or it found nothing to measure, see "
        "rerankUnmeasurable: those turns cut by the gap)",
    )
    rerankUnmeasurable: RerankUnmeasurable | None = Field(
        default=None,
        description="the last measurement in the reranker's scale found nothing to measure "
        "(no pseudo-query with a background, or no rule came of its scores): not measured "
        "again until the RAG doubles or the reranker changes; null otherwise",
    )


class ModelProfileInfo(_Model):
    """The embedding model profile the RAG pinned when it was created."""

    dimension: int = Field(description="the length of the RAG's vectors")
    window: int | None = Field(
        description="the most tokens of one input the model reads (null: the RAG was created "
        "before model profiles)"
    )
    queryPrefix: str = Field(description="text put before every query ('' for none)")
    documentPrefix: str = Field(description="text put before every chunk ('' for none)")


class StatusResponse(_Model):
    """Spec §7 snapshot of ``_documents`` with per-state document counts and progress."""

    exists: bool
    ragId: str | None
    embeddingProvider: str | None
    embeddingModel: str | None
    chunkCount: int
    createdAt: str | None
    documents: dict[str, int]
    truncatedDocuments: int = Field(description="documents indexed only up to the text limit")
    progress: StatusProgress
    needsAttention: list[AttentionEntry] = Field(
        description="documents indexed from the last readable version of their file, whose "
        "latest version could not be read (the first ones by path): fix the file and import "
        "it again"
    )
    needsAttentionCount: int = Field(description="all documents that need attention")
    configuredModel: str | None = Field(
        default=None,
        description="provider:model of the current embedding settings, what a rebuild builds "
        "onto (null: embeddings off or an unknown provider)",
    )
    paused: str | None = Field(
        default=None,
        description="why indexing waits ('paused: provider unreachable since …'): the "
        "embedding provider is down, refuses the settings or answers vectors of another "
        "dimension (met by this process or a live indexer worker), or embeddings are switched "
        "off; null: it does not wait",
    )
    providerCircuit: ProviderCircuit | None = Field(
        default=None,
        description="the provider's open circuit, in this process or a live indexer worker; "
        "null: closed",
    )
    minScoreAuto: MinScoreAuto | None = Field(
        description=f"the RAG's calibrated minScore (null: not calibrated yet; auto means "
        f"{UNCALIBRATED_MIN_SCORE} until the RAG holds {MIN_CALIBRATION_CHUNKS} chunks)"
    )
    profileNote: str | None = Field(
        default=None,
        description="why a rebuild would change how the RAG embeds (created before model "
        "profiles, or the window or prefixes configured now differ); null: it would not",
    )
    modelProfile: ModelProfileInfo | None = Field(
        default=None, description="the model profile the RAG pinned (null: no RAG)"
    )
    chunkCounting: str | None = Field(
        default=None,
        description="what sized the RAG's chunks against the model's window: the model's "
        "tokenizer, the server's token counts, or an estimate; null: the provider does not say",
    )
    indexer: IndexerInfo | None = Field(
        default=None, description="the live indexer workers, and why nothing moves without"
    )
    noRagReason: str | None = Field(
        default=None,
        description="why the project has no _documents RAG, with the fix (an embedding "
        "setting that cannot make a model, e.g. ai.embedding.apiKey missing); null: it has "
        "one, or nothing is known to hold it back",
    )


class ReindexResponse(_Model):
    rebuild: bool
    documentsQueued: int
    migration: MigrationRef | None = Field(
        description="the rebuild started; null for a plain reindex or a first index"
    )


class CancelResponse(_Model):
    cancelled: bool
    migration: MigrationProgress


class DocumentResponse(_Model):
    """A project document as the RAG sees it, without its content."""

    id: str
    path: str
    mimeType: str
    ragEnabled: Literal["auto", "on", "off"] = Field(
        description="the spec §8.1 override: auto (the filter decides), on, off"
    )
    eligible: bool = Field(description="whether the document belongs in _documents now")
    ragDirty: bool = Field(description="waiting for the indexer")
    state: IndexState = Field(description="where the document stands with the indexer")
    attempts: int = Field(description="indexing attempts of the current version")
    truncated: bool = Field(
        description="indexed only in part: its file was read up to a budget, or its text is "
        "longer than the engine's limit"
    )
    truncatedReason: str | None = Field(description="why it is truncated (None when it is not)")
    lastError: str | None = Field(description="why the last attempt failed (secrets removed)")
    indexedAt: str | None
    updatedAt: str | None


class DocumentListResponse(_Model):
    total: int = Field(description="documents matching the filter, before paging")
    documents: list[DocumentResponse]


class QueryParams(_Model):
    """The parameters a turn's retrieval uses (the settings cascade, the request's topK)."""

    topK: int
    minScore: float | None = Field(
        description="cosine similarity a hit must reach (minScore auto as the RAG's "
        "calibrated value; null: no threshold)"
    )
    maxPerDocument: int
    mode: str = Field(description="dense, lexical or hybrid")
    relevanceCut: float | None = Field(
        default=None,
        description="the cosine gap relevanceCut asks for in this mode (auto as the RAG's "
        "calibrated gap); cut says what this query's hits were cut by: the reranker's rule, "
        "or this gap narrowed by the noise floor; null: no cut asked, topK hits",
    )


class QueryCut(_Model):
    """What this query's hits were cut by (``relevanceCut``), in that cut's own scale."""

    by: Literal["none", "gap", "rerank"] = Field(
        description="none: no cut (relevanceCut off or omitted, or auto on a RAG not "
        "calibrated yet); gap: a cosine gap below the best hit's cosine (in hybrid, with a "
        "share of the best fused score), and the question's words; rerank: the reranker's "
        "calibrated rule on its rerankScore (relevanceCut auto on hits the project's reranker "
        "scored)"
    )
    value: float | None = Field(
        default=None,
        description="gap: the cosine gap this query used; rerank: the rule's value in the "
        "reranker's scale; null: no cut",
    )
    rule: Literal["relative", "absolute"] | None = Field(
        default=None,
        description="rerank: relative (kept within value of the best rerankScore) or absolute "
        "(kept with a rerankScore of value or more); null otherwise",
    )
    reranker: str | None = Field(
        default=None, description="rerank: provider:model the rule was measured with"
    )
    narrowed: bool = Field(
        default=False,
        description="gap: the RAG's noise floor narrowed the gap (params.relevanceCut) to "
        "value for this query, as its best hit stands barely above the floor",
    )
    floor: float | None = Field(
        default=None,
        description="the noise floor (the RAG's calibrated minScore) that narrowed the gap; "
        "null: not narrowed",
    )
    keeps: str = Field(default="", description="the rule in words ('' for none)")


class QueryDropped(_Model):
    """A hit the relevance cut left out of this query's answer, and why."""

    path: str | None = Field(description="the document's path (null for a manual text)")
    sourceRef: str | None = Field(description="the chunk's source reference (a document id)")
    kind: str = Field(description="content or summary")
    score: float = Field(description="cosine similarity to the question")
    fusedScore: float | None = Field(default=None, description="hybrid: its fused score")
    denseRank: int | None = Field(default=None, description="hybrid: its dense rank")
    lexicalRank: int | None = Field(default=None, description="hybrid: its lexical rank")
    rerankScore: float | None = Field(default=None, description="the reranker's score")
    reason: str = Field(
        description="why the cut dropped it: gap …, fused … or words … (the cosine gap, the "
        "fused share, the share of the question's words it carries) or rerank … (the "
        "reranker's rule), as context --explain says"
    )
    text: str


class QueryHit(_Model):
    """One excerpt as a turn would get it."""

    label: str = Field(description="the source's citation label in the block (S1, S2, …)")
    source: str = Field(description="the source as the block names it")
    path: str | None = Field(description="the document's path (null for a manual text)")
    sourceRef: str | None = Field(description="the chunk's source reference (a document id)")
    kind: str = Field(description="content or summary")
    rank: int = Field(description="its place in the order the turn uses (1: first)")
    score: float = Field(
        description="cosine similarity to the question (what minScore gates; not what orders "
        "hybrid or reranked hits)"
    )
    fusedScore: float | None = Field(
        default=None,
        description="the reciprocal-rank fusion score that orders a hybrid query's hits; null "
        "in dense mode",
    )
    denseRank: int | None = Field(
        default=None, description="hybrid: its rank in the dense (vector) list; null: not in it"
    )
    lexicalRank: int | None = Field(
        default=None, description="hybrid: its rank in the lexical (BM25) list; null: not in it"
    )
    rerankScore: float | None = Field(
        default=None,
        description="the reranker's score, when the rerank stage ordered the hits "
        "(ai.rerank.provider); null otherwise",
    )
    text: str


class QueryResponse(_Model):
    """What a chat turn would get from ``_documents`` for a question."""

    ragId: str | None = Field(description="the RAG queried (null when none is)")
    reason: str | None = Field(
        description="why nothing is queried (the project RAG is off, embeddings are off, "
        "no index yet), else null"
    )
    params: QueryParams
    order: Literal["cosine", "fused", "rerank"] = Field(
        description="what orders the hits, best first: cosine (dense), fused (hybrid: "
        "fusedScore) or rerank (the reranker's rerankScore)"
    )
    hits: list[QueryHit]
    cut: QueryCut = Field(description="what this query's hits were cut by")
    dropped: list[QueryDropped] = Field(
        description="the hits the cut left out, in the order the turn used, each with why"
    )


class ErrorResponse(_Model):
    """Every failure's body: a message a user can act on and a stable code."""

    error: str = Field(description="what went wrong and what to do about it")
    code: str = Field(
        description="stable machine-readable code, e.g. UNAUTHENTICATED, FORBIDDEN, "
        "PROJECT_NOT_FOUND, INVALID_REQUEST"
    )


#: What each declared error status means, for the OpenAPI description.
_ERRORS = {
    400: "invalid input (an id no project can have, a value out of range)",
    401: "missing, malformed, invalid or expired bearer token",
    403: "the token does not grant WRITE on this tenant and project",
    404: "the project, document or rebuild does not exist",
    409: "the current state refuses the request (closed project, rebuild running, "
    "embedding settings that cannot be used)",
    413: "the request body is larger than the engine's text limit allows",
    422: "a parameter or body field is missing or invalid",
    429: "too many write requests for this project; retry after the Retry-After seconds",
    502: "the embedding provider failed",
    503: "the store, or the embedding provider (PROVIDER_UNAVAILABLE), is unavailable; retry later",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: each status with the error body model."""
    return {s: {"model": ErrorResponse, "description": _ERRORS[s]} for s in statuses}
