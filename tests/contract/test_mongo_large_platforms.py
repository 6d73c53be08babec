"""Atlas where large platforms run it, on the Atlas double: large RAGs (bounded
visibility probes, source listings past 16 MB), many workers (the sweep leased and bounded),
Search Nodes (safe defaults) and sharded clusters (every write carries the shard key)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from atlas_double import AtlasCluster
from mongo_support import ATLAS_BUILD_S, ATLAS_LAG_S, ATLAS_SEARCH_GRACE_S, atlas_store
from pymongo.errors import OperationFailure
from test_mongo_atlas_scale import DIM, SCOPE, opened, unit

from vancetope_rag.domain.records import Chunk
from vancetope_rag.domain.retrieval.ranking import FusionParams
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.port.types import RagScope


def chunk(cid: str, source: str, text: str = "text", scope: RagScope = SCOPE) -> Chunk:
    return Chunk(cid, scope.rag_id, source, text, unit(len(cid)))


def probe_sources(cluster: AtlasCluster) -> list[list[str]]:
    """The sources each ``$vectorSearch`` visibility probe asked about, in order."""
    asked = []
    for stage in cluster.searches:
        vector = stage.get("$vectorSearch")
        if vector and vector.get("exact"):
            for clause in vector.get("filter", {}).get("$and", []):
                if "sourceRef" in clause and "$in" in clause["sourceRef"]:
                    asked.append(list(clause["sourceRef"]["$in"]))
    return asked


# -- large RAGs ---------------------------------------------------------------------------


def test_the_visibility_probe_of_a_large_rag_asks_a_bounded_sample(
    tmp_path: Path, fake_clock: Any
) -> None:
    """A switch attempt probes at most ``probe_chunks`` chunks' sources, newest versions first
    (mongot applies writes in order, so the newest written shown means the older ones are):
    a source written last and not yet shown holds the switch; once shown, it goes."""
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.search.probe_chunks = 10
    for i in range(30):
        chunks.add_chunks(SCOPE, [chunk(f"c{i}", f"s{i:02d}")])
    cluster.settle()
    chunks.add_chunks(SCOPE, [chunk("late", "s99")])  # written last, search lags it
    cluster.searches.clear()
    assert not chunks.visible(SCOPE)
    asked = probe_sources(cluster)
    assert asked and all(len(group) <= 10 for group in asked)
    assert sum(len(group) for group in asked) <= 10 and "s99" in asked[0]
    cluster.settle()
    assert not chunks.visible(SCOPE)  # first seen now: the grace starts
    fake_clock.advance(chunks.search_grace_s + 0.1)
    cluster.searches.clear()
    assert chunks.visible(SCOPE)
    assert sum(len(group) for group in probe_sources(cluster)) <= 10


def test_the_sources_of_a_rag_past_16_mb_of_names_are_listed(
    tmp_path: Path, fake_clock: Any
) -> None:
    """``distinct`` answers in one BSON document (16 MB: about 350k source refs); the
    listing aggregates, which pages through a cursor. The double caps ``distinct`` as the
    server does, here at 2 KB."""
    store, cluster = opened(tmp_path, fake_clock)
    cluster.max_bson_size = 2048
    refs = [f"folder/some-long-file-name-{i:04d}.md" for i in range(200)]
    store.chunks.add_chunks(SCOPE, [chunk(f"c{i}", ref) for i, ref in enumerate(refs)])
    assert store.chunks.source_refs(SCOPE) == sorted(refs)


# -- many workers ----------------------------------------------------------------------------


def second_worker(cluster: AtlasCluster, clock: Any) -> MongoChunkStore:
    """Another process's chunk store on the same cluster."""
    other = open_mongo_store(
        "mongodb://atlas.example.net/vancetope_rag_test",
        clock=clock,
        client=cluster.client(),
        server_clock=False,
        search_grace_s=ATLAS_SEARCH_GRACE_S,
    )
    assert isinstance(other.chunks, MongoChunkStore)
    return other.chunks


