"""The MongoDB adapter on a real server (Atlas, or ``mongodb/mongodb-atlas-local``).

Opt-in: set ``VANCETOPE_RAG_TEST_MONGODB_URI``, e.g.

    docker run -d -p 27017:27017 mongodb/mongodb-atlas-local
    VANCETOPE_RAG_TEST_MONGODB_URI='mongodb://localhost:27017/?directConnection=true' \\
        pytest -m mongodb tests/contract

With the variable set, ``conftest.STORE_FACTORIES`` also runs the whole store contract suite
on the server (``[mongodb]`` ids: indexes made by ``initialize(wait=True)``, leases on the
injected clock, and no settling after writes — the suite calls ``settle`` only where it relies
on search having caught up, so everything in between sees the real lag). This file adds what
only a real server shows: leases on the server's ``$$NOW``, workers in separate clients racing
for claims, Atlas scores against exact cosine similarity, queries during replacements, a
definition update followed by a filter on the new field, a query while an index builds, a
user without search rights (``VANCETOPE_RAG_TEST_MONGODB_RESTRICTED_URI``: a user with only
``read`` on the database), a document over 16 MiB, read preferences in the URI (``secondary*``
refused), our text analyzer's output on Atlas, and a scope over 10,000 chunks.
"""

from __future__ import annotations

import os
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mongo_support import (
    MONGODB_MODE_ENV,
    MONGODB_URI_ENV,
    SKIP_REASON,
    real_database,
    real_mongo_store,
    real_settle,
    real_uri,
)
from pymongo.errors import OperationFailure
from pymongo.operations import SearchIndexModel

from vancetope_rag.domain.records import Chunk, IndexState, ProjectStatus
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.builders import rebuilds as mm
from vancetope_rag.store.mongo.builders import sweep as ms
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.mongo.builders.analysis import analyze
from vancetope_rag.store.mongo.chunks import MongoChunkStore
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.port import ControlStore
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope

RESTRICTED_URI_ENV = "VANCETOPE_RAG_TEST_MONGODB_RESTRICTED_URI"

pytestmark = [
    pytest.mark.mongodb,
    pytest.mark.skipif(not os.environ.get(MONGODB_URI_ENV), reason=SKIP_REASON),
]

T, P = "tenant-real", "proj-real"
DIM = 8
ATLAS = os.environ.get(MONGODB_MODE_ENV, "atlas") == "atlas"
needs_atlas = pytest.mark.skipif(not ATLAS, reason=f"{MONGODB_MODE_ENV} is not atlas")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MongoStore]:
    """A store on an emptied database, leases measured on the server's clock."""
    store = real_mongo_store(tmp_path, time.time, server_clock=True)
    assert isinstance(store, MongoStore)
    yield store
    store.close()


def pod() -> MongoStore:
    """Another process' view: its own client on the same database, server clock."""
    _, name = real_database()
    return open_mongo_store(real_uri(), database=name, vector_search="exact", server_clock=True)


def dirty(control: ControlStore, n: int) -> list[str]:
    return [
        control.insert_document(
            NewDocument(T, P, f"d{i:03}.md", "text/plain", f"body {i}", rag_dirty=True)
        ).id
        for i in range(n)
    ]


def within(value: datetime | None, start: datetime, end: datetime) -> bool:
    slack = timedelta(milliseconds=5)
    return value is not None and start - slack <= value <= end + slack


# -- the server's clock ----------------------------------------------------------------------


def test_now_is_the_servers_clock(server: MongoStore) -> None:
    now = server.control.now()
    assert now.tzinfo is not None
    # the server's clock, not ours: allow for skew, but it is a real "now"
    assert abs((now - datetime.now(UTC)).total_seconds()) < 300


def test_writes_take_their_times_from_the_server(server: MongoStore) -> None:
    control = server.control
    start = control.now()
    project = control.upsert_project(T, P, status=ProjectStatus.RUNNING, home_node=None)
    doc = control.insert_document(NewDocument(T, P, "$HOME/a.md", "text/plain", "x"))
    end = control.now()
    assert within(project.created_at, start, end)
    assert within(doc.created_at, start, end) and doc.created_at == doc.updated_at
    assert doc.path == "$HOME/a.md"  # literal, not a field path
    again = control.upsert_project(T, P, status=ProjectStatus.SUSPENDED, home_node="n1")
    assert again.created_at == project.created_at and again.status is ProjectStatus.SUSPENDED
    updated = control.update_document(T, P, doc.id, DocumentChange(content="y", mark_dirty=True))
    assert updated.updated_at is not None and updated.updated_at >= doc.updated_at  # type: ignore[operator]
    assert updated.rag_dirty and updated.index_state is IndexState.PENDING


