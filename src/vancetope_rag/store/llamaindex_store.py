"""LlamaIndex ``BasePydanticVectorStore`` over any :class:`ChunkStore`, bound to one RAG.

This is what lets the package's chunks be used with LlamaIndex's own machinery
(``VectorStoreIndex.from_vector_store``, retrievers, query engines) while every call stays
inside the RAG's tenant and project.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from vancetope_rag.domain.records import Chunk, ChunkKind, Hit
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.port import ChunkStore
from vancetope_rag.store.types import ChunkFilter, RagScope

#: Node metadata keys that map to chunk columns.
SOURCE_KEY = "sourceRef"
KIND_KEY = "kind"
PATH_KEY = "path"


def filters_to_chunk_filter(filters: MetadataFilters | None) -> ChunkFilter | None:
    """Translate LlamaIndex metadata filters (AND of EQ/NE/IN/NIN) to a ChunkFilter."""
    if filters is None or not filters.filters:
        return None
    if filters.condition not in (None, FilterCondition.AND):
        raise InvalidInputError("only AND-combined metadata filters are supported")
    out: dict[str, str | Sequence[str]] = {}
    for f in filters.filters:
        if not isinstance(f, MetadataFilter):
            raise InvalidInputError("nested metadata filters are not supported")
        key = "sourceRef" if f.key in ("sourceRef", "source_ref", "ref_doc_id", "doc_id") else f.key
        if f.operator in (FilterOperator.EQ, FilterOperator.NE):
            value: str | list[str] = str(f.value)
        elif f.operator in (FilterOperator.IN, FilterOperator.NIN):
            if not isinstance(f.value, list):
                raise InvalidInputError(f"filter {f.key!r} with {f.operator} needs a list")
            value = [str(v) for v in f.value]
        else:
            raise InvalidInputError(
                f"filter operator {f.operator} is not supported (use ==, !=, in, nin)"
            )
        negated = f.operator in (FilterOperator.NE, FilterOperator.NIN)
        out[("!" if negated else "") + key] = value
    return out


def hit_to_node(hit: Hit) -> TextNode:
    metadata = {**hit.metadata, KIND_KEY: hit.kind, PATH_KEY: hit.path, SOURCE_KEY: hit.source_ref}
    node = TextNode(id_=hit.chunk_id, text=hit.text, metadata=metadata)
    node.excluded_embed_metadata_keys = list(metadata)
    node.excluded_llm_metadata_keys = [k for k in metadata if k not in (PATH_KEY, KIND_KEY)]
    return node


def node_to_chunk(node: BaseNode, rag_id: str) -> Chunk:
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
        metadata={k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)},
    )


class RagVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store holding one RAG's chunks (``stores_text=True``)."""

    stores_text: bool = True
    flat_metadata: bool = True

    _chunks: ChunkStore = PrivateAttr()
    _scope: RagScope = PrivateAttr()

    def __init__(self, chunks: ChunkStore, scope: RagScope, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._chunks = chunks
        self._scope = scope

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
        self, source_ref: str, nodes: Sequence[BaseNode], *, generation: int | None = None
    ) -> None:
        """Swap all chunks of ``source_ref`` for ``nodes`` (see ``ChunkStore.replace_source``;
        ``generation``: the writer's claim token)."""
        self._chunks.replace_source(
            self._scope,
            source_ref,
            [node_to_chunk(n, self._scope.rag_id) for n in nodes],
            generation=generation,
        )

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._chunks.remove_by_source(self._scope, ref_doc_id)

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        self._chunks.remove_chunks(
            self._scope, chunk_ids=node_ids, filters=filters_to_chunk_filter(filters)
        )

    def clear(self) -> None:
        self._chunks.drop_rag(self._scope)

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        hits = self._chunks.get_chunks(
            self._scope, chunk_ids=node_ids, filters=filters_to_chunk_filter(filters)
        )
        return [hit_to_node(h) for h in hits]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.query_embedding is None:
            raise InvalidInputError("RagVectorStore answers embedding queries only")
        hits = self._chunks.query(
            self._scope,
            query.query_embedding,
            query.similarity_top_k,
            filters=filters_to_chunk_filter(query.filters),
        )
        return VectorStoreQueryResult(
            nodes=[hit_to_node(h) for h in hits],
            similarities=[h.score for h in hits],
            ids=[h.chunk_id for h in hits],
        )