def replaced_sources(store: MongoStore, n: int, tag: str = "") -> None:
    """``n`` new sources written, then each replaced: ``n`` swap notes."""
    for i in range(n):
        store.chunks.add_chunks(SCOPE, [chunk(f"a{tag}{i}", f"s{tag}{i:03d}")])
    for i in range(n):
        store.chunks.replace_source(
            SCOPE, f"s{tag}{i:03d}", [chunk(f"b{tag}{i}", f"s{tag}{i:03d}")]
        )


def test_the_sweep_is_leased_one_worker_per_dimension(tmp_path: Path, fake_clock: Any) -> None:
    """Two workers sweep each tick: the lease holder probes, the other does nothing, until
    the holder stops ticking for longer than the lease; then the other takes over."""
    store, cluster = opened(tmp_path, fake_clock)
    first, second = store.chunks, second_worker(cluster, fake_clock)
    assert isinstance(first, MongoChunkStore)
    replaced_sources(store, 3)
    cluster.settle()
    fake_clock.advance(ATLAS_SEARCH_GRACE_S + 0.1)
    assert first.sweep() == 3
    replaced_sources(store, 2, "x")
    cluster.settle()
    fake_clock.advance(ATLAS_SEARCH_GRACE_S + 0.1)
    cluster.searches.clear()
    assert second.sweep() == 0 and cluster.searches == []  # held by the first: no probe
    assert first.sweep() == 2
    replaced_sources(store, 1, "y")
    cluster.settle()
    fake_clock.advance(first.sweep_lease_s + 0.1)  # the first worker stopped ticking
    assert second.sweep() == 1
    assert first.sweep() == 0  # now the second one's


def test_a_sweep_handles_a_bounded_number_of_notes(tmp_path: Path, fake_clock: Any) -> None:
    """A backlog larger than a tick's share is worked off over several ticks."""
    store, cluster = opened(tmp_path, fake_clock)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.sweep_max_notes = 4
    replaced_sources(store, 10)
    cluster.settle()
    fake_clock.advance(ATLAS_SEARCH_GRACE_S + 0.1)
    assert [chunks.sweep(limit=3) for _ in range(4)] == [4, 4, 2, 0]


def slow_node_cluster(clock: Any) -> AtlasCluster:
    """Two search nodes; the second ends every build an hour after the first."""
    return AtlasCluster(
        clock=clock,
        lag_s=ATLAS_LAG_S,
        build_s=ATLAS_BUILD_S,
        search_nodes=(ATLAS_LAG_S, ATLAS_LAG_S),
        build_delays=(0.0, 3600.0),
    )


def test_a_building_search_node_holds_indexing_for_a_bound_only(
    tmp_path: Path, fake_clock: Any
) -> None:
    """A new dimension's indexes: the first node serves them after the build, the second
    builds for an hour. Indexing waits for the first node, then for the second for
    ``node_hold_s`` (5 minutes), not the hour."""
    store, _ = opened(tmp_path, fake_clock, cluster=slow_node_cluster(fake_clock))
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.search._monotonic = fake_clock
    chunks.prepare_dimension(16)
    assert not chunks.dimension_ready(16)  # building on every node
    fake_clock.advance(ATLAS_BUILD_S + 0.1)
    assert not chunks.dimension_ready(16)  # the second node still builds: first seen now
    fake_clock.advance(chunks.search.node_hold_s - 1.0)
    assert not chunks.dimension_ready(16)
    fake_clock.advance(2.0)
    assert chunks.dimension_ready(16)  # the bound is over: indexing goes on


