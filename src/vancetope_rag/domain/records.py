"""Records shared by every layer. Plain frozen dataclasses: no I/O, no store types."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vancetope_rag.domain.heartbeats import IndexerStatus
from vancetope_rag.domain.rebuilds import ProjectProgress
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.domain.wire import camel_json

#: Name of the system-owned default RAG of every project.
DEFAULT_RAG_NAME = "_documents"


def is_reserved_name(name: str) -> bool:
    """Names starting with ``_`` are system-owned (``_documents`` and any later ones)."""
    return name.startswith("_")


class ProjectStatus(enum.StrEnum):
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    CLOSED = "CLOSED"


class IndexState(enum.StrEnum):
    """Where a document stands with the project RAG indexer."""

    NONE = "none"  # not eligible, nothing to do
    PENDING = "pending"  # dirty, waiting for a worker (or for its retry time)
    PROCESSING = "processing"  # claimed by a worker
    INDEXED = "indexed"  # chunks match the current content
    FAILED = "failed"  # gave up after max attempts; see last_error


class RagState(enum.StrEnum):
    """Which generation of a RAG name a catalog entry is (see :mod:`.migration`)."""

    LIVE = "live"  # what every reader uses; one per tenant, project and name
    SHADOW = "shadow"  # being filled by a rebuild, invisible to readers
    RETIRED = "retired"  # replaced by a rebuild; its chunks go after a grace time


class ChunkKind(enum.StrEnum):
    CONTENT = "content"
    SUMMARY = "summary"


@dataclass(frozen=True, slots=True)
class Project:
    tenant_id: str
    project_id: str
    status: ProjectStatus = ProjectStatus.RUNNING
    home_node: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A project document as the RAG layer sees it (spec §3.2 plus index-job fields)."""

    id: str
    tenant_id: str
    project_id: str
    path: str
    mime_type: str
    content: str
    summary: str | None = None
    rag_enabled: bool | None = None  # None = auto (filter decides)
    rag_dirty: bool = False
    rag_claimed_by: str | None = None
    rag_claimed_at: datetime | None = None
    #: Bumped by every change that sets ``rag_dirty``; a worker only marks clean the version
    #: it indexed, so an update during a claim leads to a second pass.
    rag_version: int = 0
    index_state: IndexState = IndexState.NONE
    index_attempts: int = 0
    index_last_error: str | None = None
    index_next_attempt_at: datetime | None = None
    indexed_at: datetime | None = None
    #: Fingerprint of what the current chunks were built from (see the indexer).
    rag_indexed_hash: str | None = None
    #: Fencing token of the current claim: drawn from one increasing sequence per store when
    #: the document is claimed. The indexer writes chunks under it and presents it to
    #: ``mark_rag_clean``, so a worker whose lease expired can neither supersede a newer
    #: claim's chunks nor finish that claim. None when not claimed.
    rag_claim_token: int | None = None
    #: The last indexing pass took only the first ``max_text_chars`` characters of a text
    #: (content or summary) longer than the engine's limit.
    truncated: bool = False
    content_hash: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    #: What the import's text extraction recorded (JSON of
    #: :class:`~vancetope_rag.extraction.records.ExtractionRecord`): the file's and the
    #: extractor's fingerprints, the sections, a truncation or the failure. None for a
    #: document whose content the host wrote itself.
    extraction: str | None = None
    #: What the host saved with the document (``document_saved(..., metadata=...)``): string
    #: keys, scalar values (:mod:`~vancetope_rag.domain.host_metadata`); copied into the
    #: metadata of every chunk, so LlamaIndex metadata filters select by it.
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The import this document came from: :func:`~vancetope_rag.services.importer.import_origin`
    #: of its (resolved folder, prefix). A re-import of that key deletes the document when its
    #: file is gone. None for a document the host or a tool wrote, or one imported before
    #: imports recorded it.
    import_origin: str | None = None
    #: Why the last read of the document's file failed, kept until an import reads it again.
    #: A document with text from an earlier, readable version stays indexed from that text
    #: and "needs attention"; one that never had text is FAILED as well.
    extraction_error: str | None = None