def test_claim_lease_and_clean_on_the_server_clock(server: MongoStore) -> None:
    control = server.control
    ids = dirty(control, 3)
    start = control.now()
    first = control.claim_for_rag_index(T, P, "w1", 2, 60)
    end = control.now()
    assert len(first) == 2
    assert all(within(d.rag_claimed_at, start, end) for d in first)
    assert all(d.index_state is IndexState.PROCESSING for d in first)
    second = control.claim_for_rag_index(T, P, "w2", 10, 60)
    assert {d.id for d in first} | {d.id for d in second} == set(ids)
    assert control.claim_for_rag_index(T, P, "w3", 10, 60) == []

    doc = first[0]
    control.mark_dirty(T, P, [doc.id])  # changed during the claim
    assert control.mark_rag_clean(
        CleanMark(T, P, doc.id, "w1", doc.rag_version, state=IndexState.INDEXED)
    )
    after = control.get_document(T, P, doc.id)
    assert after is not None and after.rag_dirty and after.index_state is IndexState.PENDING
    assert within(after.indexed_at, start, control.now())


def test_a_lease_expires_on_the_server_clock(server: MongoStore) -> None:
    control = server.control
    (doc_id,) = dirty(control, 1)
    (held,) = control.claim_for_rag_index(T, P, "w1", 1, 1.0)
    assert control.claim_for_rag_index(T, P, "w2", 1, 1.0) == []
    time.sleep(1.5)
    (taken,) = control.claim_for_rag_index(T, P, "w2", 1, 1.0)
    assert taken.id == doc_id and taken.rag_claimed_by == "w2"
    assert not control.mark_rag_clean(
        CleanMark(T, P, doc_id, "w1", held.rag_version, state=IndexState.INDEXED)
    )
    assert control.mark_rag_clean(
        CleanMark(T, P, doc_id, "w2", taken.rag_version, state=IndexState.INDEXED)
    )


