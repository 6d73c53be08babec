"""Atlas at scale, the smaller points, one test each on the Atlas double or
the pure builders: no silent fallback on a client's TypeError, the exact-search cap as a
setting, ``init --prune``, a hybrid query's two searches at once with the text-only hits'
cosines from one exact ``$vectorSearch``, the query vector as BinData float32, queryability
checked again, a chat turn's own deadline, and paths or source refs past Atlas's token limit.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from atlas_double import AtlasCluster
from bson.binary import Binary, BinaryVectorDtype
from mongo_support import atlas_app, atlas_store

from fakes import P, T
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Chunk
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.metrics import Metrics
from vancetope_rag.services.indexing.progress import node_work_state
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.mongo.search import SearchSupport
from vancetope_rag.store.port.types import RagScope

DIM = 8
SCOPE = RagScope("ta", "p", "rag-a", DIM)


def unit(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    return v


def chunk(cid: str, vec: list[float], text: str, *, source: str = "doc-1") -> Chunk:
    return Chunk(cid, SCOPE.rag_id, source, text, vec)


def opened(tmp_path: Path, clock: Any, **options: Any) -> tuple[MongoStore, AtlasCluster]:
    store, cluster = atlas_store(tmp_path, clock, **options)
    assert isinstance(store, MongoStore) and isinstance(store.chunks, MongoChunkStore)
    return store, cluster


def searches(cluster: AtlasCluster, stage: str) -> list[dict[str, Any]]:
    return [s[stage] for s in cluster.searches if stage in s]


# -- a client that cannot list search indexes is an error, not exact ranking ------------------


class Broken:
    """A database whose collections' ``list_search_indexes`` raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getitem__(self, name: str) -> Any:
        error = self.error

        class Collection:
            def list_search_indexes(self, *args: Any) -> Any:
                raise error

        return Collection()


@pytest.mark.parametrize(
    "error",
    [TypeError("'Collection' object is not callable"), AttributeError("list_search_indexes")],
)
def test_a_client_that_cannot_list_search_indexes_is_an_error_not_exact_ranking(
    error: Exception,
) -> None:
    db = Broken(error)
    support = SearchSupport(db, db, mode="auto")
    with pytest.raises(StoreError, match="vector_search='exact'"):
        support.uses_atlas()
    assert support.mode == "auto"  # nothing decided: a code bug never reads as "no search"


# -- the exact-search cap of selective scopes is a setting ----------------------------------


