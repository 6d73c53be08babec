"""The MongoDB adapter on a real server (Atlas, or ``mongodb/mongodb-atlas-local``).

Opt-in: set ``VANCETOPE_RAG_TEST_MONGODB_URI``, e.g.

    docker run -d -p 27017:27017 mongodb/mongodb-atlas-local
    VANCETOPE_RAG_TEST_MONGODB_URI='mongodb://localhost:27017/?directConnection=true' \\
        pytest -m mongodb tests/contract

With the variable set, ``conftest.STORE_FACTORIES`` also runs the whole store contract suite
on the server (``[mongodb]`` ids; ``$vectorSearch`` with the vector index created and awaited,
leases on the injected clock). This file adds what only a real server shows: leases measured
on the server's ``$$NOW``, workers in separate clients racing for claims, the Atlas index
lifecycle, and Atlas scores against exact cosine similarity.
"""

from __future__ import annotations

import os
import threading
import time
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
    real_uri,
    visible_to_vector_search,
)

from vancetope_rag.domain.records import Chunk, IndexState, ProjectStatus
from vancetope_rag.store.mongo import MongoStore, open_mongo_store
from vancetope_rag.store.mongo_chunks import MongoChunkStore
from vancetope_rag.store.mongo_indexes import (
    create_vector_search_index,
    vector_index_definition,
    vector_index_name,
)
from vancetope_rag.store.mongo_queries import scope_match
from vancetope_rag.store.port import ControlStore
from vancetope_rag.store.types import NewDocument, RagScope

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
        control.insert_document(NewDocument(T, P, f"d{i:03}.md", "text/plain", f"body {i}",
                                            rag_dirty=True)).id
        for i in range(n)
    ]  # fmt: skip


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
    updated = control.update_document(T, P, doc.id, content="y", mark_dirty=True)
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
    assert control.mark_rag_clean(T, P, doc.id, "w1", doc.rag_version, state=IndexState.INDEXED)
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
    assert not control.mark_rag_clean(T, P, doc_id, "w1", held.rag_version,
                                      state=IndexState.INDEXED)  # fmt: skip
    assert control.mark_rag_clean(T, P, doc_id, "w2", taken.rag_version, state=IndexState.INDEXED)


def test_retry_time_is_measured_on_the_server_clock(server: MongoStore) -> None:
    control = server.control
    (doc_id,) = dirty(control, 1)
    control.claim_for_rag_index(T, P, "w1", 1, 60)
    before = control.now()
    state = control.release_rag_claim(T, P, doc_id, "w1", error="boom", retry_delay_s=1.0,
                                      max_attempts=2)  # fmt: skip
    assert state is IndexState.PENDING
    doc = control.get_document(T, P, doc_id)
    assert doc is not None and doc.index_attempts == 1 and doc.index_last_error == "boom"
    assert within(doc.index_next_attempt_at, before + timedelta(seconds=1),
                  control.now() + timedelta(seconds=1))  # fmt: skip
    assert control.claim_for_rag_index(T, P, "w1", 1, 60) == []
    time.sleep(1.3)
    assert len(control.claim_for_rag_index(T, P, "w1", 1, 60)) == 1
    state = control.release_rag_claim(T, P, doc_id, "w1", error="boom 2", retry_delay_s=1.0,
                                      max_attempts=2)  # fmt: skip
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
                    assert store.control.holds_claim(T, P, doc.id, worker)
                    assert store.control.mark_rag_clean(T, P, doc.id, worker, doc.rag_version,
                                                        state=IndexState.INDEXED)  # fmt: skip
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


# -- Atlas Vector Search ---------------------------------------------------------------------


def chunks_of(store: MongoStore) -> MongoChunkStore:
    inner = getattr(store.chunks, "inner", store.chunks)
    assert isinstance(inner, MongoChunkStore)
    return inner


@needs_atlas
def test_the_vector_index_is_created_once_and_queryable(server: MongoStore) -> None:
    chunks = chunks_of(server)
    chunks.ensure_vector_index(DIM, wait=True)
    (info,) = [
        i for i in chunks.collection.list_search_indexes(vector_index_name(DIM))
        if i["name"] == vector_index_name(DIM)
    ]  # fmt: skip
    assert info["queryable"] is True and info.get("type", "vectorSearch") == "vectorSearch"
    assert create_vector_search_index(chunks.collection, DIM) is False  # nothing to change
    fields = {(f["type"], f["path"]) for f in info["latestDefinition"]["fields"]}
    assert fields >= {(f["type"], f["path"]) for f in vector_index_definition(DIM)["fields"]}


@needs_atlas
def test_atlas_scores_match_exact_cosine(server: MongoStore) -> None:
    scope = RagScope(T, P, "rag-real", DIM)
    other = RagScope("tenant-other", P, "rag-real", DIM)  # same RAG id, another tenant
    vecs = np.random.default_rng(7).standard_normal((40, DIM))
    server.chunks.add_chunks(scope, [
        Chunk(f"c{i}", scope.rag_id, f"doc-{i % 4}", f"text {i}", v.tolist(),
              kind=["content", "summary"][i % 2], path=f"p{i % 3}.md")
        for i, v in enumerate(vecs)
    ])  # fmt: skip
    server.chunks.add_chunks(other, [
        Chunk(f"x{i}", other.rag_id, "doc-0", "intruder", v.tolist()) for i, v in enumerate(vecs)
    ])  # fmt: skip
    exact = MongoChunkStore(server.database, vector_search="exact")
    q = vecs[3].tolist()
    for filters in [None, {"kind": "summary"}, {"!path": "p1.md"}]:
        got = server.chunks.query(scope, q, 5, filters=filters)
        want = exact.query(scope, q, 5, filters=filters)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want], filters
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
    assert server.chunks.query(scope, q, 1)[0].score == pytest.approx(1.0, abs=1e-4)
    assert visible_to_vector_search(chunks_of(server), scope) == sorted(
        d["_id"] for d in chunks_of(server).collection.find(scope_match(scope))
    )


@needs_atlas
def test_auto_mode_finds_atlas_search(server: MongoStore) -> None:
    probe: Any = MongoChunkStore(server.database, vector_search="auto")
    assert probe.uses_atlas() is True