def test_readiness_is_asked_again_after_an_index_update(tmp_path: Path, fake_clock: Any) -> None:
    """A worker that found a dimension ready asks again a minute later: an index update
    since (an analyzer change) holds its indexing as it holds a newly started worker's."""
    store, _ = opened(tmp_path, fake_clock, cluster=slow_node_cluster(fake_clock))
    fake_clock.advance(3600.0)  # the indexes init made are built on both nodes
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    chunks.search._monotonic = fake_clock
    assert chunks.dimension_ready(DIM)
    collection = store.database[ix.chunk_collection(DIM)]
    definition = ix.text_index_definition()
    definition["analyzers"][0]["tokenFilters"] = definition["analyzers"][0]["tokenFilters"][:2]
    collection.update_search_index(ix.TEXT_INDEX, definition)
    assert chunks.dimension_ready(DIM)  # trusted for a minute
    fake_clock.advance(chunks.search.ready_ttl_s + 0.1)
    assert not chunks.dimension_ready(DIM)  # the second node builds the new definition
    fake_clock.advance(chunks.search.node_hold_s + 0.1)
    assert chunks.dimension_ready(DIM)


# -- sharded clusters ------------------------------------------------------------------------


def sharded_cluster(clock: Any, **options: Any) -> AtlasCluster:
    return AtlasCluster(
        clock=clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S, sharded=True, **options
    )


def test_init_shards_the_chunk_collections_and_says_so(tmp_path: Path, fake_clock: Any) -> None:
    """On a sharded cluster ``init`` shards every chunk collection on the shard key (never
    constant within a RAG), and a RAG of a new dimension gets a sharded collection too."""
    store, cluster = opened(tmp_path, fake_clock, cluster=sharded_cluster(fake_clock))
    key = {"tenantId": 1, "projectId": 1, "ragId": 1, "chunkId": 1}
    assert cluster.shard_keys[("vancetope_rag_test", f"chunks_{DIM}")] == key
    statuses = store.initialize()
    sharded = [s for s in statuses if s.kind == "shard"]
    assert sharded and all(
        s.status == "SHARDED" and "sh.shardCollection" in s.detail for s in sharded
    )
    store.chunks.prepare_dimension(24)
    assert cluster.shard_keys[("vancetope_rag_test", "chunks_24")] == key


def test_without_the_privilege_init_prints_the_commands(tmp_path: Path, fake_clock: Any) -> None:
    cluster = sharded_cluster(fake_clock, denied=frozenset({"shardCollection"}))
    store, _ = opened(tmp_path, fake_clock, cluster=cluster)
    assert cluster.shard_keys == {}
    (status, *_) = [s for s in store.initialize() if s.kind == "shard"]
    assert status.status == "NOT_SHARDED" and not status.ready
    assert 'sh.shardCollection("vancetope_rag_test.chunks_8", { tenantId: 1, projectId: 1, ' in (
        status.detail
    )


def test_the_sharded_double_refuses_writes_without_the_shard_key(
    tmp_path: Path, fake_clock: Any
) -> None:
    """The double refuses as mongos does, so the contract suite's ``atlas-sharded`` run proves
    every write of the adapter carries the shard key."""
    store, _ = opened(tmp_path, fake_clock, cluster=sharded_cluster(fake_clock))
    collection = store.database[ix.chunk_collection(DIM)]
    with pytest.raises(OperationFailure, match="shard key"):
        collection.insert_one({"_id": "x", "tenantId": "t", "ragId": "r"})
    with pytest.raises(OperationFailure, match="could not extract exact shard key"):
        collection.update_one({"chunkId": "c"}, {"$set": {"text": "x"}}, upsert=True)
    with pytest.raises(OperationFailure, match="must contain an exact match on _id"):
        collection.delete_one({"chunkId": "c"})
    collection.delete_many({"ragId": "r"})  # a broadcast is allowed


# -- Search Nodes ----------------------------------------------------------------------------


def test_node_preference_is_on_by_default(fake_clock: Any) -> None:
    from vancetope_rag.config import EngineConfig

    assert EngineConfig().mongo_options()["search_node_preference"] is True
    cluster = AtlasCluster(clock=fake_clock, search_nodes=(0.05, 15.0), build_s=ATLAS_BUILD_S)
    assert second_worker(cluster, fake_clock).search.node_preference  # opened with defaults