def test_retry_time_is_measured_on_the_server_clock(server: MongoStore) -> None:
    control = server.control
    (doc_id,) = dirty(control, 1)
    control.claim_for_rag_index(T, P, "w1", 1, 60)
    before = control.now()
    state = control.release_rag_claim(
        Release(T, P, doc_id, "w1", error="boom", retry_delay_s=1.0, max_attempts=2)
    )
    assert state is IndexState.PENDING
    doc = control.get_document(T, P, doc_id)
    assert doc is not None and doc.index_attempts == 1 and doc.index_last_error == "boom"
    assert within(
        doc.index_next_attempt_at,
        before + timedelta(seconds=1),
        control.now() + timedelta(seconds=1),
    )
    assert control.claim_for_rag_index(T, P, "w1", 1, 60) == []
    time.sleep(1.3)
    assert len(control.claim_for_rag_index(T, P, "w1", 1, 60)) == 1
    state = control.release_rag_claim(
        Release(T, P, doc_id, "w1", error="boom 2", retry_delay_s=1.0, max_attempts=2)
    )
    assert state is IndexState.FAILED


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_in_separate_clients_never_claim_the_same_document(
    server: MongoStore, workers: int
) -> None:
    ids = dirty(server.control, 60)
    pods = [pod() for _ in range(workers)]
    claims: dict[str, list[str]] = {f"w{i}": [] for i in range(workers)}
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def work(worker: str, store: MongoStore) -> None:
        try:
            barrier.wait()
            while batch := store.control.claim_for_rag_index(T, P, worker, 3, 60):
                for doc in batch:
                    claims[worker].append(doc.id)
                    assert store.control.holds_claim(Claim(T, P, doc.id, worker))
                    assert store.control.mark_rag_clean(
                        CleanMark(T, P, doc.id, worker, doc.rag_version, state=IndexState.INDEXED)
                    )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(w, s)) for w, s in zip(claims, pods, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for store in pods:
        store.close()
    assert not errors, errors
    counted = Counter(doc_id for got in claims.values() for doc_id in got)
    assert set(counted) == set(ids) and set(counted.values()) == {1}
    assert server.control.document_state_counts(T, P)["indexed"] == 60


# -- Atlas Search ----------------------------------------------------------------------------


def chunks_of(store: MongoStore) -> MongoChunkStore:
    assert isinstance(store.chunks, MongoChunkStore)
    return store.chunks


def wait_for(predicate: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.25)


@needs_atlas
def test_init_makes_both_search_indexes_ready(server: MongoStore) -> None:
    statuses = server.initialize(dimensions=[DIM], wait=True, timeout_s=900)
    names = {(s.collection, s.name) for s in statuses}
    assert {(f"chunks_{DIM}", ix.VECTOR_INDEX), (f"chunks_{DIM}", ix.TEXT_INDEX)} <= names
    assert all(s.ready and s.status == "READY" for s in statuses)
    collection = server.database[f"chunks_{DIM}"]
    assert ix.ensure_search_index(collection, ix.search_index_models(DIM)[0]) == "unchanged"


@needs_atlas
def test_the_text_analyzer_on_atlas_matches_its_twin(server: MongoStore) -> None:
    """Atlas's own analysis of our analyzer: each probe word finds exactly the chunks whose
    tokens, by the client's twin (:func:`analyze`), hold the word's token — including the
    stemmer's departures from the SQLite store (``is`` → ``i``), ICU folding, text in
    decomposed form (NFD), ``ß`` and ligatures."""
    server.initialize(dimensions=[DIM], wait=True, timeout_s=900)
    scope = RagScope(T, P, "rag-analysis", DIM)
    texts = [
        "A cell divides; the cells divided.",
        "Le café est fermé à Zürich.",
        "call claim_for_rag_index first, then mark_rag_clean",
        "It is plausibly agreed: connections connect.",
        "ёлка and i",
        "CAFE ZURICH 42",
        unicodedata.normalize("NFD", "naïve résumé"),
        "Die Straße, the ﬁle",
    ]
    server.chunks.add_chunks(
        scope, [Chunk(f"c{i}", scope.rag_id, f"d{i}", t, [1.0] * DIM) for i, t in enumerate(texts)]
    )
    real_settle(server)
    probes = ["cells", "dividing", "cafe", "zurich", "claim_for_rag_index", "claim", "is", "i"]
    probes += ["plausible", "agree", "connecting", "елка", "42", "naïve", "resume", "strasse"]
    probes += ["file", unicodedata.normalize("NFD", "résumé")]
    for word in probes:
        (token,) = analyze(word)
        want = {f"c{i}" for i, t in enumerate(texts) if token in analyze(t)}
        got = {h.chunk_id for h in server.chunks.lexical_query(scope, word, 10, vector=[1.0] * DIM)}
        assert got == want, word


@needs_atlas
def test_atlas_scores_match_exact_cosine(server: MongoStore) -> None:
    scope = RagScope(T, P, "rag-real", DIM)
    other = RagScope("tenant-other", P, "rag-real", DIM)  # same RAG id, another tenant
    vecs = np.random.default_rng(7).standard_normal((40, DIM))
    server.chunks.add_chunks(
        scope,
        [
            Chunk(
                f"c{i}",
                scope.rag_id,
                f"doc-{i % 4}",
                f"text {i}",
                v.tolist(),
                kind=["content", "summary"][i % 2],
                path=f"p{i % 3}.md",
            )
            for i, v in enumerate(vecs)
        ],
    )
    server.chunks.add_chunks(
        other,
        [Chunk(f"x{i}", other.rag_id, "doc-0", "intruder", v.tolist()) for i, v in enumerate(vecs)],
    )
    real_settle(server)
    exact = MongoChunkStore(server.database, vector_search="exact")
    q = vecs[3].tolist()
    for filters in [None, {"kind": "summary"}, {"!path": "p1.md"}]:
        got = server.chunks.query(scope, q, 5, filters=filters)
        want = exact.query(scope, q, 5, filters=filters)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want], filters
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
    assert server.chunks.query(scope, q, 1)[0].score == pytest.approx(1.0, abs=1e-4)