def test_selective_scopes_search_exactly_up_to_the_setting(
    tmp_path: Path, fake_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ≤ 10,000 chunks: exact whatever the share
    assert mq.prefer_exact(10_000, 10_000)
    # selective (≤ 5 %): exact up to the cap, 20,000 by default (was 100,000)
    assert mq.prefer_exact(20_000, 10_000_000)
    assert not mq.prefer_exact(20_001, 10_000_000)
    assert mq.prefer_exact(90_000, 10_000_000, max_selective=100_000)
    assert not mq.prefer_exact(90_000, 1_000_000, max_selective=100_000)  # 9 %: ANN
    monkeypatch.setenv("VANCETOPE_RAG_MONGO_EXACT_MAX_CHUNKS", "50000")
    options = EngineConfig().mongo_options()
    assert options["exact_max_chunks"] == 50_000
    store2 = open_mongo_store(
        "mongodb://atlas.example.net/other",
        clock=fake_clock,
        client=AtlasCluster(clock=fake_clock).client(),
        server_clock=False,
        **options,
    )
    assert isinstance(store2.chunks, MongoChunkStore)
    assert store2.chunks.search.exact_max_chunks == 50_000
    with pytest.raises(ValueError):
        EngineConfig(mongo_exact_max_chunks=5_000)  # below the ≤ 10,000 rule: meaningless


# -- init --prune -----------------------------------------------------------------------------


def test_init_prune_drops_the_search_indexes_of_dimensions_no_rag_uses(
    tmp_path: Path, fake_clock: Any
) -> None:
    store, cluster = opened(tmp_path, fake_clock)
    store.initialize(dimensions=(16, 32))
    cluster.settle()
    assert cluster.index_count() == 6
    statuses = store.initialize(dimensions=(8,))  # without --prune: nothing goes
    assert cluster.index_count() == 6 and {s.status for s in statuses} == {"READY"}
    store.database["rags"].insert_one({"ragId": "r", "embeddingDimension": 16})
    statuses = store.initialize(dimensions=(8,), prune=True)
    dropped = sorted((s.collection, s.name) for s in statuses if s.status == "DROPPED")
    assert dropped == [("chunks_32", ix.TEXT_INDEX), ("chunks_32", ix.VECTOR_INDEX)]
    assert all("no RAG uses dimension 32" in s.detail for s in statuses if s.status == "DROPPED")
    assert set(cluster.indexes[("vancetope_rag_test", "chunks_16")]) == {
        ix.VECTOR_INDEX,
        ix.TEXT_INDEX,
    }
    assert not cluster.indexes.get(("vancetope_rag_test", "chunks_32"))
    # once dropped, a second prune has nothing to say; the collection itself stays
    again = store.initialize(dimensions=(8,), prune=True)
    assert not [s for s in again if s.status == "DROPPED"]
    assert "chunks_32" in store.database.list_collection_names()


# -- hybrid: both searches at once, the text-only hits' cosines from one exact search ---------


def test_a_hybrid_query_runs_both_searches_at_once_and_ships_no_vectors(
    tmp_path: Path, fake_clock: Any
) -> None:
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.replace_source(
        SCOPE,
        "doc-1",
        [
            chunk("near", unit(0), "an unrelated sentence"),
            chunk("word", unit(1), "the word zebra appears here"),
            chunk("both", [0.9, 0.1, 0, 0, 0, 0, 0, 0], "zebra and near"),
            chunk("far", unit(3), "nothing to see"),
        ],
    )
    cluster.settle()
    started: list[str] = []
    both_running = threading.Event()
    inner = chunks.search.aggregate

    def aggregate(scope: RagScope, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stage = next(iter(pipeline[0]))
        started.append(stage)
        if len(started) <= 2:  # the first two searches must be in flight together
            if {"$search", "$vectorSearch"} <= set(started):
                both_running.set()
            assert both_running.wait(5), "the vector and text searches ran one after the other"
        return inner(scope, pipeline)

    chunks.search.aggregate = aggregate  # type: ignore[method-assign]
    cluster.searches.clear()
    found = chunks.hybrid_query(SCOPE, "zebra", unit(0), 2, fusion=FusionParams())
    text = searches(cluster, "$search")
    assert len(text) == 1
    vector = searches(cluster, "$vectorSearch")
    # the dense query, then ONE exact search for the cosines of the hits only text found
    assert len(vector) == 2
    cosines = vector[1]
    assert cosines["exact"] is True and "numCandidates" not in cosines
    assert {"chunkId": {"$in": ["word"]}} in cosines["filter"]["$and"]
    # no text hit brought its vector back
    text_reads = [r.pipeline for r in cluster.reads if r.pipeline and "$search" in r.pipeline[0]]
    projected = [s["$project"] for s in text_reads[-1] if "$project" in s]
    assert projected and ix.VECTOR_FIELD not in projected[0]
    by_id = {h.chunk_id: h for h in found.hits}
    assert set(by_id) == {"near", "both", "word"}
    assert by_id["word"].score == pytest.approx(0.0, abs=1e-6)  # cos(unit(1), unit(0))
    assert by_id["both"].score == pytest.approx(0.9 / (0.82**0.5), abs=1e-5)


# -- the query vector as BinData float32 ------------------------------------------------------


def test_the_query_vector_is_sent_as_binary_float32() -> None:
    vector = [0.5, -0.25, 1.0, 0.0, 0.125, 2.0, -1.0, 0.75]
    for pipeline in (
        mq.build_vector_search_pipeline(SCOPE, vector, 5, None, exact=False),
        mq.build_vector_search_pipeline(SCOPE, vector, 5, None, exact=True),
        mq.build_cosine_pipeline(SCOPE, vector, ["a", "b"]),
    ):
        sent = pipeline[0]["$vectorSearch"]["queryVector"]
        assert isinstance(sent, Binary) and sent.subtype == 9
        assert sent.as_vector().dtype == BinaryVectorDtype.FLOAT32
        assert sent.as_vector().data == pytest.approx(vector)
    probe = mq.build_probe_pipeline(SCOPE, "doc-1", 3, 4, DIM)[0]["$vectorSearch"]
    assert isinstance(probe["queryVector"], Binary)


# -- queryability is checked again -------------------------------------------------------------


def test_an_index_gone_after_the_first_query_is_noticed(tmp_path: Path, fake_clock: Any) -> None:
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.replace_source(SCOPE, "doc-1", [chunk("c1", unit(0), "text one")])
    cluster.settle()
    assert [h.chunk_id for h in chunks.query(SCOPE, unit(0), 3)] == ["c1"]
    listed = sum(r.method == "list_search_indexes" for r in cluster.reads)
    for _ in range(5):  # answered: not asked again within a minute
        chunks.query(SCOPE, unit(0), 3)
    assert sum(r.method == "list_search_indexes" for r in cluster.reads) == listed
    # an operator drops the index: $vectorSearch answers [] (Atlas's way), the scope holds chunks
    store.database[ix.chunk_collection(DIM)].drop_search_index(ix.VECTOR_INDEX)
    with pytest.raises(StoreError, match="does not exist; run"):
        chunks.query(SCOPE, unit(0), 3)
    # an empty scope answering empty is no reason to ask
    empty = RagScope("ta", "p", "rag-empty", DIM)
    store.initialize(dimensions=(DIM,))
    cluster.settle()
    listed = sum(r.method == "list_search_indexes" for r in cluster.reads)
    assert chunks.query(empty, unit(0), 3) == []
    assert chunks.query(empty, unit(0), 3) == []
    assert sum(r.method == "list_search_indexes" for r in cluster.reads) <= listed + 1


def test_queryability_is_asked_again_once_the_minute_is_over(
    tmp_path: Path, fake_clock: Any
) -> None:
    """A check is trusted for a minute (``queryable_ttl_s``'s default), then asked of the
    server again: a text index an operator dropped is noticed by the first text query after
    that minute, though nothing else would notice it (a text search finding none of the
    query's words is normal, so no empty answer triggers a re-check). The checks run on the
    double's clock (``SearchSupport``'s ``monotonic``), which the test moves."""
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.search = SearchSupport(
        chunks.search.db, chunks.search.search_db, mode="atlas", monotonic=fake_clock
    )
    chunks.replace_source(SCOPE, "doc-1", [chunk("c1", unit(0), "text one")])
    cluster.settle()

    def listed() -> int:
        return sum(r.method == "list_search_indexes" for r in cluster.reads)

    def text_query() -> list[str]:
        return [h.chunk_id for h in chunks.lexical_query(SCOPE, "one", 3, vector=unit(0))]

    assert text_query() == ["c1"]
    assert [h.chunk_id for h in chunks.query(SCOPE, unit(0), 3)] == ["c1"]
    before = listed()
    store.database[ix.chunk_collection(DIM)].drop_search_index(ix.TEXT_INDEX)
    fake_clock.advance(59.0)
    assert text_query() == []  # Atlas's answer on a missing index; the check is still trusted
    assert listed() == before
    fake_clock.advance(2.0)  # past the minute: both indexes are asked about again
    assert [h.chunk_id for h in chunks.query(SCOPE, unit(0), 3)] == ["c1"]
    assert listed() == before + 1
    with pytest.raises(StoreError, match="does not exist; run"):
        text_query()
    assert listed() == before + 2


# -- a chat turn has its own deadline -----------------------------------------------------------


def test_a_slow_search_skips_the_block_within_the_turn_deadline(make_app: Any, clock: Any) -> None:
    app, cluster = atlas_app(make_app, clock, turn_deadline_s=2.0)
    app.bring(T, P)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.documents.create(T, P, "documents/cats.md", "Cats purr when they are content.")
    app.scheduler.tick()
    cluster.settle()
    app.scheduler.tick()
    cluster.settle()
    assert app.rags.get(T, P, DEFAULT_RAG_NAME).embedding_dimension
    assert app.pre_turn(T, P, ["why do cats purr"]), "a quick search injects"
    cluster.search_latency_s = 10.0  # mongot overloaded: each search takes 10 s
    cluster.timeouts.clear()
    assert app.pre_turn(T, P, ["why do cats purr"]) == []  # skipped, the turn goes on
    assert cluster.timeouts and max(cluster.timeouts) <= 2.0  # not the client's 30 s
    decision = app.autoinject.decide(T, P, ["why do cats purr"])
    assert decision.block is None and "retrieval failed" in decision.reason
    # outside a turn (a tool call, an explicit query) the client's timeout applies
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    cluster.timeouts.clear()
    assert app.rags.query(rag, "cats purr", top_k=3)
    assert min(cluster.timeouts) > 2.0


# -- paths and source refs past Atlas's token limit ---------------------------------------------


def test_paths_and_source_refs_past_the_token_limit_are_refused_at_write() -> None:
    fine = "d/" + "x" * (ix.MAX_TOKEN_CHARS - 2)
    too_long = fine + "x"
    assert mq.chunk_documents(SCOPE, [Chunk("c", SCOPE.rag_id, fine, "t", unit(0), path=fine)])
    with pytest.raises(InvalidInputError, match="8,181"):
        mq.chunk_documents(SCOPE, [Chunk("c", SCOPE.rag_id, too_long, "t", unit(0))])
    with pytest.raises(InvalidInputError, match="path"):
        mq.chunk_documents(SCOPE, [Chunk("c", SCOPE.rag_id, "s", "t", unit(0), path=too_long)])


# -- metrics: the sweep backlog and the probe lag (item 9) -------------------------------------


def test_the_sweep_backlog_and_probe_lag_are_metrics(tmp_path: Path, fake_clock: Any) -> None:
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.replace_source(SCOPE, "doc-1", [chunk("v1", unit(0), "one")])
    fake_clock.advance(5.0)
    chunks.replace_source(SCOPE, "doc-1", [chunk("v2", unit(1), "two")])
    fake_clock.advance(0.05)  # v1's note is due (grace 0.1 s), v2's not yet

    def scrape() -> dict[str, float]:
        metrics = Metrics(state_ttl_s=0)
        metrics.watch_work(lambda: node_work_state(store.control, store.rebuilds, "n", chunks))
        found: dict[str, float] = {}
        for family in metrics.registry.collect():
            for sample in family.samples:
                if sample.name.startswith("vance_rag_mongo_"):
                    found[f"{sample.name}{sample.labels or ''}"] = sample.value
        return found

    assert scrape() == {
        "vance_rag_mongo_sweep_backlog{'state': 'due'}": 1,
        "vance_rag_mongo_sweep_backlog{'state': 'waiting'}": 1,
        "vance_rag_mongo_probe_lag_seconds": pytest.approx(5.05, abs=0.01),
    }
    cluster.settle()
    fake_clock.advance(1.0)
    chunks.sweep()
    assert scrape() == {
        "vance_rag_mongo_sweep_backlog{'state': 'due'}": 0,
        "vance_rag_mongo_sweep_backlog{'state': 'waiting'}": 0,
        "vance_rag_mongo_probe_lag_seconds": 0,
    }
    # a store without a sweep reports neither
    assert node_work_state(store.control, store.rebuilds, "n").sweep_backlog is None
