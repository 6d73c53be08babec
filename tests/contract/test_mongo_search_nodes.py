"""Atlas with several search nodes, on the Atlas double: one node lagging 0.05 s, one 5 or 15 s.

What a probe on one node may not say about another: the sweep, the rebuild switch and the
text probe wait for what the queries' node shows (the search grace, or ``searchNodePreference``
routing a RAG's probes and queries to one node); the sweep queue never stalls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from atlas_double import AtlasCluster
from mongo_support import ATLAS_BUILD_S, atlas_store

from vancetope_rag.domain.records import Chunk
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import sweep as ms
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore
from vancetope_rag.store.port.types import RagScope

DIM = 8
FAST, SLOW = 0, 1


def unit(i: int) -> list[float]:
    v = [0.0] * DIM
    v[i % DIM] = 1.0
    return v


def version_of(
    scope: RagScope, name: str, n: int = 2, source: str = "doc-1", i: int = 0
) -> list[Chunk]:
    return [
        Chunk(f"{name}-{k}", scope.rag_id, source, f"{name} text", unit(i + k)) for k in range(n)
    ]


def two_nodes(
    tmp_path: Path,
    clock: Any,
    *,
    slow_lag: float,
    grace: float,
    preference: bool = False,
    **options: Any,
) -> tuple[MongoChunkStore, AtlasCluster]:
    cluster = AtlasCluster(
        clock=clock, search_nodes=(0.05, slow_lag), build_s=ATLAS_BUILD_S, **options
    )
    store, _ = atlas_store(
        tmp_path, clock, cluster=cluster, search_grace_s=grace, search_node_preference=preference
    )
    assert isinstance(store, MongoStore) and isinstance(store.chunks, MongoChunkStore)
    store.chunks.search.node_spread = 1  # pinned to the node the RAG id names
    return store.chunks, cluster


def on_node(cluster: AtlasCluster, node: int) -> None:
    """Send searches without a node preference to ``node``."""
    cluster.pick = lambda: node


def chunk_ids(hits: Any) -> list[str]:
    return sorted(h.chunk_id for h in hits)


def scope_on(cluster: AtlasCluster, node: int) -> RagScope:
    """A scope whose RAG id ``searchNodePreference`` routes to ``node``."""
    rag_id = next(f"rag-{i}" for i in range(100) if cluster.node_for(f"rag-{i}") == node)
    return RagScope("ta", "p", rag_id, DIM)


# -- 1. the sweep trusts only due chunk versions ------------------------------------------------


def test_a_source_replaced_twice_keeps_what_the_slow_node_shows(
    tmp_path: Path, fake_clock: Any
) -> None:
    """v2 written 10 s ago (due), v3 0.1 s ago; the probe on the fast node sees v3 at once.
    Only v1 may go: the node lagging 5 s still shows v2 (deleting it too left zero chunks)."""
    chunks, cluster = two_nodes(tmp_path, fake_clock, slow_lag=5.0, grace=10.0)
    scope = RagScope("ta", "p", "rag-a", DIM)
    chunks.replace_source(scope, "doc-1", version_of(scope, "v1"))
    cluster.settle()
    fake_clock.advance(10.0)
    chunks.sweep()
    chunks.replace_source(scope, "doc-1", version_of(scope, "v2", i=2))
    fake_clock.advance(9.9)
    chunks.replace_source(scope, "doc-1", version_of(scope, "v3", i=4))
    fake_clock.advance(0.1)
    on_node(cluster, FAST)
    assert chunks.sweep() == 2  # v1's two chunks
    on_node(cluster, SLOW)
    assert chunk_ids(chunks.query(scope, unit(0), 10)) == ["v2-0", "v2-1"]
    fake_clock.advance(10.0)
    on_node(cluster, FAST)
    assert chunks.sweep() == 2  # v2, now that v3 is due too
    on_node(cluster, SLOW)
    assert chunk_ids(chunks.query(scope, unit(0), 10)) == ["v3-0", "v3-1"]
    assert chunks.swaps.count_documents({}) == 0


@pytest.mark.parametrize("node", [FAST, SLOW])
def test_with_node_preference_a_node_lagging_past_the_grace_never_shows_zero(
    tmp_path: Path, fake_clock: Any, node: int
) -> None:
    """The node lagging 15 s is past the 10 s grace; pinned by ``searchNodePreference``, a RAG's
    probes and queries read one node, so the sweep waits for what that node shows."""
    chunks, cluster = two_nodes(tmp_path, fake_clock, slow_lag=15.0, grace=10.0, preference=True)
    scope = scope_on(cluster, node)
    chunks.replace_source(scope, "doc-1", version_of(scope, "old"))
    cluster.settle()
    chunks.replace_source(scope, "doc-1", version_of(scope, "new", i=2))
    seen = []
    for _ in range(40):
        fake_clock.advance(0.5)
        chunks.sweep()
        seen.append(chunk_ids(chunks.query(scope, unit(0), 10)))
    assert all(s in (["old-0", "old-1"], ["new-0", "new-1"]) for s in seen), seen
    assert seen[-1] == ["new-0", "new-1"]
    stages = [next(iter(s.values())) for s in cluster.searches]
    assert stages and all(s["searchNodePreference"] == {"key": scope.rag_id} for s in stages)
    assert set(cluster.routes) == {node}


def test_a_cluster_refusing_node_preference_is_searched_without_it(
    tmp_path: Path, fake_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    chunks, cluster = two_nodes(
        tmp_path, fake_clock, slow_lag=0.05, grace=0.1, preference=True, node_preference=False
    )
    scope = RagScope("ta", "p", "rag-a", DIM)
    chunks.add_chunks(scope, version_of(scope, "a"))
    cluster.settle()
    assert chunk_ids(chunks.query(scope, unit(0), 3)) == ["a-0", "a-1"]
    assert chunk_ids(chunks.lexical_query(scope, "text", 3, vector=unit(0))) == ["a-0", "a-1"]
    assert "refuses searchNodePreference" in caplog.text
    text = [s["$search"] for s in cluster.searches if "$search" in s]
    assert "searchNodePreference" not in text[-1]  # asked once only
    assert sum("searchNodePreference" in next(iter(s.values())) for s in cluster.searches) == 1


# -- 1. the rebuild switch waits the grace ------------------------------------------------------


def test_a_rebuilt_generation_goes_live_only_a_grace_after_search_first_shows_it(
    tmp_path: Path, fake_clock: Any
) -> None:
    """Seen entirely on the fast node 0.1 s after the writes, the new generation would answer
    ``[]`` on the node lagging 5 s if it went live then; it waits 10 s from that sighting, and
    a write meanwhile restarts the wait."""
    chunks, cluster = two_nodes(tmp_path, fake_clock, slow_lag=5.0, grace=10.0)
    shadow = RagScope("ta", "p", "rag-shadow", DIM)
    chunks.replace_source(shadow, "doc-1", version_of(shadow, "a"))
    fake_clock.advance(0.1)
    on_node(cluster, FAST)
    assert chunks.visible(shadow) is False  # first sighting: the grace starts
    on_node(cluster, SLOW)
    assert chunks.query(shadow, unit(0), 3) == []  # what going live now would have shown
    fake_clock.advance(6.0)
    chunks.add_chunks(shadow, version_of(shadow, "b", source="doc-2", i=3))  # a late write
    fake_clock.advance(4.0)
    on_node(cluster, FAST)
    assert chunks.visible(shadow) is False  # changed since the first sighting: starts again
    fake_clock.advance(10.0)
    assert chunks.visible(shadow) is True
    on_node(cluster, SLOW)
    assert len(chunks.query(shadow, unit(0), 10)) == 4


# -- 1. the text probe does not depend on what this process queried ---------------------------


def test_a_worker_that_never_ran_a_lexical_query_probes_the_text_index_too(
    tmp_path: Path, fake_clock: Any
) -> None:
    """The text index lags 1 s more than the vector index; a fresh worker's sweep must not let
    the old chunks go while ``$search`` still shows only them."""
    chunks, cluster = two_nodes(tmp_path, fake_clock, slow_lag=0.05, grace=0.1, text_lag_s=1.0)
    scope = RagScope("ta", "p", "rag-a", DIM)
    chunks.replace_source(scope, "doc-1", version_of(scope, "old"))
    worker, _ = atlas_store(tmp_path, fake_clock, cluster=cluster, search_grace_s=0.1)
    assert isinstance(worker.chunks, MongoChunkStore)  # a fresh process (opening settles)
    chunks.replace_source(scope, "doc-1", version_of(scope, "new", i=2))
    fake_clock.advance(0.2)  # due, and seen by $vectorSearch on both nodes; not by $search
    assert worker.chunks.sweep() == 0
    assert chunk_ids(chunks.lexical_query(scope, "text", 5, vector=unit(0))) == ["old-0", "old-1"]
    fake_clock.advance(1.0)
    assert worker.chunks.sweep() == 2
    assert chunk_ids(chunks.lexical_query(scope, "text", 5, vector=unit(0))) == ["new-0", "new-1"]


# -- 5. the sweep queue never stalls ------------------------------------------------------------


def test_notes_whose_version_never_landed_do_not_stall_the_sweep(
    tmp_path: Path, fake_clock: Any
) -> None:
    """150 notes of chunk versions that never landed (writers that crashed) sit at the head of
    the queue; a due swap behind them is still swept, they are rescheduled, and they expire."""
    chunks, cluster = two_nodes(tmp_path, fake_clock, slow_lag=0.05, grace=0.1)
    scope = RagScope("ta", "p", "rag-a", DIM)
    for i in range(150):
        chunks.swaps.insert_one(
            {
                "tenantId": "ta",
                "projectId": "p",
                "ragId": "rag-a",
                "sourceRef": f"crashed-{i}",
                "dim": DIM,
                "gen": chunks.next_chunk_version(),
                "at": chunks._instant(),
            }
        )
    fake_clock.advance(1.0)
    chunks.replace_source(scope, "doc-1", version_of(scope, "old"))
    chunks.replace_source(scope, "doc-1", version_of(scope, "new", i=2))
    cluster.settle()
    assert chunks.sweep() == 2  # behind 150 stuck notes, in pages of 100
    assert chunk_ids(chunks.get_chunks(scope)) == ["new-0", "new-1"]
    rescheduled = list(chunks.swaps.find({"sourceRef": {"$regex": "^crashed-"}}))
    assert len(rescheduled) == 150 and all(n["at"] > n["since"] for n in rescheduled)
    assert chunks.sweep() == 0 and chunks.swaps.count_documents({}) == 150  # not due yet
    fake_clock.advance(ms.UNLANDED_EXPIRY_S)
    chunks.sweep()
    assert chunks.swaps.count_documents({}) == 0


def test_the_sweep_plan_of_a_source() -> None:
    from datetime import datetime

    at = datetime(2026, 1, 1)

    def notes(*versions: int) -> list[ms.Note]:
        return [ms.Note(f"n{v}", v, at, at) for v in versions]

    plan = ms.plan_source(notes(2, 5, 9), {1, 2, 3, 5})
    assert (plan.target, plan.probe, plan.covered) == (5, True, ["n2", "n5"])
    assert plan.superseded == [] and [n.version for n in plan.unlanded] == [9]
    plan = ms.plan_source(notes(2), {2})  # nothing older: no probe
    assert (plan.target, plan.probe, plan.covered) == (2, False, ["n2"])
    plan = ms.plan_source(notes(2), {3})  # superseded by a newer write
    assert (plan.target, plan.superseded, plan.unlanded) == (None, ["n2"], [])
    plan = ms.plan_source(notes(4), set())  # the source is empty: nothing landed
    assert plan.target is None and [n.version for n in plan.unlanded] == [4]
    assert ms.due_notes_filter(at, (at, "x"))["$or"][1] == {"at": at, "_id": {"$gt": "x"}}


def test_the_swap_notes_are_indexed_for_the_due_query(tmp_path: Path, fake_clock: Any) -> None:
    chunks, _ = two_nodes(tmp_path, fake_clock, slow_lag=0.05, grace=0.1)
    info = chunks.swaps.index_information()
    assert info[ix.DUE_INDEX]["key"] == [(k, 1) for k in ix.DUE_INDEX_KEYS]


# -- 6. READY on every search node ----------------------------------------------------------------


def test_init_wait_waits_for_every_search_node_and_fails_fast_on_stale(fake_clock: Any) -> None:
    """The second node builds 10 s longer; the top-level status reads READY before it ends."""
    from vancetope_rag.errors import StoreError
    from vancetope_rag.store.mongo.client import open_mongo_store

    cluster = AtlasCluster(
        clock=fake_clock, search_nodes=(0.05, 0.05), build_s=ATLAS_BUILD_S, build_delays=(0, 10.0)
    )
    store = open_mongo_store(
        "mongodb://atlas.example.net/vancetope_rag_test",
        clock=fake_clock,
        client=cluster.client(),
        server_clock=False,
    )
    store.sleep, store.monotonic = fake_clock.advance, fake_clock
    start = fake_clock.now
    statuses = store.initialize(dimensions=[DIM], wait=True, timeout_s=60)
    assert all(s.ready for s in statuses)
    assert fake_clock.now >= start + ATLAS_BUILD_S + 10.0  # the slow node's build ended
    cluster.stale_index("vancetope_rag_test", "chunks_8", ix.TEXT_INDEX)
    before = fake_clock.now
    with pytest.raises(StoreError, match="is STALE"):
        store.initialize(dimensions=[DIM], wait=True, timeout_s=600)
    assert fake_clock.now == before  # no waiting out the timeout
    assert not chunks_ready(store)


def chunks_ready(store: MongoStore) -> bool:
    assert isinstance(store.chunks, MongoChunkStore)
    store.chunks.search.forget(DIM)
    return store.chunks.dimension_ready(DIM)


# -- the settings -----------------------------------------------------------------------------


def test_the_engine_settings_reach_the_store(
    fake_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.store.mongo.client import open_mongo_store

    monkeypatch.setenv("VANCETOPE_RAG_MONGO_SEARCH_GRACE_S", "60")
    monkeypatch.setenv("VANCETOPE_RAG_MONGO_SEARCH_NODE_PREFERENCE", "true")
    options = EngineConfig().mongo_options()
    assert options == {
        "search_grace_s": 60.0,
        "search_node_preference": True,
        "exact_max_chunks": 20_000,
    }
    cluster = AtlasCluster(clock=fake_clock, search_nodes=(0.05, 15.0), build_s=ATLAS_BUILD_S)
    store = open_mongo_store(
        "mongodb://atlas.example.net/vancetope_rag_test",
        clock=fake_clock,
        client=cluster.client(),
        server_clock=False,
        **options,
    )
    chunks = store.chunks
    assert isinstance(chunks, MongoChunkStore)
    assert chunks.search_grace_s == 60.0 and chunks.search.node_preference is True
    monkeypatch.setenv("VANCETOPE_RAG_MONGO_SEARCH_GRACE_S", "-1")
    with pytest.raises(ValueError, match="MONGO_SEARCH_GRACE_S"):
        EngineConfig()