@needs_atlas
def test_queries_during_replacements_never_see_zero_chunks(server: MongoStore) -> None:
    """The real lag: replace a source again and again while another client queries it."""
    scope = RagScope(T, P, "rag-swap", DIM)
    vecs = np.random.default_rng(8).standard_normal((2, DIM)).tolist()
    server.chunks.add_chunks(scope, [Chunk("v0", scope.rag_id, "doc-1", "v0", vecs[0])])
    real_settle(server)
    reader = pod_atlas()
    empty: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            hits = reader.chunks.query(scope, vecs[1], 5)
            if not [h for h in hits if h.source_ref == "doc-1"]:
                empty.append(1)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for v in range(1, 8):
            server.chunks.replace_source(
                scope, "doc-1", [Chunk(f"v{v}", scope.rag_id, "doc-1", f"v{v}", vecs[v % 2])]
            )
            time.sleep(0.3)
            server.chunks.sweep()
    finally:
        stop.set()
        thread.join(timeout=60)
        reader.close()
    assert not empty, f"{len(empty)} queries saw the source with zero chunks"
    wait_for(
        lambda: (
            server.chunks.sweep() >= 0
            and server.chunks.count_chunks(scope) == 1
            and server.database[f"chunks_{DIM}"].count_documents(mq.scope_match(scope)) == 1
        )
    )


@needs_atlas
def test_a_definition_update_then_a_filter_on_the_new_field(server: MongoStore) -> None:
    """An index made before ``gen`` was a filter field: init updates it; until the rebuild is
    READY, Atlas serves the old definition (a filter on gen may be refused), queries keep
    working and the sweep waits; after init --wait the filter works."""
    dim = 12
    scope = RagScope(T, P, "rag-def", dim)
    name = ix.chunk_collection(dim)
    ix.ensure_collection(server.database, name)
    collection = server.database[name]
    for info in collection.list_search_indexes():
        collection.drop_search_index(info["name"])
    wait_for(lambda: not list(collection.list_search_indexes()), 600)
    old = ix.vector_index_definition(dim)
    old["fields"] = [f for f in old["fields"] if f["path"] != "gen"]
    collection.create_search_index(
        SearchIndexModel(definition=old, name=ix.VECTOR_INDEX, type="vectorSearch")
    )
    wait_for(lambda: ix.is_ready(ix.find_search_index(collection, ix.VECTOR_INDEX)), 900)
    vec = [1.0] * dim
    server.chunks.add_chunks(scope, [Chunk("a", scope.rag_id, "doc-1", "a", vec)])
    server.chunks.replace_source(scope, "doc-1", [Chunk("b", scope.rag_id, "doc-1", "b", vec)])
    server.initialize(dimensions=[dim])  # updates the definition, does not wait
    probe = mq.build_probe_pipeline(scope, "doc-1", 1, 1, dim)
    while not ix.is_ready(ix.find_search_index(collection, ix.VECTOR_INDEX)):
        try:
            list(collection.aggregate(probe))
        except OperationFailure as exc:  # the old definition is still served
            assert "filter" in str(exc)
        server.chunks.sweep()  # never raises: it waits for the rebuild
        hits = server.chunks.query(scope, vec, 3)
        assert [h.chunk_id for h in hits] in (["a"], ["b"], [])
        time.sleep(1)
    server.initialize(dimensions=[dim], wait=True, timeout_s=900)
    list(collection.aggregate(probe))  # the new field filters now
    wait_for(
        lambda: (
            server.chunks.sweep() >= 0 and collection.count_documents(mq.scope_match(scope)) == 1
        )
    )
    assert [h.chunk_id for h in server.chunks.query(scope, vec, 3)] == ["b"]


@needs_atlas
def test_a_query_while_an_index_builds_fails_fast(server: MongoStore) -> None:
    dim = 10
    collection = server.database[ix.chunk_collection(dim)]
    ix.ensure_collection(server.database, collection.name)
    for info in collection.list_search_indexes():
        collection.drop_search_index(info["name"])
    wait_for(lambda: not list(collection.list_search_indexes()), 600)
    scope = RagScope(T, P, "rag-build", dim)
    fresh = MongoChunkStore(server.database, vector_search="atlas")
    with pytest.raises(StoreError, match="does not exist; run"):
        fresh.query(scope, [1.0] * dim, 3)
    fresh.prepare_dimension(dim)  # what creating a RAG of this dimension does: no wait
    started = time.monotonic()
    try:
        fresh.query(scope, [1.0] * dim, 3)
    except StoreError as exc:
        assert "still being built" in exc.message
    assert time.monotonic() - started < 10  # failed (or answered) fast, never waited
    server.initialize(dimensions=[dim], wait=True, timeout_s=900)
    assert fresh.dimension_ready(dim)


