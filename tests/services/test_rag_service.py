"""RagService: catalog rules, cached ingestion, chunk windows, queries, bad input."""

from __future__ import annotations

import threading
from functools import partial

import pytest

from fakes import P, ProbeProvider, T, record_outcome, registry
from vancetope_rag import (
    DimensionMismatchError,
    EmbeddingConfigError,
    InvalidInputError,
    RagAlreadyExistsError,
    RagNotFoundError,
    ReservedNameError,
)
from vancetope_rag.app import RagApp
from vancetope_rag.running import SEARCHES
from vancetope_rag.services.indexing.sources import SourceText


@pytest.fixture
def counting() -> ProbeProvider:
    return ProbeProvider("counting")


@pytest.fixture
def capp(make_app, counting: ProbeProvider) -> RagApp:
    return make_app(provider="counting", embeddings=registry(counting))


def test_same_text_twice_costs_one_embedding_call(capp: RagApp, counting: ProbeProvider) -> None:
    rag = capp.rags.create(T, P, "notes")
    first = capp.rags.add_text(rag, "a", "The quick brown fox jumps over the lazy dog.")
    second = capp.rags.add_text(rag, "b", "The quick brown fox jumps over the lazy dog.")
    assert len(counting.log.embedded) == 1
    assert (first.embedded_texts, first.cache_hits) == (1, 0)
    assert (second.embedded_texts, second.cache_hits) == (0, 1)
    assert capp.rags.chunk_count(rag) == 2


def test_cache_survives_a_new_app_on_the_same_store(make_app, counting: ProbeProvider) -> None:
    app1 = make_app(provider="counting", embeddings=registry(counting))
    rag = app1.rags.create(T, P, "notes")
    app1.rags.add_text(rag, "a", "persisted text")
    app2 = make_app(provider="counting", embeddings=registry(counting))
    app2.rags.add_text(app2.rags.get(T, P, "notes"), "b", "persisted text")
    assert len(counting.log.embedded) == 1


def test_duplicate_texts_in_one_batch_are_embedded_once(
    capp: RagApp, counting: ProbeProvider
) -> None:
    rag = capp.rags.create(T, P, "notes")
    grouped, stats = capp.rags.embed_sources(
        rag, {"a": [SourceText("same words")], "b": [SourceText("same words")]}
    )
    assert len(counting.log.embedded) == 1
    assert stats.embedded_texts == 1 and stats.cache_hits == 1
    assert len(grouped["a"]) == len(grouped["b"]) == 1


def test_reserved_duplicate_and_unknown_names(app: RagApp) -> None:
    with pytest.raises(ReservedNameError, match="reserved"):
        app.rags.create(T, P, "_mine")
    app.rags.create(T, P, "notes")
    with pytest.raises(RagAlreadyExistsError, match="already exists"):
        app.rags.create(T, P, "notes")
    with pytest.raises(RagNotFoundError, match="no RAG 'nope'"):
        app.rags.get(T, P, "nope")
    with pytest.raises(InvalidInputError, match="invalid RAG name"):
        app.rags.create(T, P, "bad/name")
    assert [r.name for r in app.rags.list_rags(T, P)] == ["notes"]


def test_system_may_create_reserved_but_users_cannot_delete(app: RagApp) -> None:
    rag = app.rags.create(T, P, "_documents", system=True)
    with pytest.raises(ReservedNameError):
        app.rags.delete(T, P, rag.id)
    assert app.rags.get(T, P, "_documents").id == rag.id


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_is_refused_and_nothing_written(app: RagApp, text: str) -> None:
    rag = app.rags.create(T, P, "notes")
    with pytest.raises(InvalidInputError, match="empty"):
        app.rags.add_text(rag, "a", text)
    with pytest.raises(InvalidInputError, match="empty"):
        app.rags.query(rag, text)
    assert app.rags.chunk_count(rag) == 0


