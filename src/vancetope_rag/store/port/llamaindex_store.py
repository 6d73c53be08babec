"""LlamaIndex ``BasePydanticVectorStore`` over any :class:`ChunkStore`, bound to one RAG.

This is what lets the package's chunks be used with LlamaIndex's own machinery
(``VectorStoreIndex.from_vector_store``, retrievers, query engines) while every call stays
inside the RAG's tenant and project. Nodes come back with their source document as
``ref_doc_id``; a query honours ``doc_ids``, ``node_ids`` and metadata filters with
LlamaIndex's operators on the chunk fields and on each chunk's own metadata (the shared
post-filter of :mod:`vancetope_rag.domain.retrieval.metadata_filters`, with over-fetch, on every
store).

For a project's documents with ``minScore``, ``maxPerDocument``, hybrid ranking and the kill
switch, use :meth:`RagApp.as_retriever <vancetope_rag.app.RagApp.as_retriever>` instead.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from vancetope_rag.domain.records import Chunk, ChunkKind, Hit
from vancetope_rag.domain.retrieval.metadata_filters import (
    HitPredicate,
    UnknownMetadataKeyWarning,
    all_of,
    compile_filters,
    metadata_keys,
    pushdown,
    unknown_keys_message,
)
from vancetope_rag.domain.retrieval.ranking import Candidates, Fetch, FusionParams, collect_hits
from vancetope_rag.domain.texts import check_metadata
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.port import ChunkStore
from vancetope_rag.store.port.types import ChunkFilter, RagScope

#: Node metadata keys that map to chunk columns.
SOURCE_KEY = "sourceRef"
KIND_KEY = "kind"
PATH_KEY = "path"


def hit_to_node(hit: Hit) -> TextNode:
    """A hit as a LlamaIndex node: the chunk id as ``node_id``, the source (for ``_documents``:
    the document id) as ``ref_doc_id``, path, kind and the chunk's metadata in ``metadata``
    (the model sees path and kind beside the text, nothing else)."""
    metadata = {**hit.metadata, KIND_KEY: hit.kind, PATH_KEY: hit.path, SOURCE_KEY: hit.source_ref}
    node = TextNode(
        id_=hit.chunk_id,
        text=hit.text,
        metadata=metadata,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=hit.source_ref)},
    )
    node.excluded_embed_metadata_keys = list(metadata)
    node.excluded_llm_metadata_keys = [k for k in metadata if k not in (PATH_KEY, KIND_KEY)]
    return node


def node_to_chunk(node: BaseNode, rag_id: str) -> Chunk:
    """A node to store. Its metadata must be flat (strings, numbers, booleans, null): a nested
    value is refused, never dropped, since a filter on it could then never match."""
    embedding = node.get_embedding()
    meta = dict(node.metadata)
    # Our pipeline puts the source in metadata (one source may hold several LlamaIndex
    # documents: content and summary); plain LlamaIndex callers set ref_doc_id.
    source_ref = meta.pop(SOURCE_KEY, None) or node.ref_doc_id
    if not source_ref:
        raise InvalidInputError("a node needs a source document (ref_doc_id) to be stored")
    kind = str(meta.pop(KIND_KEY, ChunkKind.CONTENT.value))
    path = meta.pop(PATH_KEY, None)
    return Chunk(
        id=node.node_id or uuid.uuid4().hex,
        rag_id=rag_id,
        source_ref=str(source_ref),
        text=node.get_content(metadata_mode=MetadataMode.NONE),
        embedding=list(embedding),
        kind=kind,
        path=None if path is None else str(path),
        metadata=dict(check_metadata(meta)),
    )


def ids_predicate(
    doc_ids: Sequence[str] | None, node_ids: Sequence[str] | None
) -> HitPredicate | None:
    """Keep hits of those source documents and those chunks (LlamaIndex's rule: an empty or
    absent list does not restrict)."""
    docs = frozenset(doc_ids) if doc_ids else None
    nodes = frozenset(node_ids) if node_ids else None
    if docs is None and nodes is None:
        return None
    return lambda h: (
        (docs is None or h.source_ref in docs) and (nodes is None or h.chunk_id in nodes)
    )


class RagVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store holding one RAG's chunks (``stores_text=True``).

    Queries: ``default`` mode (cosine) and ``hybrid`` (with ``query_str``; ``alpha`` weighs
    the dense list against the lexical one in the reciprocal-rank fusion). The ``async``
    methods run the blocking store calls in a worker thread.
    """

    stores_text: bool = True
    flat_metadata: bool = True

    _chunks: ChunkStore = PrivateAttr()
    _scope: RagScope = PrivateAttr()
    _fusion: FusionParams = PrivateAttr()

    def __init__(
        self,
        chunks: ChunkStore,
        scope: RagScope,
        *,
        fusion: FusionParams | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._chunks = chunks
        self._scope = scope
        self._fusion = fusion or FusionParams()

    @classmethod
    def class_name(cls) -> str:
        return "RagVectorStore"

    @property
    def client(self) -> Any:
        return self._chunks

    @property
    def scope(self) -> RagScope:
        return self._scope

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        return self._chunks.add_chunks(
            self._scope, [node_to_chunk(n, self._scope.rag_id) for n in nodes]
        )

    def replace_source(
        self, source_ref: str, nodes: Sequence[BaseNode], *, chunk_version: int | None = None
    ) -> None:
        """Swap all chunks of ``source_ref`` for ``nodes`` (see ``ChunkStore.replace_source``;
        ``chunk_version``: the writer's claim token)."""
        self._chunks.replace_source(
            self._scope,
            source_ref,
            [node_to_chunk(n, self._scope.rag_id) for n in nodes],
            chunk_version=chunk_version,
        )

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._chunks.remove_by_source(self._scope, ref_doc_id)

    def _matching(
        self, node_ids: Sequence[str] | None, filters: MetadataFilters | None
    ) -> list[Hit]:
        keep = compile_filters(filters)
        hits = self._chunks.get_chunks(
            self._scope, chunk_ids=node_ids, filters=pushdown(filters) or None
        )
        return hits if keep is None else [h for h in hits if keep(h)]

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        if compile_filters(filters) is None:
            self._chunks.remove_chunks(self._scope, chunk_ids=node_ids)
            return
        doomed = [h.chunk_id for h in self._matching(node_ids, filters)]
        if doomed:
            self._chunks.remove_chunks(self._scope, chunk_ids=doomed)

    def clear(self) -> None:
        self._chunks.drop_rag(self._scope)

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        nodes: list[BaseNode] = [hit_to_node(h) for h in self._matching(node_ids, filters)]
        if not nodes:
            self._warn_unknown_keys(filters)
        return nodes

    def _warn_unknown_keys(self, filters: MetadataFilters | None) -> None:
        """After an empty answer: warn when ``filters`` test a key no chunk has (read from
        the RAG's chunks only then, so a filter that matches costs nothing more)."""
        if not metadata_keys(filters):
            return
        known = {k for h in self._chunks.get_chunks(self._scope) for k in h.metadata}
        message = unknown_keys_message(filters, known)
        if message is not None:
            warnings.warn(message, UnknownMetadataKeyWarning, stacklevel=3)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` best chunks kept by ``doc_ids``, ``node_ids`` and
        ``filters``, over-fetching while the post-filter drops candidates.

        Raises:
            InvalidInputError: No query embedding, a mode other than ``default``/``hybrid``
                (``hybrid`` without ``query_str``), or an unsupported filter.
        """
        vector = query.query_embedding
        if vector is None:
            raise InvalidInputError("RagVectorStore answers embedding queries only")
        ids = ids_predicate(query.doc_ids, query.node_ids)
        keep = all_of([compile_filters(query.filters), ids])
        pushed: dict[str, str | Sequence[str]] = dict(pushdown(query.filters))
        if query.doc_ids and "sourceRef" not in pushed:
            pushed["sourceRef"] = list(query.doc_ids)
        store_filter: ChunkFilter | None = pushed or None
        fetch: Fetch
        min_fetch = 0
        if query.mode == VectorStoreQueryMode.DEFAULT:

            def fetch(n: int) -> list[Hit]:
                return self._chunks.query(self._scope, vector, n, filters=store_filter)

        elif query.mode == VectorStoreQueryMode.HYBRID:
            fetch, min_fetch = self._hybrid_fetch(query, vector, store_filter)
        else:
            raise InvalidInputError(
                f"query mode {getattr(query.mode, 'value', query.mode)!r} is not supported; "
                "use 'default' or 'hybrid'"
            )
        with self._chunks.snapshot():  # a hybrid query's hits are read as they are selected
            hits = collect_hits(fetch, top_k=query.similarity_top_k, keep=keep, min_fetch=min_fetch)
        if not hits:
            self._warn_unknown_keys(query.filters)
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h) for h in hits],
            similarities=[h.score for h in hits],
            ids=[h.chunk_id for h in hits],
        )

    def _hybrid_fetch(
        self, query: VectorStoreQuery, vector: Sequence[float], filters: ChunkFilter | None
    ) -> tuple[Fetch, int]:
        text = query.query_str
        if not text or not text.strip():
            raise InvalidInputError("a hybrid query needs query_str beside the embedding")
        fusion = self._fusion
        if query.alpha is not None:
            if not 0.0 <= query.alpha <= 1.0:
                raise InvalidInputError(f"alpha must be between 0 and 1, got {query.alpha!r}")
            fusion = FusionParams(fusion.k, query.alpha, 1.0 - query.alpha, fusion.depth)

        def fetch(n: int) -> Candidates:
            return self._chunks.hybrid_query(
                self._scope, text, vector, n, fusion=fusion, filters=filters
            )

        return fetch, fusion.depth

    # -- async: the same calls in a worker thread (apsw and pymongo block) ---------------

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return await asyncio.to_thread(self.query, query, **kwargs)