@pytest.mark.skipif(not os.environ.get(RESTRICTED_URI_ENV), reason=f"set {RESTRICTED_URI_ENV}")
def test_a_user_without_search_rights(server: MongoStore) -> None:
    _, name = real_database()
    restricted = open_mongo_store(os.environ[RESTRICTED_URI_ENV], database=name)
    try:
        with pytest.raises(StoreError, match=r"privilege|not authorized"):
            restricted.initialize(dimensions=[14])
        assert restricted.chunks.vector_search in ("atlas", "auto")  # no silent fallback
    finally:
        restricted.close()


def test_a_document_over_16_mib_is_refused_before_the_driver(server: MongoStore) -> None:
    big = "x" * (17 * 2**20)
    with pytest.raises(InvalidInputError, match="16 MiB"):
        server.control.insert_document(NewDocument(T, P, "big.md", "text/plain", big))
    scope = RagScope(T, P, "rag-big", DIM)
    with pytest.raises(InvalidInputError, match="16 MiB"):
        server.chunks.add_chunks(scope, [Chunk("big", scope.rag_id, "d", big, [1.0] * DIM)])
    assert server.control.insert_document(NewDocument(T, P, "ok.md", "text/plain", "ok"))
    assert server.chunks.count_chunks(scope) == 0


def test_read_preference_in_the_uri(server: MongoStore) -> None:
    """``secondaryPreferred`` and ``nearest`` are refused at open; with ``primaryPreferred``
    (and ``w=1``), control reads still go to the primary and writes to a majority: a claim
    and a read of what was just written see it at once."""
    _, name = real_database()
    sep = "&" if "?" in real_uri() else "?"
    with pytest.raises(StoreError, match="readPreference=secondaryPreferred is not supported"):
        open_mongo_store(f"{real_uri()}{sep}readPreference=secondaryPreferred", database=name)
    with pytest.raises(StoreError, match="readPreference=nearest is not supported"):
        open_mongo_store(f"{real_uri()}{sep}readPreference=nearest", database=name)
    store = open_mongo_store(
        f"{real_uri()}{sep}readPreference=primaryPreferred&w=1", database=name, server_clock=True
    )
    try:
        doc = store.control.insert_document(
            NewDocument(T, P, "rp.md", "text/plain", "x", rag_dirty=True)
        )
        (claimed,) = store.control.claim_for_rag_index(T, P, "w-rp", 1, 60)
        assert claimed.id == doc.id and store.control.holds_claim(Claim(T, P, doc.id, "w-rp"))
        scope = RagScope(T, P, "rag-rp", DIM)
        store.chunks.add_chunks(scope, [Chunk("c", scope.rag_id, "d", "c", [1.0] * DIM)])
        assert store.chunks.count_chunks(scope) == 1
        assert store.database["counters"].write_concern.document == {"w": "majority"}
    finally:
        store.close()


def _stages(plan: Any) -> list[str]:
    """Every stage name of an ``explain`` plan tree."""
    if isinstance(plan, dict):
        own = [plan["stage"]] if isinstance(plan.get("stage"), str) else []
        return own + [s for v in plan.values() for s in _stages(v)]
    if isinstance(plan, list):
        return [s for v in plan for s in _stages(v)]
    return []


def test_a_rebuild_claim_neither_sorts_in_memory_nor_scans(server: MongoStore) -> None:
    """``explain`` of the queue's claim query on 2,000 items, most of them done: the winning
    plan walks ``migration_claim_order_idx`` (merged per state), with no SORT and no
    COLLSCAN."""
    items = server.database[ix.MIGRATION_ITEMS]
    states = ["done"] * 1900 + ["pending"] * 60 + ["processing"] * 40
    items.insert_many(
        [
            {"migrationId": "m-explain", "tenantId": T, "projectId": P, "documentId": f"d{i:05}"}
            | {"state": state, "nextAttemptAt": None, "claimedAt": datetime.now(UTC)}
            for i, state in enumerate(states)
        ]
    )
    flt = mm.item_claim_filter(T, P, "m-explain", 60, q.ServerTime())
    plan = items.find(flt).sort(mm.ITEM_CLAIM_SORT).limit(1).explain()
    stages = _stages(plan["queryPlanner"]["winningPlan"])
    assert "IXSCAN" in stages and "SORT" not in stages and "COLLSCAN" not in stages, stages
    assert "migration_claim_order_idx" in str(plan["queryPlanner"]["winningPlan"])