def test_openai_without_api_key_is_a_clear_error(app: RagApp) -> None:
    app.settings.set(T, None, "ai.embedding.provider", "openai")
    with pytest.raises(EmbeddingConfigError, match=r"ai\.embedding\.apiKey is required"):
        app.rags.create(T, P, "notes")
    assert app.rags.list_rags(T, P) == []


def test_dimension_mismatch_between_pinned_rag_and_model(capp: RagApp) -> None:
    rag = capp.rags.create(T, P, "notes")
    capp.rags.add_text(rag, "a", "some text")
    capp.settings.set(T, None, "ai.embedding.baseUrl", "http://localhost:9/dim32")
    with pytest.raises(DimensionMismatchError, match="pinned to 64-dim"):
        capp.rags.query(rag, "some text")
    with pytest.raises(DimensionMismatchError):
        capp.rags.add_text(rag, "b", "more text")
    assert capp.rags.chunk_count(rag) == 1


def test_chunk_size_over_the_model_window_is_refused(app: RagApp) -> None:
    with pytest.raises(InvalidInputError, match="exceeds what"):
        app.rags.create(T, P, "big", chunk_size=100_000)
    with pytest.raises(InvalidInputError, match="chunkOverlap"):
        app.rags.create(T, P, "ovl", chunk_size=64, chunk_overlap=64)


def test_query_caps_hits_per_document_and_applies_min_score(app: RagApp) -> None:
    rag = app.rags.create(T, P, "notes", chunk_size=16, chunk_overlap=0)
    long_doc = " ".join(f"alpha beta gamma sentence number {i}." for i in range(30))
    app.rags.add_text(rag, "long", long_doc)
    app.rags.add_text(rag, "short", "alpha beta gamma")
    hits = app.rags.query(rag, "alpha beta gamma", top_k=5, max_per_doc=1)
    assert sorted(h.source_ref for h in hits) == ["long", "short"]
    capped = app.rags.query(rag, "alpha beta gamma", top_k=5, max_per_doc=2)
    assert sum(h.source_ref == "long" for h in capped) == 2
    assert all(h.score >= 0.99 for h in app.rags.query(rag, "alpha beta gamma", min_score=0.99))
    scores = [h.score for h in app.rags.query(rag, "alpha", top_k=10)]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "topK"),
        ({"top_k": 5000}, "topK"),
        ({"min_score": 2.0}, "minScore"),
        ({"max_per_doc": 0}, "maxPerDocument"),
    ],
)
def test_query_arguments_are_validated(app: RagApp, kwargs: dict, message: str) -> None:
    rag = app.rags.create(T, P, "notes")
    with pytest.raises(InvalidInputError, match=message):
        app.rags.query(rag, "x", **kwargs)


def test_llamaindex_vector_store_view_of_a_rag(app: RagApp) -> None:
    from llama_index.core import VectorStoreIndex

    rag = app.rags.create(T, P, "notes")
    app.rags.add_text(rag, "cats", "cats purr and sleep all day", path="documents/cats.md")
    app.rags.add_text(rag, "dogs", "dogs bark at the mailman", path="documents/dogs.md")
    index = VectorStoreIndex.from_vector_store(
        app.rags.vector_store(rag), embed_model=app.rags.model_for(rag).embed_model
    )
    nodes = index.as_retriever(similarity_top_k=1).retrieve("why do cats purr")
    assert nodes[0].node.metadata["path"] == "documents/cats.md"


def test_no_chunk_exceeds_the_embedded_model_window(embedded_app: RagApp) -> None:
    rag = embedded_app.rags.create(T, P, "long")
    loaded = embedded_app.rags.model_for(rag)
    assert rag.chunk_size + 2 <= loaded.max_input_tokens == 256
    words = "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"
    text = (
        "\n\n".join(
            f"Paragraph {i}: " + " ".join([words] * (i % 7 + 1)) + " " + "lorem ipsum " * 40
            for i in range(40)
        )
        + " "
        + "x" * 5000
    )  # one huge token-run without spaces
    grouped, _ = embedded_app.rags.embed_sources(rag, {"doc": [SourceText(text)]})
    tok = loaded.embed_model._model.tokenizer
    lengths = [len(tok(n.get_content())["input_ids"]) for n in grouped["doc"]]
    assert len(lengths) > 10
    assert max(lengths) <= 256


