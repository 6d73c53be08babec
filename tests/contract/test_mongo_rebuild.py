"""Rebuilds on MongoDB: the lagging Atlas double (the switch waits for search), mongomock, a
switch a crash interrupted, and a schema-2 store upgraded on open."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import mongomock
import pytest
from mongo_support import ATLAS_SEARCH_GRACE_S, atlas_app

from fakes import DOCS, P, T
from turnloop import TurnLoop, check_turns, seed
from vancetope_rag.app import RagApp
from vancetope_rag.domain.rebuilds import RebuildState
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, RagState
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.mongo.setup import SCHEMA_VERSION
from vancetope_rag.store.port.types import RagScope

AppFactory = Callable[..., RagApp]
N_DOCS = len(DOCS) + 6


def test_turns_while_rebuilding_on_the_lagging_atlas_double(
    make_app: AppFactory, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new generation becomes live only once search has shown all of it for the grace:
    with every document written but not yet searchable, and when first seen, turns still
    come from the old one; a grace later the switch happens, and turns come from the new
    one, never empty."""
    app, cluster = atlas_app(make_app, clock, indexer_batch_size=2)
    app.init_store(dimensions=[256], wait=True)
    seed(app)
    cluster.settle()
    app.scheduler.run_until_idle(timeout_s=30)
    cluster.settle()
    old = app.project_rags.find_default_rag(T, P)
    assert old is not None
    loop = TurnLoop(app, monkeypatch)
    loop.start()
    loop.wait_for(5)

    app.settings.set(T, None, "ai.embedding.model", "hashing-128")
    migration = app.project_rags.reindex(T, P, rebuild=True).migration
    assert migration is not None
    skipped = app.scheduler.tick()  # a new dimension: its search indexes are building
    assert skipped.claimed == 0
    cluster.settle()
    for _ in range(20):
        app.scheduler.tick()
        loop.wait_for(2)
        counts = app.store.rebuilds.item_counts(migration.id)
        if counts["done"] == N_DOCS:
            break
    assert app.store.rebuilds.item_counts(migration.id)["done"] == N_DOCS
    app.scheduler.tick()  # written, but search has not seen the last ones: no switch
    assert app.project_rags.find_default_rag(T, P) == old
    assert app.rebuilds.active(T, P) is not None
    loop.wait_for(3)
    cluster.settle()
    app.scheduler.tick()  # search shows all of it: first sighting, the grace starts
    assert app.project_rags.find_default_rag(T, P) == old
    loop.wait_for(2)
    clock.advance(ATLAS_SEARCH_GRACE_S)
    switch_began = time.monotonic()
    app.scheduler.tick()
    switched = time.monotonic()
    live = app.project_rags.find_default_rag(T, P)
    assert live is not None and live.id == migration.to_rag_id
    loop.wait_for(8)
    turns = loop.stop()

    check_turns(turns, old.id, migration.to_rag_id, switch_began, switched)
    assert app.rags.chunk_count(live) == N_DOCS
    # the switch asked search (exact probes over groups of sources) before it happened
    probes = [
        s["$vectorSearch"]
        for s in cluster.searches
        if "$vectorSearch" in s
        and "$in" in s["$vectorSearch"]["filter"]["$and"][-1].get("sourceRef", {})
    ]
    assert probes and all(p["exact"] and p["queryVector"] == [1.0] * 128 for p in probes)
    # retired, not gone: a turn that looked it up before the switch still found its chunks
    retired = app.store.rebuilds.get_any_rag(T, P, old.id)
    assert retired is not None and retired.state is RagState.RETIRED
    assert app.rags.get(T, P, DEFAULT_RAG_NAME).id == live.id


def test_a_switch_a_crash_interrupted_is_finished_by_the_next_tick(
    make_app: AppFactory, clock: Any
) -> None:
    """Killed after the pointer flip, before the bookkeeping: readers already use the new
    generation; the next tick completes the migration and retires the old one, once."""
    store = open_mongo_store(
        "mongodb://localhost/rag",
        clock=clock,
        client=mongomock.MongoClient(),
        vector_search="exact",
    )
    app = make_app(store=store, clock=clock, config={"retired_grace_s": 0})
    seed(app)
    app.scheduler.run_until_idle(timeout_s=30)
    old = app.project_rags.find_default_rag(T, P)
    assert old is not None
    app.settings.set(T, None, "ai.embedding.model", "hashing-64")
    m = app.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    assert isinstance(store, MongoStore)
    real_switch = store.rebuilds.switch_live
    catalog = store.control.catalog  # type: ignore[attr-defined]

    def crash_after_flip(migration: Any) -> bool:
        store.rebuilds.end_rebuild(
            migration, state=RebuildState.SWITCHING, expected=[RebuildState.RUNNING]
        )
        catalog.flip(T, P, DEFAULT_RAG_NAME, migration.from_rag_id, migration.to_rag_id)
        raise KeyboardInterrupt("kill -9")

    store.rebuilds.switch_live = crash_after_flip  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        app.scheduler.run_until_idle(timeout_s=30)
    store.rebuilds.switch_live = real_switch  # type: ignore[method-assign]
    live = app.project_rags.find_default_rag(T, P)
    assert live is not None and live.id == m.to_rag_id  # the flip is what readers see
    assert [g.state for g in store.rebuilds.rag_generations(T, P)] == [
        RagState.RETIRED,
        RagState.LIVE,
    ]  # old: stored "live", the pointer moved on
    assert app.store.rebuilds.get_rebuild(T, P, m.id).state is RebuildState.SWITCHING  # type: ignore[union-attr]
    with pytest.raises(Exception, match="switching over"):
        app.project_rags.cancel_rebuild(T, P)
    app.scheduler.tick()
    ended = app.store.rebuilds.get_rebuild(T, P, m.id)
    assert ended is not None and ended.state is RebuildState.COMPLETED
    assert [g.id for g in store.rebuilds.rag_generations(T, P)] == [m.to_rag_id]
    assert app.rags.chunk_count(live) == N_DOCS
    assert store.database[ix.RAG_NAMES].count_documents({}) == 1