def test_the_sweeps_due_notes_neither_sort_in_memory_nor_scan(server: MongoStore) -> None:
    """``explain`` of the sweeper's due-notes query on 2,000 swap notes, 1,800 of them due
    (three share each ``at``, so the first page ends inside a tie), for the first page and for
    the page after it (the ``(at, _id)`` resume that paging adds as an ``$or``): the winning
    plan walks ``swap_dim_due_idx`` (for the resume, possibly as one scan per ``$or`` branch
    merged in order, SORT_MERGE), with no SORT and no COLLSCAN."""
    swaps = server.database[ix.SWAPS]
    base = datetime(2026, 1, 1)  # naive UTC, as the store writes ``at``
    swaps.insert_many(
        [
            {"tenantId": T, "projectId": P, "ragId": "rag-due", "sourceRef": f"d{i:05}"}
            | {"dim": DIM, "gen": 1, "at": base + timedelta(seconds=i // 3)}
            for i in range(2000)
        ]
    )
    due = base + timedelta(seconds=599)
    limit = 100  # the sweep's page
    first = ms.due_notes_filter(due, None, DIM)  # one dimension's notes, as the lease holder
    page = list(swaps.find(first).sort(ms.DUE_SORT).limit(limit))
    assert len(page) == limit
    after = (page[-1]["at"], page[-1]["_id"])  # as the sweep resumes
    for flt in (first, ms.due_notes_filter(due, after, DIM)):
        plan = swaps.find(flt).sort(ms.DUE_SORT).limit(limit).explain()
        winning = plan["queryPlanner"]["winningPlan"]
        stages = _stages(winning)
        assert "IXSCAN" in stages and "SORT" not in stages and "COLLSCAN" not in stages, (
            flt,
            stages,
        )
        assert ix.DIM_DUE_INDEX in str(winning), (flt, winning)


@needs_atlas
def test_a_scope_over_ten_thousand_chunks(server: MongoStore) -> None:
    scope = RagScope(T, P, "rag-large", DIM)
    vecs = np.random.default_rng(9).standard_normal((10_500, DIM)).astype(np.float32)
    batch = [
        Chunk(f"c{i}", scope.rag_id, f"doc-{i % 50}", f"t{i}", v.tolist())
        for i, v in enumerate(vecs)
    ]
    for start in range(0, len(batch), 1000):
        server.chunks.add_chunks(scope, batch[start : start + 1000])
    real_settle(server, timeout_s=600)
    q = vecs[17].tolist()
    hits = server.chunks.query(scope, q, 10)  # over EXACT_MAX_CHUNKS: approximate
    exact = MongoChunkStore(server.database, vector_search="exact").query(scope, q, 10)
    assert hits[0].chunk_id == "c17"
    recall = len({h.chunk_id for h in hits} & {h.chunk_id for h in exact}) / 10
    assert recall >= 0.8
    # the largest answer Atlas gives (ANN may return a little less than limit); more is capped
    assert 9_000 <= len(server.chunks.query(scope, q, mq.MAX_NUM_CANDIDATES)) <= 10_000
    assert 9_000 <= len(server.chunks.query(scope, q, 4 * mq.MAX_NUM_CANDIDATES)) <= 10_000
    assert server.chunks.count_chunks(scope) == 10_500


@needs_atlas
def test_auto_mode_finds_atlas_search(server: MongoStore) -> None:
    probe = MongoChunkStore(server.database, vector_search="auto")
    assert probe.uses_atlas() is True


def pod_atlas() -> MongoStore:
    """Another process' view in Atlas mode: its own client on the same database."""
    _, name = real_database()
    return open_mongo_store(real_uri(), database=name, vector_search="atlas")


# -- search nodes ----------------------------------------------------------------------------


@needs_atlas
def test_status_detail_lists_every_search_process_serving_the_latest_definition(
    server: MongoStore,
) -> None:
    """What ``is_ready`` reads: one ``statusDetail`` entry per search process, each serving
    the latest definition version once READY (a server that lists none is read by its
    top-level status)."""
    server.initialize(dimensions=[DIM], wait=True, timeout_s=900)
    collection = server.database[f"chunks_{DIM}"]
    for name in (ix.VECTOR_INDEX, ix.TEXT_INDEX):
        info = ix.find_search_index(collection, name)
        assert info is not None and ix.is_ready(info), info
        latest = info["latestDefinitionVersion"]["version"]
        for node in info.get("statusDetail") or []:
            assert node["status"] == "READY" and node["queryable"] is True, node
            assert node["mainIndex"]["definitionVersion"]["version"] == latest, node


@needs_atlas
def test_search_node_preference_is_accepted_and_keeps_answers(server: MongoStore) -> None:
    """The real-server store runs with ``search_node_preference`` on: the cluster accepts the
    field on both stages (it would have been dropped, with a warning, if refused), and the
    sweep's probes route like the queries."""
    chunks = server.chunks
    assert isinstance(chunks, MongoChunkStore) and chunks.search.node_preference is True
    scope = RagScope(T, P, "rag-nodes", DIM)
    chunks.replace_source(scope, "doc-1", [Chunk("a", scope.rag_id, "doc-1", "alpha", [1.0] * DIM)])
    real_settle(server)
    assert [h.chunk_id for h in chunks.query(scope, [1.0] * DIM, 3)] == ["a"]
    assert [h.chunk_id for h in chunks.lexical_query(scope, "alpha", 3, vector=[1.0] * DIM)] == [
        "a"
    ]
    assert chunks.search.node_preference is True  # not refused
    collection = server.database[f"chunks_{DIM}"]
    pinned = mq.with_node_preference(
        mq.build_probe_pipeline(scope, "doc-1", 1, 1, DIM), scope.rag_id
    )
    assert pinned[0]["$vectorSearch"]["searchNodePreference"] == {"key": scope.rag_id}
    assert len(list(collection.aggregate(pinned))) == 1


@needs_atlas
def test_hybrid_cosines_of_text_only_hits_come_from_one_exact_search(server: MongoStore) -> None:
    """BinData float32 query vectors and the ``chunkId`` filter field on a real cluster: the
    cosines of hits only the text search found equal exact cosine similarity."""
    from vancetope_rag.domain.retrieval.ranking import FusionParams

    scope = RagScope(T, P, "rag-hybrid", DIM)
    vecs = np.random.default_rng(11).standard_normal((30, DIM))
    words = ["zebra" if i % 3 == 0 else "plain" for i in range(30)]
    server.chunks.add_chunks(
        scope,
        [
            Chunk(f"h{i}", scope.rag_id, f"doc-{i % 5}", f"{words[i]} text {i}", v.tolist())
            for i, v in enumerate(vecs)
        ],
    )
    real_settle(server)
    exact = MongoChunkStore(server.database, vector_search="exact")
    q = vecs[1].tolist()
    found = server.chunks.hybrid_query(scope, "zebra", q, 3, fusion=FusionParams())
    want = {h.chunk_id: h.score for h in exact.query(scope, q, 30)}
    hits = list(found.hits)
    assert any(h.lexical_score for h in hits)
    for h in hits:
        assert h.score == pytest.approx(want[h.chunk_id], abs=1e-4), h.chunk_id


@needs_atlas
def test_init_prune_drops_unused_dimensions_on_a_real_cluster(server: MongoStore) -> None:
    server.initialize(dimensions=(DIM, 12), wait=True, timeout_s=600)
    statuses = server.initialize(dimensions=(DIM,), prune=True)
    dropped = {s.name for s in statuses if s.status == "DROPPED" and s.collection == "chunks_12"}
    assert dropped == {ix.VECTOR_INDEX, ix.TEXT_INDEX}
    with pytest.raises(StoreError, match="run"):
        server.chunks.query(RagScope(T, P, "rag-12", 12), [1.0] * 12, 3)


def test_a_turn_deadline_reaches_the_driver(server: MongoStore) -> None:
    from vancetope_rag.store.port.deadline import turn_deadline

    scope = RagScope(T, P, "rag-deadline", DIM)
    with turn_deadline(0.0005), pytest.raises(StoreError):
        for _ in range(50):  # one of these outlives half a millisecond on any network
            server.chunks.count_chunks(scope)
    assert server.chunks.count_chunks(scope) == 0  # outside a turn: the client's timeout