@dataclass(frozen=True, slots=True)
class RagRecord:
    """A RAG catalog entry (spec ``RagDocument``); embedding fields are pinned at creation."""

    id: str
    tenant_id: str
    project_id: str
    name: str
    embedding_provider: str
    embedding_model: str
    embedding_dimension: int
    chunk_size: int
    chunk_overlap: int
    title: str | None = None
    description: str | None = None
    created_at: datetime | None = None
    state: RagState = RagState.LIVE
    #: 1 for a RAG as created; each rebuild's shadow is one more than the generation it
    #: replaces.
    generation: int = 1
    #: The RAG id a shadow replaces (None for a first generation).
    replaces: str | None = None
    #: When a rebuild retired this generation (None unless RETIRED).
    retired_at: datetime | None = None
    #: The measured noise floor ``minScore: auto`` resolves to (None: not calibrated yet).
    calibration: Calibration | None = None
    #: The model profile pinned at creation (JSON object text: window, tokenizer, prefixes or
    #: input_type); None for a RAG created before profiles (no prefixes, the old window).
    embedding_profile: str | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk to store: text, its vector and convention metadata (spec §3.4)."""

    id: str
    rag_id: str
    source_ref: str
    text: str
    embedding: list[float]
    kind: str = ChunkKind.CONTENT.value
    path: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """A query result. ``score`` is always the cosine similarity between the query and the
    chunk (what ``minScore`` gates on, in every retrieval mode); the lexical and fused fields
    say how a hybrid query ranked it."""

    score: float
    text: str
    source_ref: str
    kind: str = ChunkKind.CONTENT.value
    path: str | None = None
    rag_id: str = ""
    chunk_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The store's full-text relevance (BM25 on SQLite, ``searchScore`` on Atlas), when the
    #: lexical side found the chunk.
    lexical_score: float | None = None
    #: 1-based rank in the dense (vector) candidate list, None when not in it.
    dense_rank: int | None = None
    #: 1-based rank in the lexical candidate list, None when not in it.
    lexical_rank: int | None = None
    #: Reciprocal-rank fusion score: what orders hybrid results (never compared to minScore).
    fused_score: float | None = None
    #: The reranker's score, when the rerank stage ordered the hits (higher is more relevant;
    #: its scale is the reranker's, never compared to minScore).
    rerank_score: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "kind": self.kind,
            "score": round(self.score, 4),
            "text": self.text,
            "sourceRef": self.source_ref,
        }
        if self.fused_score is not None:
            out["fusedScore"] = round(self.fused_score, 6)
            out["denseRank"] = self.dense_rank
            out["lexicalRank"] = self.lexical_rank
        if self.rerank_score is not None:
            out["rerankScore"] = round(self.rerank_score, 6)
        return out


@dataclass(frozen=True, slots=True)
class AttentionItem:
    """A document indexed from the text of an earlier version of its file, because the last
    read of the file failed: searchable, but not what the file holds now."""

    document_id: str
    path: str
    error: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "error": self.error}


@dataclass(frozen=True, slots=True)
class RagStatus:
    """Spec §7 status snapshot, plus per-state document counts."""

    exists: bool
    rag_id: str | None = None
    embedding_provider: str | None = None
    embedding_model: str | None = None
    chunk_count: int = 0
    created_at: datetime | None = None
    documents: dict[str, int] = field(default_factory=dict)
    #: Documents indexed only up to the engine's text limit.
    truncated_documents: int = 0
    #: The indexer's work and the latest rebuild, with rates and ETAs.
    progress: ProjectProgress | None = None
    #: Documents indexed from an earlier readable version of their file (the first ones, by
    #: path; ``needs_attention_count`` counts them all).
    needs_attention: list[AttentionItem] = field(default_factory=list)
    needs_attention_count: int = 0
    #: ``provider:model`` of the current embedding settings: what a rebuild builds onto.
    configured_model: str | None = None
    #: Why indexing waits (``paused: provider unreachable since …``: its embedding provider
    #: is down, refuses the settings or answers the wrong dimension, in this process or a
    #: live worker; or the kill switch), and the open circuit as JSON; None: it does not.
    paused: str | None = None
    provider_circuit: dict[str, Any] | None = None
    #: What ``minScore: auto`` resolves to for the RAG (None: not calibrated yet).
    calibration: Calibration | None = None
    #: Why a rebuild would change how the RAG embeds (created before model profiles, or
    #: the window or prefixes configured now differ); None when it would not.
    profile_note: str | None = None
    #: The model profile the RAG pinned (``dimension``, ``window``, ``queryPrefix``,
    #: ``documentPrefix``; window null for a RAG created before model profiles).
    model_profile: dict[str, Any] | None = None

    #: What counts the RAG's chunks against the model's window (the model's tokenizer, the
    #: server's counts, an estimate); None when the provider does not say.
    chunk_counting: str | None = None
    #: The live indexer workers of the project's node, and why nothing moves when
    #: documents wait without one (None: not looked up).
    indexer: IndexerStatus | None = None
    #: Why the project has no ``_documents`` RAG, and the fix (an embedding setting that
    #: cannot make a model); None when it has one or nothing is known to hold it back.
    no_rag_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **camel_json(
                self, "exists", "rag_id", "embedding_provider", "embedding_model", "chunk_count"
            ),
            "createdAt": self.created_at.isoformat() if self.created_at else None,
            "documents": dict(self.documents),
            "truncatedDocuments": self.truncated_documents,
            "progress": self.progress.to_json() if self.progress else None,
            "needsAttention": [a.to_json() for a in self.needs_attention],
            "needsAttentionCount": self.needs_attention_count,
            "configuredModel": self.configured_model,
            "paused": self.paused,
            "providerCircuit": self.provider_circuit,
            "minScoreAuto": self._calibration_json(),
            "profileNote": self.profile_note,
            "modelProfile": self.model_profile,
            "chunkCounting": self.chunk_counting,
            "indexer": self.indexer.to_json() if self.indexer else None,
            "noRagReason": self.no_rag_reason,
        }

    def _calibration_json(self) -> dict[str, Any] | None:
        if self.calibration is None:
            return None
        stored = self.calibration.to_dict()  # status leaves out the probe set and scores
        shown = {k: stored[k] for k in ("minScore", "chunks", "calibratedAt", "gap")}
        nothing = self.calibration.rerank_unmeasurable
        if nothing is not None:  # shown without the reranker's identity digest
            found = nothing.to_dict()
            shown["rerankUnmeasurable"] = {k: found[k] for k in ("chunks", "measuredAt")} | {
                "means": nothing.describe()
            }
        else:
            shown["rerankUnmeasurable"] = None
        rerank = self.calibration.rerank
        if rerank is None:
            return {**shown, "rerank": None}
        kept = rerank.to_dict()  # without the identity digest and the scores
        keys = ("reranker", "rule", "value", "separation", "chunks", "calibratedAt")
        return {**shown, "rerank": {k: kept[k] for k in keys} | {"keeps": rerank.describe()}}


@dataclass(frozen=True, slots=True)
class IndexStatus:
    """One index a store's ``initialize`` created or checked, as the operator should see it.

    ``status`` is the store's own word (Atlas: ``PENDING``, ``BUILDING``, ``READY``,
    ``FAILED``…; SQLite: ``READY``); ``ready`` is true once queries use its final definition.
    """

    collection: str
    name: str
    kind: str
    status: str
    ready: bool
    detail: str = ""