def test_a_schema_2_store_gets_its_live_pointers_on_open(clock: Any) -> None:
    """Stores written before generations existed: one unique name index on ``rags`` and no
    pointers. Opening one drops the index and points each name at its RAG."""
    client = mongomock.MongoClient()
    db = client["rag"]
    db["schema"].insert_one({"_id": "vancetope_rag", "version": 2})
    db["rags"].create_index(
        [("tenantId", 1), ("projectId", 1), ("name", 1)], name=ix.LEGACY_RAG_NAME_INDEX, unique=True
    )
    db["rags"].insert_one(
        {
            "_id": "r1",
            "tenantId": T,
            "projectId": P,
            "name": "kb",
            "embeddingProvider": "hashing",
            "embeddingModel": "hashing-8",
            "embeddingDimension": 8,
            "chunkSize": 100,
            "chunkOverlap": 10,
        }
    )
    store = open_mongo_store(
        "mongodb://localhost/rag", clock=clock, client=client, vector_search="exact"
    )
    rag = store.control.find_rag(T, P, "kb")
    assert rag is not None and (rag.id, rag.state, rag.generation) == ("r1", RagState.LIVE, 1)
    assert [r.id for r in store.control.list_rags(T, P)] == ["r1"]
    assert ix.LEGACY_RAG_NAME_INDEX not in db["rags"].index_information()
    assert db["schema"].find_one()["version"] == SCHEMA_VERSION
    again = open_mongo_store(
        "mongodb://localhost/rag", clock=clock, client=client, vector_search="exact"
    )
    assert again.control.find_rag(T, P, "kb") == rag
    assert db[ix.RAG_NAMES].count_documents({}) == 1


def test_a_pointer_left_dangling_is_taken_over(clock: Any) -> None:
    """Spec §10: the RAG deleted by hand (direct database access) is re-created."""
    store = open_mongo_store(
        "mongodb://localhost/rag",
        clock=clock,
        client=mongomock.MongoClient(),
        vector_search="exact",
    )
    from vancetope_rag.domain.records import RagRecord

    first = RagRecord("r1", T, P, "kb", "hashing", "hashing-8", 8, 100, 10)
    store.control.insert_rag(first)
    assert isinstance(store, MongoStore)
    store.database["rags"].delete_one({"_id": "r1"})
    assert store.control.find_rag(T, P, "kb") is None
    second = store.control.insert_rag(
        RagRecord("r2", T, P, "kb", "hashing", "hashing-8", 8, 100, 10)
    )
    assert store.control.find_rag(T, P, "kb") == second


def test_edits_during_a_rebuild_on_the_lagging_atlas_double(
    make_app: AppFactory, clock: Any
) -> None:
    """The non-transactional paths: an edit's re-queue, a deletion and a creation while the
    new generation fills, a worker fenced by its claim token; the switch waits for search."""
    app, cluster = atlas_app(make_app, clock, retired_grace_s=0)
    app.init_store(dimensions=[256, 64], wait=True)
    app.bring(T, P)
    ids = {path: app.documents.create(T, P, path, text).id for path, text in DOCS.items()}
    cluster.settle()
    app.scheduler.run_until_idle(timeout_s=30)
    old = app.project_rags.find_default_rag(T, P)
    assert old is not None
    app.settings.set(T, None, "ai.embedding.model", "hashing-64")
    m = app.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    migrations = app.store.rebuilds
    claimed = migrations.claim_items(m, "slow-pod", 10, 60.0)
    app.documents.update(T, P, ids["documents/zebra.md"], content="Zebras sleep standing up.")
    app.documents.delete(T, P, ids["documents/holiday.md"])
    app.documents.create(T, P, "documents/otters.md", "Otters hold hands while sleeping.")
    shadow = migrations.get_any_rag(T, P, m.to_rag_id)
    assert shadow is not None
    late = app.rebuilds.shadows.index_items(
        m, shadow, claimed, "slow-pod", app.settings.snapshot(T, P)
    )
    assert late.indexed == 1 and late.lost_lease == 2  # only cluster.md was left alone
    for _ in range(10):
        app.scheduler.tick()
        cluster.settle()
        live = app.project_rags.find_default_rag(T, P)
        if live is not None and live.id == m.to_rag_id:
            break
    live = app.project_rags.find_default_rag(T, P)
    assert live is not None and live.id == m.to_rag_id
    cluster.settle()
    app.scheduler.tick()  # sweeps old chunk generations, disposes the retired RAG
    texts = {c.path: c.text for c in app.store.chunks.get_chunks(RagScope.of(live))}
    assert texts == {
        "documents/zebra.md": "Zebras sleep standing up.",
        "documents/cluster.md": DOCS["documents/cluster.md"],
        "documents/otters.md": "Otters hold hands while sleeping.",
    }
    hits = app.rags.query(live, "otters sleeping hands", top_k=1)
    assert hits and hits[0].path == "documents/otters.md"
    assert [g.id for g in migrations.rag_generations(T, P)] == [live.id]