def test_a_rags_turns_spread_over_nodes_and_never_show_zero_chunks(
    tmp_path: Path, fake_clock: Any
) -> None:
    """Two search nodes, one lagging 15 s past a 10 s grace, the defaults: each turn reads
    one node (both of its searches), turns of one RAG go to both nodes, and the sweep waits
    until both show the new version, so no turn sees the source without chunks."""
    cluster = AtlasCluster(clock=fake_clock, search_nodes=(0.05, 15.0), build_s=ATLAS_BUILD_S)
    store, _ = atlas_store(
        tmp_path, fake_clock, cluster=cluster, search_grace_s=10.0, search_node_preference=True
    )
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    rag = next(
        f"rag-{i}"
        for i in range(100)
        if {cluster.node_for(f"rag-{i}"), cluster.node_for(f"rag-{i}#1")} == {0, 1}
    )
    scope = RagScope("ta", "p", rag, DIM)

    def version(name: str) -> list[Chunk]:
        return [Chunk(f"{name}-{k}", rag, "doc-1", f"{name} text", unit(k)) for k in range(2)]

    chunks.replace_source(scope, "doc-1", version("old"))
    cluster.settle()
    fake_clock.advance(20.0)
    chunks.replace_source(scope, "doc-1", version("new"))
    seen, turn_nodes = [], []
    for _ in range(60):
        fake_clock.advance(0.5)
        chunks.sweep()
        cluster.routes.clear()
        with chunks.snapshot():
            hits = chunks.hybrid_query(scope, "text", unit(0), 10, fusion=FusionParams())
        turn_nodes.append(set(cluster.routes))
        seen.append(sorted({h.chunk_id.split("-")[0] for h in hits.hits}))
    assert all(s in (["old"], ["new"]) for s in seen), seen
    assert seen[-1] == ["new"]
    assert all(len(nodes) == 1 for nodes in turn_nodes)  # one node per turn
    assert set().union(*turn_nodes) == {0, 1}  # the RAG's turns spread over both


def test_several_search_nodes_unpinned_are_warned_about_once(
    tmp_path: Path, fake_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = AtlasCluster(clock=fake_clock, search_nodes=(0.05, 15.0), build_s=ATLAS_BUILD_S)
    store, _ = atlas_store(tmp_path, fake_clock, cluster=cluster, search_node_preference=False)
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    for _ in range(3):
        chunks.search.forget(DIM)
        chunks.dimension_ready(DIM)
    warned = [r for r in caplog.records if "can show a source with no chunks" in r.message]
    assert len(warned) == 1


def test_the_grace_grows_to_the_lag_the_sweep_observes(
    tmp_path: Path, fake_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Searched without node preference, a node lagging 15 s past a 10 s grace: a due chunk
    version the probe does not see yet lengthens the grace to the lag observed (warned once),
    so the sweep waits as long as search lags and no query sees the source without chunks."""
    cluster = AtlasCluster(clock=fake_clock, search_nodes=(0.05, 15.0), build_s=ATLAS_BUILD_S)
    store, _ = atlas_store(
        tmp_path, fake_clock, cluster=cluster, search_grace_s=10.0, search_node_preference=False
    )
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    replaced_sources(store, 1)
    cluster.settle()
    fake_clock.advance(20.0)
    chunks.sweep()
    chunks.replace_source(SCOPE, "s000", [chunk("c-new", "s000")])
    turns = itertools.cycle([0, 0, 1])  # probes and queries land on both nodes
    cluster.pick = lambda: next(turns)
    seen = []
    for _ in range(60):
        fake_clock.advance(0.5)
        chunks.sweep()
        seen.append(sorted(h.chunk_id for h in chunks.query(SCOPE, unit(0), 10)))
    assert all(s for s in seen), "a query saw the source without chunks"
    assert chunks.effective_grace_s() > 14.0
    warned = [r for r in caplog.records if "past the search grace" in r.message]
    assert len(warned) == 1
