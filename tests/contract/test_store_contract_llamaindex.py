"""The LlamaIndex vector store (``RagVectorStore``) over every store adapter: the
``BasePydanticVectorStore`` contract — ``ref_doc_id``, ``doc_ids``/``node_ids``, metadata filters
on the chunk fields and on user metadata through the shared post-filter, nested metadata
refused, hybrid mode, the async methods."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from test_store_contract import DIM, TA, P, rag_record, random_vectors, unit

from vancetope_rag.domain.retrieval.metadata_filters import UnknownMetadataKeyWarning
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.port import ChunkStore, Store
from vancetope_rag.store.port.llamaindex_store import RagVectorStore
from vancetope_rag.store.port.types import RagScope

Settle = Callable[[], None]


@pytest.fixture
def chunks(store: Store) -> ChunkStore:
    return store.chunks


@pytest.fixture
def scope(store: Store) -> RagScope:
    return RagScope.of(store.control.insert_rag(rag_record(TA, P, "_documents", rag_id="rag-a")))


def text_node(
    nid: str,
    vec: Sequence[float],
    *,
    source: str = "doc-1",
    kind: str = "content",
    path: str | None = "a.md",
    **meta: Any,
) -> TextNode:
    return TextNode(
        id_=nid,
        text=f"text of {nid}",
        embedding=list(vec),
        metadata={"kind": kind, "path": path, "sourceRef": source, "lang": "en", **meta},
    )


@pytest.fixture
def vector_store(chunks: ChunkStore, scope: RagScope, settle: Settle) -> RagVectorStore:
    vs = RagVectorStore(chunks, scope)
    vs.add(
        [
            text_node("n1", unit(0), source="doc-1", path="a.md", year=2021, team="Core"),
            text_node("n2", unit(1), source="doc-1", kind="summary", path="a.md", year=2022),
            text_node("n3", unit(2), source="doc-2", path="b.md", year=2023, team="Infra"),
            text_node("n4", unit(3), source="doc-3", path="c.md", lang="de", team="core team"),
        ]
    )
    settle()
    return vs


def flt(key: str, value: Any, op: FilterOperator = FilterOperator.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


def one(key: str, value: Any, op: FilterOperator = FilterOperator.EQ) -> MetadataFilters:
    return MetadataFilters(filters=[flt(key, value, op)])


def query_ids(vs: RagVectorStore, top_k: int = 10, **kw: Any) -> list[str]:
    q = VectorStoreQuery(query_embedding=unit(0), similarity_top_k=top_k, **kw)
    return sorted(vs.query(q).ids or [])


def test_add_and_query(vector_store: RagVectorStore) -> None:
    res = vector_store.query(VectorStoreQuery(query_embedding=unit(0), similarity_top_k=2))
    assert res.ids is not None and res.similarities is not None and res.nodes is not None
    assert res.ids[0] == "n1" and len(res.ids) == 2
    assert res.similarities[0] == pytest.approx(1.0, abs=1e-5)
    node = res.nodes[0]
    assert node.get_content() == "text of n1"
    assert node.metadata["kind"] == "content" and node.metadata["path"] == "a.md"
    assert node.metadata["sourceRef"] == "doc-1" and node.metadata["lang"] == "en"
    assert node.metadata["year"] == 2021
    assert node.ref_doc_id == "doc-1"  # the SOURCE relationship, as LlamaIndex expects
    assert node.source_node is not None and node.source_node.node_id == "doc-1"


def test_filters_on_chunk_fields(vector_store: RagVectorStore) -> None:
    assert query_ids(vector_store, filters=one("kind", "summary")) == ["n2"]
    assert query_ids(vector_store, filters=one("path", ["b.md", "c.md"], FilterOperator.IN)) == [
        "n3",
        "n4",
    ]
    assert query_ids(vector_store, filters=one("kind", "summary", FilterOperator.NE)) == [
        "n1",
        "n3",
        "n4",
    ]
    assert query_ids(vector_store, filters=one("sourceRef", ["doc-1"], FilterOperator.NIN)) == [
        "n3",
        "n4",
    ]
    assert query_ids(vector_store, filters=one("ref_doc_id", "doc-2")) == ["n3"]
    both = MetadataFilters(filters=[flt("sourceRef", "doc-1"), flt("kind", "content")])
    assert query_ids(vector_store, filters=both) == ["n1"]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (one("lang", "de"), ["n4"]),
        (one("lang", "de", FilterOperator.NE), ["n1", "n2", "n3"]),
        (one("year", 2022, FilterOperator.GT), ["n3"]),
        (one("year", 2022, FilterOperator.GTE), ["n2", "n3"]),
        (one("year", 2022, FilterOperator.LT), ["n1"]),
        (one("year", 2021, FilterOperator.LTE), ["n1"]),
        (one("year", "2021", FilterOperator.GT), []),  # a text never compares with a number
        (one("year", [2021, 2023], FilterOperator.IN), ["n1", "n3"]),
        (one("team", ["Core"], FilterOperator.NIN), ["n2", "n3", "n4"]),  # missing: "not in"
        (one("team", "core", FilterOperator.TEXT_MATCH), ["n4"]),
        (one("team", "CORE", FilterOperator.TEXT_MATCH_INSENSITIVE), ["n1", "n4"]),
        (one("team", None, FilterOperator.IS_EMPTY), ["n2"]),
        (
            MetadataFilters(
                filters=[flt("team", "Infra"), flt("lang", "de")], condition=FilterCondition.OR
            ),
            ["n3", "n4"],
        ),
        (
            MetadataFilters(
                filters=[flt("lang", "de"), flt("kind", "summary")], condition=FilterCondition.NOT
            ),
            ["n1", "n3"],
        ),
        (  # nested: summary chunks, or content chunks of 2023
            MetadataFilters(
                filters=[
                    flt("kind", "summary"),
                    MetadataFilters(filters=[flt("kind", "content"), flt("year", 2023)]),
                ],
                condition=FilterCondition.OR,
            ),
            ["n2", "n3"],
        ),
        (  # a store-side part (kind) and a post-filter part (year) together
            MetadataFilters(filters=[flt("kind", "content"), flt("year", 2020, FilterOperator.GT)]),
            ["n1", "n3"],
        ),
    ],
)
def test_filters_on_user_metadata(
    vector_store: RagVectorStore, filters: MetadataFilters, expected: list[str]
) -> None:
    assert query_ids(vector_store, filters=filters) == expected
    assert sorted(n.node_id for n in vector_store.get_nodes(filters=filters)) == expected


def test_doc_ids_and_node_ids_are_honoured(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    """Regression: ``doc_ids`` and ``node_ids`` were ignored (``doc_ids=["nope"]`` still
    returned every chunk)."""
    vs = RagVectorStore(chunks, scope)
    vs.add([text_node(f"n{i}", unit(i % DIM), source=f"doc-{i % 3}") for i in range(9)])
    settle()
    assert query_ids(vs, doc_ids=["nope"]) == []
    assert query_ids(vs, doc_ids=["doc-1"]) == ["n1", "n4", "n7"]
    assert query_ids(vs, node_ids=["n2", "n5", "zzz"]) == ["n2", "n5"]
    assert query_ids(vs, doc_ids=["doc-1", "doc-2"], node_ids=["n1", "n2", "n3"]) == ["n1", "n2"]
    assert query_ids(vs, doc_ids=["doc-1"], filters=one("sourceRef", "doc-2")) == []
    assert len(query_ids(vs, doc_ids=[])) == 9  # LlamaIndex's rule: empty does not restrict


def test_post_filter_over_fetches(chunks: ChunkStore, scope: RagScope, settle: Settle) -> None:
    """The only chunk the filter keeps ranks last of 60: the store is asked again, deeper,
    until it comes back (topK=1)."""
    vecs = random_vectors(60, seed=7)
    query = vecs[0]
    order = sorted(range(60), key=lambda i: -float(vecs[i] @ query))
    vs = RagVectorStore(chunks, scope)
    vs.add(
        [text_node(f"c{i}", vecs[i], source=f"d{i}", rare=int(i == order[-1])) for i in range(60)]
    )
    settle()
    q = VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=1, filters=one("rare", 1))
    assert vs.query(q).ids == [f"c{order[-1]}"]
    q = VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=1, node_ids=["c59"])
    assert vs.query(q).ids == ["c59"]


@pytest.mark.parametrize(
    ("filters", "words"),
    [
        (one("team", ["core"], FilterOperator.ANY), ["any", "array"]),
        (one("team", ["core"], FilterOperator.ALL), ["all", "array"]),
        (one("team", "core", FilterOperator.CONTAINS), ["contains", "text_match"]),
        (one("team", "core", FilterOperator.IN), ["needs a list"]),
        (one("year", [2021], FilterOperator.GT), ["not a list"]),
        (one("team", 3, FilterOperator.TEXT_MATCH), ["needs a text"]),
    ],
)
def test_unsupported_filters_are_named(
    vector_store: RagVectorStore, filters: MetadataFilters, words: list[str]
) -> None:
    q = VectorStoreQuery(query_embedding=unit(0), similarity_top_k=3, filters=filters)
    for call in (
        lambda: vector_store.query(q),
        lambda: vector_store.get_nodes(filters=filters),
        lambda: vector_store.delete_nodes(filters=filters),
    ):
        with pytest.raises(InvalidInputError) as err:
            call()
        message = err.value.message
        assert all(w in message for w in words), message
        assert "'team'" in message or "'year'" in message  # the filter is named
    assert len(vector_store.get_nodes()) == 4  # nothing deleted


def test_a_filter_on_a_key_no_chunk_has_warns_naming_the_known_keys(
    vector_store: RagVectorStore,
) -> None:
    """A misspelt key matched nothing and the answer was ``[]`` without a word.
    LlamaIndex answers a filter that matches nothing with nothing, so it stays an answer,
    with a warning (``warnings.simplefilter("error", UnknownMetadataKeyWarning)`` makes it
    an error) naming the key, the close one and the keys the chunks have."""
    typo = one("yeer", 2022)
    with pytest.warns(UnknownMetadataKeyWarning) as caught:
        assert query_ids(vector_store, filters=typo) == []
    message = str(caught[0].message)
    assert "'yeer'" in message and "did you mean year?" in message, message
    assert all(k in message for k in ("lang", "team", "year")), message
    with pytest.warns(UnknownMetadataKeyWarning):
        assert vector_store.get_nodes(filters=typo) == []
    # a key some chunks have stays a plain answer, even when it matches nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownMetadataKeyWarning)
        assert query_ids(vector_store, filters=one("team", "Nobody")) == []
        assert query_ids(vector_store, filters=one("year", "2021", FilterOperator.GT)) == []
        assert query_ids(vector_store, filters=one("team", "Infra")) == ["n3"]
        assert query_ids(vector_store, filters=one("kind", "nothing")) == []


def test_query_needs_an_embedding_and_a_known_mode(vector_store: RagVectorStore) -> None:
    with pytest.raises(InvalidInputError, match="embedding"):
        vector_store.query(VectorStoreQuery(query_str="text only", similarity_top_k=3))
    with pytest.raises(InvalidInputError, match="'mmr' is not supported"):
        vector_store.query(
            VectorStoreQuery(
                query_embedding=unit(0), similarity_top_k=3, mode=VectorStoreQueryMode.MMR
            )
        )
    with pytest.raises(InvalidInputError, match="query_str"):
        vector_store.query(
            VectorStoreQuery(
                query_embedding=unit(0), similarity_top_k=3, mode=VectorStoreQueryMode.HYBRID
            )
        )


def test_hybrid_mode_fuses_the_lexical_list(
    chunks: ChunkStore, scope: RagScope, settle: Settle
) -> None:
    vs = RagVectorStore(chunks, scope)
    texts = {
        "near": "ordinary words about gardens",
        "word": "the zyxwv protocol handshake",
        "far": "other words entirely",
    }
    vecs = {"near": unit(0), "word": unit(1), "far": unit(2)}
    vs.add(
        [
            TextNode(id_=k, text=t, embedding=vecs[k], metadata={"sourceRef": k})
            for k, t in texts.items()
        ]
    )
    settle()

    def ids(mode: VectorStoreQueryMode, **kw: Any) -> list[str]:
        q = VectorStoreQuery(
            query_embedding=unit(0), query_str="zyxwv", similarity_top_k=2, mode=mode, **kw
        )
        return vs.query(q).ids or []

    assert ids(VectorStoreQueryMode.DEFAULT)[0] == "near"
    assert "word" in ids(VectorStoreQueryMode.HYBRID)
    assert ids(VectorStoreQueryMode.HYBRID, alpha=1.0)[0] == "near"  # dense weight only
    assert ids(VectorStoreQueryMode.HYBRID, alpha=0.0)[0] == "word"  # lexical weight only
    with pytest.raises(InvalidInputError, match="alpha"):
        ids(VectorStoreQueryMode.HYBRID, alpha=1.5)


def test_delete_get_and_delete_nodes(vector_store: RagVectorStore) -> None:
    assert sorted(n.node_id for n in vector_store.get_nodes()) == ["n1", "n2", "n3", "n4"]
    assert [n.node_id for n in vector_store.get_nodes(node_ids=["n3"])] == ["n3"]
    assert [n.node_id for n in vector_store.get_nodes(filters=one("kind", "summary"))] == ["n2"]
    assert all(n.ref_doc_id for n in vector_store.get_nodes())

    vector_store.delete_nodes(filters=one("year", 2023, FilterOperator.GTE))  # user metadata
    assert sorted(n.node_id for n in vector_store.get_nodes()) == ["n1", "n2", "n4"]
    vector_store.delete("doc-1")
    assert sorted(n.node_id for n in vector_store.get_nodes()) == ["n4"]
    vector_store.add([text_node("n5", unit(4), path="e.md"), text_node("n6", unit(5))])
    vector_store.delete_nodes(node_ids=["n6"])
    vector_store.delete_nodes(filters=one("path", "e.md"))
    assert [n.node_id for n in vector_store.get_nodes()] == ["n4"]
    vector_store.clear()
    assert vector_store.get_nodes() == []


def test_uses_ref_doc_id_as_source(chunks: ChunkStore, scope: RagScope) -> None:
    vs = RagVectorStore(chunks, scope)
    node = TextNode(
        id_="plain",
        text="plain llama-index node",
        embedding=unit(0),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="src-9")},
    )
    assert vs.add([node]) == ["plain"]
    (hit,) = chunks.get_chunks(scope)
    assert (hit.source_ref, hit.kind) == ("src-9", "content")
    vs.delete("src-9")
    assert chunks.count_chunks(scope) == 0
    with pytest.raises(InvalidInputError):
        vs.add([TextNode(id_="orphan", text="no source", embedding=unit(0))])


def test_nested_metadata_is_refused_not_dropped(chunks: ChunkStore, scope: RagScope) -> None:
    """Regression: a list or dict value was silently dropped on add."""
    vs = RagVectorStore(chunks, scope)
    for value in (["a", "b"], {"x": 1}):
        node = TextNode(
            id_="n", text="t", embedding=unit(0), metadata={"sourceRef": "d", "tags": value}
        )
        with pytest.raises(InvalidInputError, match="tags"):
            vs.add([node])
    assert chunks.count_chunks(scope) == 0


def test_async_methods(vector_store: RagVectorStore, settle: Settle) -> None:
    async def go() -> None:
        q = VectorStoreQuery(query_embedding=unit(2), similarity_top_k=1)
        assert (await vector_store.aquery(q)).ids == ["n3"]
        assert len(await vector_store.aget_nodes()) == 4
        await vector_store.async_add([text_node("n9", unit(6), source="doc-9")])
        settle()
        assert [n.node_id for n in await vector_store.aget_nodes(node_ids=["n9"])] == ["n9"]
        await vector_store.adelete("doc-9")
        await vector_store.adelete_nodes(node_ids=["n4"])
        assert sorted(n.node_id for n in await vector_store.aget_nodes()) == ["n1", "n2", "n3"]
        await vector_store.aclear()
        assert await vector_store.aget_nodes() == []

    asyncio.run(go())


def test_works_under_a_llama_index_retriever(vector_store: RagVectorStore) -> None:
    index = VectorStoreIndex.from_vector_store(
        vector_store, embed_model=MockEmbedding(embed_dim=DIM)
    )
    results = index.as_retriever(similarity_top_k=2).retrieve("anything")
    assert len(results) == 2
    assert {r.node.node_id for r in results} <= {"n1", "n2", "n3", "n4"}
    assert all(r.node.get_content().startswith("text of ") for r in results)
    assert all(r.node.ref_doc_id for r in results)
    filtered = index.as_retriever(
        similarity_top_k=3, filters=one("lang", "de"), doc_ids=["doc-3"]
    ).retrieve("anything")
    assert [r.node.node_id for r in filtered] == ["n4"]