def test_query_mode_comes_from_the_cascade_unless_given(app: RagApp) -> None:
    rag = app.rags.create(T, P, "notes")
    app.rags.add_text(rag, "zebra", "Zebras graze on the savanna grass.")
    app.rags.add_text(rag, "cluster", "The cluster runs three pods with leases.")
    hybrid = app.rags.query(rag, "zebra savanna", top_k=2)  # the default mode: hybrid
    assert hybrid[0].source_ref == "zebra" and hybrid[0].fused_score is not None
    assert hybrid[0].dense_rank == 1 and hybrid[0].lexical_rank == 1
    app.settings.set(T, P, "rag.retrieval.mode", "dense")
    dense = app.rags.query(rag, "zebra savanna", top_k=2)
    assert dense[0].source_ref == "zebra" and dense[0].fused_score is None
    explicit = app.rags.query(rag, "zebra savanna", top_k=2, mode="HYBRID")
    assert explicit[0].fused_score is not None
    assert explicit[0].score == pytest.approx(dense[0].score)  # score stays the cosine
    with pytest.raises(InvalidInputError, match="dense, hybrid"):
        app.rags.query(rag, "zebra", mode="sparse")


def test_hybrid_finds_what_only_the_words_match_and_gates_it_on_its_cosine(
    app: RagApp,
) -> None:
    rag = app.rags.create(T, P, "notes")
    for i in range(30):
        app.rags.add_text(rag, f"filler-{i}", f"Filler note number {i} about gardening tools.")
    app.rags.add_text(rag, "code", "Call parse_config before the scheduler starts.")
    hits = app.rags.query(rag, "parse_config", top_k=3, mode="hybrid")
    assert hits[0].source_ref == "code" and hits[0].lexical_rank == 1
    best = app.rags.query(rag, "parse_config", top_k=1, mode="dense")[0].score
    gate = best + 0.01  # above every chunk's own cosine: nothing may pass, in either mode
    assert app.rags.query(rag, "parse_config", top_k=3, min_score=gate, mode="hybrid") == []
    assert app.rags.query(rag, "parse_config", top_k=3, min_score=gate, mode="dense") == []


def test_queries_count_as_searches_while_they_run(make_app) -> None:
    """What the embedded model's one-thread session follows (``running.SEARCHES``): a query
    counts from its embedding to its hits, two side by side are crowded, and the count falls
    back when they end, a failed one included."""
    both_inside = threading.Barrier(2, timeout=30)
    seen: list[tuple[int, bool]] = []

    def probe(kind: str, texts: list[str]) -> None:
        if kind != "query":
            return
        both_inside.wait()
        seen.append((SEARCHES.count, SEARCHES.crowded()))
        both_inside.wait()  # neither ends before both have looked
        if texts == ["fails"]:
            raise ConnectionError("embedding endpoint unreachable")

    provider = ProbeProvider("gauged", probe)
    app = make_app(provider="gauged", embeddings=registry(provider))
    rag = app.rags.create(T, P, "notes")
    app.rags.add_text(rag, "a", "some indexed words")
    before = SEARCHES.count
    results: dict[str, object] = {}
    threads = [
        threading.Thread(target=record_outcome, args=(results, q, partial(app.rags.query, rag, q)))
        for q in ("indexed words", "fails")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == [(before + 2, True)] * 2
    assert isinstance(results["fails"], Exception)
    assert isinstance(results["indexed words"], list)
    assert SEARCHES.count == before and not SEARCHES.crowded()
