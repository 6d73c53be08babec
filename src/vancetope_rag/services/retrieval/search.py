"""Retriever: a RAG's hits for an embedded query, in dense or hybrid mode, through the domain's
post-filter (:mod:`vancetope_rag.domain.retrieval.ranking`) over any :class:`ChunkStore`."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

from vancetope_rag.domain.block.citations import current_document_hits
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Hit, RagRecord
from vancetope_rag.domain.retrieval.metadata_filters import HitPredicate
from vancetope_rag.domain.retrieval.ranking import Candidates, FusionParams, collect_hits
from vancetope_rag.store.port import ChunkStore, DocumentStore
from vancetope_rag.store.port.types import ChunkFilter, RagScope


class Retriever:
    """Asks the store for candidate lists and selects hits from them."""

    def __init__(self, chunks: ChunkStore, fusion: FusionParams) -> None:
        self.chunks = chunks
        self.fusion = fusion

    def search(
        self,
        scope: RagScope,
        vector: Sequence[float],
        *,
        text: str | None = None,
        top_k: int,
        min_score: float | None,
        max_per_doc: int | None,
        filters: ChunkFilter | None,
        keep: HitPredicate | None = None,
    ) -> list[Hit]:
        """The best hits by cosine similarity, or with ``text`` (hybrid) by reciprocal-rank
        fusion of the store's dense and lexical lists (each at least ``fusion.depth`` deep),
        every hit gated on its own cosine (see :func:`collect_hits`; ``keep``: the
        post-filter)."""

        def fetch(n: int) -> list[Hit] | Candidates:
            if text is None:
                return self.chunks.query(scope, vector, n, filters=filters)
            return self.chunks.hybrid_query(
                scope, text, vector, n, fusion=self.fusion, filters=filters
            )

        # Hybrid: both lists, and every hit read from them, from one committed state: a
        # source replaced meanwhile would otherwise fuse its old chunks from one list with its
        # new ones from the other, or lose a row between the fusion and the read.
        with nullcontext() if text is None else self.chunks.snapshot():
            return collect_hits(
                fetch,
                top_k=top_k,
                min_score=min_score,
                max_per_doc=max_per_doc,
                min_fetch=0 if text is None else self.fusion.depth,
                keep=keep,
            )


def citable_hits(control: DocumentStore, rag: RagRecord, hits: Sequence[Hit]) -> list[Hit]:
    """The hits as they may be cited now. In the project RAG, each names its document as it
    exists now (one store call for all hits): a moved document shows its new path, a deleted
    one's hits are dropped, chunks added by hand keep no path (``manual:`` labels). Manual
    RAGs' hits are returned as they are."""
    if rag.name != DEFAULT_RAG_NAME or not hits:
        return list(hits)
    paths = control.document_paths(rag.tenant_id, rag.project_id, [h.source_ref for h in hits])
    return current_document_hits(hits, paths)
