"""The store port of chunks: chunk vectors per RAG, their searches and the index management
that goes with them. Re-exported by :mod:`.port`; any ChunkStore can be wrapped as a LlamaIndex
vector store (:class:`vancetope_rag.store.port.llamaindex_store.RagVectorStore`).

Each store adapter subclasses :class:`ChunkStore`: the argument checks of a write and of the
searches are made here, once, and the adapter answers the checked call in its hooks
(``_replace_source``, ``_vector_search``, ``_lexical_search``, ``_hybrid_search``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.domain.retrieval.ranking import Candidates, FusionParams
from vancetope_rag.store.port.shared import (
    best_scores_by_query,
    check_chunk_version,
    check_top_k,
    selects_nothing,
)
from vancetope_rag.store.port.types import ChunkFilter, RagScope


@dataclass(frozen=True, slots=True)
class ChunkSearch:
    """One search of a scope's chunks, its arguments checked (``top_k`` at least 1): what a
    store's search hooks answer. ``text`` is empty for a search by vector only."""

    vector: Sequence[float]
    top_k: int
    filters: ChunkFilter | None = None
    text: str = ""


@runtime_checkable
class ChunkStore(Protocol):
    """Chunk vectors per RAG; every method is scoped by :class:`RagScope`."""

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        """Add chunks to their sources (a source's chunks so far stay and stay visible)."""
        ...

    def replace_source(
        self,
        scope: RagScope,
        source_ref: str,
        chunks: Sequence[Chunk],
        *,
        chunk_version: int | None = None,
    ) -> None:
        """Swap a source's chunks: a query never sees the source with zero chunks, and
        ``count_chunks``/``get_chunks`` show the new chunks once this returns.

        ``chunk_version`` (the writer's claim token) orders writes of one source: a write with
        an older chunk version than one already written is dropped, so a late writer can never
        supersede a newer one. None draws a fresh chunk version (newer than all before)."""
        check_chunk_version(chunk_version)
        self._replace_source(scope, source_ref, chunks, chunk_version)

    def _replace_source(
        self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk], chunk_version: int | None
    ) -> None:
        """:meth:`replace_source` once its chunk version is checked."""
        ...

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        """Remove every chunk of a source; a write under a chunk version (claim token) drawn
        before the removal is dropped afterwards, as :meth:`replace_source` drops older ones."""
        ...

    def discard_chunk_version(self, scope: RagScope, source_ref: str, chunk_version: int) -> int:
        """Undo the write of ``chunk_version`` to a source whose clean mark then failed (the
        claim was lost meanwhile). Stores whose write and clean mark share one transaction
        roll back instead and remove nothing here."""
        ...

    def remove_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> int:
        """Remove the chunks the ids and the filter select (none for an empty list of ids)."""
        if selects_nothing(chunk_ids, filters):
            return 0
        return self._remove_chunks(scope, chunk_ids, filters)

    def _remove_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> int:
        """:meth:`remove_chunks` when it may select chunks."""
        ...

    def drop_rag(self, scope: RagScope) -> int: ...

    def source_refs(self, scope: RagScope) -> list[str]:
        """The distinct source refs of the RAG's chunks, sorted."""
        ...

    def chunk_rags(self, tenant_id: str, project_id: str) -> dict[str, int]:
        """Every RAG id holding chunks in the project, with its vector dimension: finds
        chunks left behind by a RAG whose catalog row is gone."""
        ...

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        """Chunks of the scope as last written (read from the primary, not from a search
        index), one chunk version per source: the newest."""
        ...

    def source_counts(
        self, scope: RagScope, paths: Mapping[str, str]
    ) -> dict[str, tuple[int, int]]:
        """For each source ref of ``paths``: its chunks, and how many of them carry the path
        ``paths`` gives it, as ``count_chunks`` counts (the newest chunk version of the
        source); ``(0, 0)`` for a source without chunks. One query for many sources: what a
        no-op reindex checks of each document of a batch."""
        ...

    def get_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The chunks the ids and the filter select (none for an empty list of ids)."""
        if selects_nothing(chunk_ids, filters):
            return []
        return self._get_chunks(scope, chunk_ids, filters)

    def _get_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> list[Hit]:
        """:meth:`get_chunks` when it may select chunks."""
        ...

    def export_chunks(self, scope: RagScope, source_refs: Sequence[str]) -> list[Chunk]:
        """The chunks of those sources with their vectors, as ``get_chunks`` sees them (the
        newest chunk version of each source), by source ref then in the order they were
        written: what a copy to another store writes with ``replace_source``."""
        ...

    def query(
        self,
        scope: RagScope,
        vector: Sequence[float],
        top_k: int,
        *,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The ``top_k`` most similar chunks, best first, ``score`` = cosine similarity.

        On a store whose search index lags its writes (Atlas), the answer reflects the
        writes the index has seen; per source, only the newest chunk version found is kept."""
        check_top_k(top_k)
        return self._vector_search(scope, ChunkSearch(vector, top_k, filters))

    def _vector_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        """:meth:`query`, its ``top_k`` checked."""
        ...

    def best_scores(
        self, scope: RagScope, vectors: Sequence[Sequence[float]]
    ) -> list[float | None]:
        """For each vector, the score of the RAG's best chunk as ``query(scope, vector, 1)``
        gives it; None where the RAG holds no chunks. The calibrator's probes: a store may
        answer them together (one statement for all on PostgreSQL), without the chunks'
        texts."""
        return best_scores_by_query(self.query, scope, vectors)

    def lexical_query(
        self,
        scope: RagScope,
        text: str,
        top_k: int,
        *,
        vector: Sequence[float],
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The ``top_k`` chunks of the scope by full-text relevance (BM25) to ``text``, best
        first. Each ``Hit.score`` is that chunk's cosine similarity to ``vector`` (so the caller
        can gate lexical-only hits on minScore); ``Hit.lexical_score`` is the store's relevance
        score. A text with no searchable word finds nothing."""
        check_top_k(top_k)
        return self._lexical_search(scope, ChunkSearch(vector, top_k, filters, text))

    def _lexical_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        """:meth:`lexical_query`, its ``top_k`` checked."""
        ...

    def hybrid_query(
        self,
        scope: RagScope,
        text: str,
        vector: Sequence[float],
        top_k: int,
        *,
        fusion: FusionParams,
        filters: ChunkFilter | None = None,
    ) -> Candidates:
        """:meth:`query` and :meth:`lexical_query` (``top_k`` each) from one committed state,
        fused by :meth:`Candidates.hybrid`. A store may fuse on row ids and read each hit's
        row only when it is first looked at: look at them inside :meth:`snapshot`."""
        check_top_k(top_k)
        return self._hybrid_search(scope, ChunkSearch(vector, top_k, filters, text), fusion)

    def _hybrid_search(
        self, scope: RagScope, search: ChunkSearch, fusion: FusionParams
    ) -> Candidates:
        """:meth:`hybrid_query`, its ``top_k`` checked."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """Queries made inside (on this thread) read one committed state of the chunks, so
        the lists of a hybrid query hold a source's old chunks or its new ones, never a mix.
        A store whose queries cannot share a snapshot returns a no-op context (each query
        still reads one state)."""
        ...

    def visible(self, scope: RagScope) -> bool:
        """Does search see the newest chunk version of every source of the scope yet? (Always
        on stores whose queries read the data itself. On Atlas a probe, true only once search
        has shown the scope, unchanged, for the search grace: other search nodes may lag the
        one probed.) A rebuild's shadow becomes live only once it is."""
        ...

    # index management: never called in the query path

    def prepare_dimension(self, dimension: int) -> None:
        """Create what chunks of ``dimension`` need (collection, indexes) if missing, without
        waiting for a build. Called when a RAG of a new dimension is created."""
        ...

    def dimension_ready(self, dimension: int) -> bool:
        """Are the search indexes of ``dimension`` built (READY), so indexing may proceed?"""
        ...

    def sweep(self, *, limit: int = 100) -> int:
        """Delete chunk versions superseded by a newer one that search already sees;
        returns how many chunks went. Run by the indexer's ticks, never by a query."""
        ...
