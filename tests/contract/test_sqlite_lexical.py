"""The SQLite lexical index: FTS5 and the in-process index agree, user text cannot inject FTS5
syntax, the v3 migration backfills old stores, and chunk rows and lexical rows never disagree
(fault injection inside the transaction, and a writer killed in the middle of one)."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import pytest
import sqlite_vec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vancetope_rag.domain.records import Chunk
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store import SqliteStore, open_store
from vancetope_rag.store.inprocess import bm25_index
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.sqlite.bm25 import match_expression, scope_token
from vancetope_rag.store.sqlite.chunks import SqliteChunkStore
from vancetope_rag.store.sqlite.db import SCHEMA_VERSION, UPGRADES, SqliteDatabase
from vancetope_rag.store.sqlite.fts import SqliteLexical

DIM = 4
WORDS = [
    "cell",
    "cells",
    "celled",
    "running",
    "runs",
    "run",
    "protein",
    "proteins",
    "gene",
    "genes",
    "tumour",
    "tumor",
    "café",
    "cafe",
    "naïve",
    "the",
    "of",
    "and",
    "data",
    "parse_config",
    "x",
    "y",
    "z",
    "Ünïcödé",
    "2024",
    "e-mail",
    "don't",
    "co2",
    "ß",
]


def _chunks(store: Any) -> SqliteChunkStore:
    chunks = store.chunks
    assert isinstance(chunks, SqliteChunkStore)
    return chunks


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 25)))


def _add(store: Any, scope: RagScope, text: str, source: str = "s") -> str:
    cid = uuid.uuid4().hex
    vec = [1.0, 0.5, 0.25, 0.125]
    store.chunks.add_chunks(scope, [Chunk(cid, scope.rag_id, source, text, vec)])
    return cid


SCOPES = [
    RagScope("t1", "p1", "r1", DIM),
    RagScope("t2", "p1", "r1", DIM),  # same RAG id, other tenant
    RagScope("t1", "p2", "r2", DIM),
]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[SqliteStore, SqliteStore]:
    """The same file opened twice: with the in-process indexes, and FTS5/sqlite-vec only."""
    uri = f"sqlite:///{tmp_path / 'rag.db'}"
    cached, plain = open_store(uri), open_store(uri, vector_cache=False)
    lexical_cache = _chunks(cached).lexical.cache
    assert lexical_cache is not None and _chunks(plain).lexical.cache is None
    lexical_cache.reload_cooldown_s = 0.0  # refresh on every epoch change
    yield cached, plain  # type: ignore[misc]
    cached.close()
    plain.close()


def _both(pair: tuple[Any, Any], scope: RagScope, query: str, k: int = 15) -> tuple[Any, Any]:
    out = []
    for store in pair:
        lexical = _chunks(store).lexical
        out.append(lexical.search(scope, lexical.terms(query), k))
    return out[0], out[1]


def test_in_process_index_ranks_exactly_as_fts5(pair: tuple[SqliteStore, SqliteStore]) -> None:
    """Random corpora over three scopes, with writes, deletes and replacements between rounds
    (the in-process index refreshes incrementally and merges): the same rows, the same order,
    the same scores bit for bit."""
    cached, _ = pair
    rng = random.Random(7)
    for scope in SCOPES:
        for i in range(40):
            _add(cached, scope, _text(rng), source=f"s{i % 6}")
    compared = 0
    for round_ in range(6):
        for _ in range(40):
            query = _text(rng) or "cell"
            for scope in SCOPES:
                fast, fts = _both(pair, scope, query)
                assert [r for r, _ in fast] == [r for r, _ in fts], query
                assert [s for _, s in fast] == [s for _, s in fts], query
                compared += bool(fts)
        # change things between rounds: deletes, replacements, additions in every scope
        for scope in SCOPES:
            cached.chunks.remove_by_source(scope, f"s{round_}")
            for _ in range(rng.randint(1, 12)):
                _add(cached, scope, _text(rng), source=f"s{rng.randint(0, 5)}")
    assert compared > 300
    cache = _chunks(cached).lexical.cache
    assert cache is not None and cache.reloads >= 6  # it answered, refreshed and merged


def test_one_rag_alone_ranks_as_fts5s_own_bm25(pair: tuple[SqliteStore, SqliteStore]) -> None:
    """With one RAG in the file its statistics are the table's: ``vtr_bm25`` with them gives
    what FTS5's own ``bm25()`` gives, so the per-RAG formula is FTS5's."""
    cached, plain = pair
    rng = random.Random(11)
    scope = SCOPES[0]
    for i in range(60):
        _add(cached, scope, _text(rng), source=f"s{i % 4}")
    lexical = _chunks(plain).lexical
    token = scope_token(scope.tenant_id, scope.project_id, scope.rag_id)
    compared = 0
    for _ in range(60):
        terms = lexical.terms(_text(rng) or "cell")
        if not terms:
            continue
        ours = lexical.search(scope, terms, 20)
        expr = match_expression(token, terms)
        theirs = [
            (int(r[0]), -float(r[1]))
            for r in lexical.db.query(
                "SELECT rowid, bm25(chunks_fts, 0.0, 1.0) AS s FROM chunks_fts "
                "WHERE chunks_fts MATCH ? ORDER BY s, rowid LIMIT 20",
                (expr,),
            )
        ]
        assert [r for r, _ in ours] == [r for r, _ in theirs]
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=1e-12)
        compared += bool(ours)
    assert compared > 30


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=80))
def test_arbitrary_unicode_queries_are_safe_and_agree(
    pair: tuple[SqliteStore, SqliteStore], query: str
) -> None:
    """No user text is FTS5 syntax: nothing raises, nothing leaves the scope, both paths agree."""
    cached, _ = pair
    if not _chunks(cached).count_chunks(SCOPES[0]):
        rng = random.Random(3)
        for scope in SCOPES[:2]:
            for _ in range(25):
                _add(cached, scope, _text(rng))
        _add(cached, SCOPES[0], 'NEAR(a b) "quoted" col:umn AND OR NOT * ^start {scope}')
    fast, fts = _both(pair, SCOPES[0], query + ' scope : "x" OR NEAR(')
    assert fast == fts
    own = {h.chunk_id for h in cached.chunks.get_chunks(SCOPES[0])}
    hits = cached.chunks.lexical_query(SCOPES[0], query, 50, vector=[1.0, 0, 0, 0])
    assert {h.chunk_id for h in hits} <= own


def test_syntax_words_are_plain_words(pair: tuple[SqliteStore, SqliteStore]) -> None:
    cached, _ = pair
    cid = _add(cached, SCOPES[0], "We met NEAR the river AND ate.")
    _add(cached, SCOPES[1], "river near another tenant")
    for query in ("NEAR(river", 'scope : "1" OR river', "text:river*", '"river" ^', "r*"):
        hits = cached.chunks.lexical_query(SCOPES[0], query, 10, vector=[1.0, 0, 0, 0])
        assert [h.chunk_id for h in hits] in ([cid], []), query
    assert [
        h.chunk_id
        for h in cached.chunks.lexical_query(SCOPES[0], "NEAR AND", 10, vector=[1.0, 0, 0, 0])
    ] == [cid]


def test_large_first_load_builds_in_the_background(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    cache = _chunks(store).lexical.cache
    assert cache is not None
    cache.sync_build_max_rows = 5
    rng = random.Random(1)
    for _ in range(12):
        _add(store, SCOPES[0], _text(rng) + " cell")
    lexical = _chunks(store).lexical
    terms = lexical.terms("cells running")
    first = lexical.search(SCOPES[0], terms, 5)  # FTS5 answers while the index builds
    assert cache.wait_idle(30) and cache.reloads == 1
    assert lexical.search(SCOPES[0], terms, 5) == first
    store.close()


def test_large_first_loads_of_many_rags_build_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process meeting several large RAGs at once (a restart under load) builds their
    indexes on one thread, one after the other: not a thread (and a build's memory) each."""
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    cache = _chunks(store).lexical.cache
    assert cache is not None
    cache.sync_build_max_rows = 5
    rng = random.Random(2)
    for scope in SCOPES:
        for _ in range(12):
            _add(store, scope, _text(rng) + " cell")
    lock = threading.Lock()
    running = [0, 0]  # now, most at once
    real = cache._build

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            running[0] += 1
            running[1] = max(running)
        try:
            time.sleep(0.05)  # long enough for a second build to overlap
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(cache, "_build", counted)
    lexical = _chunks(store).lexical
    terms = lexical.terms("cells running")
    first = [lexical.search(scope, terms, 5) for scope in SCOPES]  # FTS5, builds queued
    assert cache.wait_idle(30)
    assert running[1] == 1 and cache.reloads == len(SCOPES)
    assert [lexical.search(scope, terms, 5) for scope in SCOPES] == first
    store.close()


def test_a_build_queued_behind_others_is_queued_once_however_long_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build waits its turn behind other RAGs' builds; queries meanwhile must not queue it
    again, even past the time after which a started build counts as crashed."""
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    cache = _chunks(store).lexical.cache
    assert cache is not None
    cache.sync_build_max_rows = 5
    now = [1000.0]
    monkeypatch.setattr(cache, "_clock", lambda: now[0])
    rng = random.Random(3)
    for _ in range(12):
        _add(store, SCOPES[0], _text(rng) + " cell")
    lexical = _chunks(store).lexical
    terms = lexical.terms("cells running")
    busy = threading.Event()
    bm25_index._BUILDS.submit(lambda: busy.wait(30))  # another RAG's build, running
    try:
        lexical.search(SCOPES[0], terms, 5)  # queued behind it
        now[0] += 3600
        lexical.search(SCOPES[0], terms, 5)  # still queued: not queued again
    finally:
        busy.set()
    assert cache.wait_idle(30) and cache.reloads == 1
    store.close()


def test_chunk_rowids_are_never_reused(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    chunks = _chunks(store)
    _add(store, SCOPES[0], "first text", source="a")
    _add(store, SCOPES[0], "second text", source="b")
    top = chunks.db.query("SELECT max(rowid) FROM chunks")[0][0]
    chunks.remove_by_source(SCOPES[0], "b")  # the highest rowid goes away
    _add(store, SCOPES[0], "third text", source="c")
    assert chunks.db.query("SELECT max(rowid) FROM chunks")[0][0] == top + 1
    store.close()


# -- migration -----------------------------------------------------------------------------


def _v2_store(path: Path) -> None:
    """A store file as schema v2 wrote it: migrations 1-2, chunk rows and vec0 vectors the way
    the old ``_insert_rows`` stored them (SQLite-assigned rowids, no lexical index)."""
    conn = apsw.Connection(str(path))
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    with conn:
        conn.execute(UPGRADES[0])
        conn.execute(UPGRADES[1])
        conn.execute(
            "CREATE VIRTUAL TABLE vec_chunks_4 USING vec0(rag_id TEXT PARTITION KEY, "
            "embedding float[4] distance_metric=cosine, kind TEXT)"
        )
        for i, (tenant, text) in enumerate(
            [("t1", "Zebras graze on grass."), ("t1", "Clusters run pods."), ("t2", "Zebra")]
        ):
            conn.execute(
                "INSERT INTO chunks (id, tenant_id, project_id, rag_id, source_ref, kind, path, "
                "text, metadata, dim) VALUES (?, ?, 'p1', 'r1', ?, 'content', NULL, ?, '{}', 4)",
                (f"c{i}", tenant, f"s{i}", text),
            )
            vec = np.asarray([1.0, i, 0.0, 0.5], dtype=np.float32).tobytes()
            conn.execute(
                "INSERT INTO vec_chunks_4 (rowid, rag_id, embedding, kind) "
                "VALUES (?, 'r1', ?, 'content')",
                (conn.last_insert_rowid(), vec),
            )
        conn.execute("INSERT INTO rag_generations (rag_id, generation) VALUES ('r1', 3)")
        conn.execute("PRAGMA user_version=2")
    conn.close()


def test_v2_store_is_migrated_and_backfilled(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v2_store(path)
    store = open_store(f"sqlite:///{path}")
    chunks = _chunks(store)
    assert chunks.db.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    hits = chunks.lexical_query(SCOPES[0], "zebra grazing", 5, vector=[1.0, 0, 0, 0.5])
    assert [h.chunk_id for h in hits] == ["c0"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert [h.chunk_id for h in chunks.lexical_query(SCOPES[1], "zebra", 5, vector=[1.0] * 4)] == [
        "c2"
    ]
    # new chunks continue above the old rowids, in both indexes
    cid = _add(store, SCOPES[0], "A zebra foal.")
    found = chunks.lexical_query(SCOPES[0], "zebra", 5, vector=[1.0, 0, 0, 0])
    assert {h.chunk_id for h in found} == {"c0", cid}
    store.close()


def test_the_migration_keeps_the_tokenizer_the_code_uses(tmp_path: Path) -> None:
    from vancetope_rag.store.sqlite.bm25 import FTS5_TOKENIZE, TOKENIZER_ARGS

    db = SqliteDatabase(tmp_path / "rag.db")
    (sql,) = db.query("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'")[0]
    assert FTS5_TOKENIZE in sql
    assert " ".join([TOKENIZER_ARGS[0], *TOKENIZER_ARGS[1]]).replace(" _", " '_'") == FTS5_TOKENIZE
    db.close()


# -- the chunk row and its lexical row live and die together -------------------------------


def _fts_rows(chunks: SqliteChunkStore, scope: RagScope) -> int:
    token = scope_token(scope.tenant_id, scope.project_id, scope.rag_id)
    return int(
        chunks.db.query(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (f'scope : "{token}"',)
        )[0][0]
    )


def test_a_failing_lexical_insert_writes_no_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    chunks = _chunks(store)
    _add(store, SCOPES[0], "kept before the fault")

    def fail(self: SqliteLexical, scope: RagScope, rows: Any) -> None:
        # the chunk rows and vectors of this batch are written by now, in the transaction
        assert chunks.db.query("SELECT count(*) FROM chunks")[0][0] == 3
        raise apsw.IOError("disk I/O error (injected)")

    monkeypatch.setattr(SqliteLexical, "insert", fail)
    with pytest.raises(StoreError, match="I/O error"):  # apsw errors leave as StoreError
        chunks.add_chunks(
            SCOPES[0],
            [Chunk(f"c{i}", "r1", "s", f"lost text {i}", [1.0, 0, 0, 0]) for i in range(2)],
        )
    monkeypatch.undo()
    assert chunks.count_chunks(SCOPES[0]) == 1 and _fts_rows(chunks, SCOPES[0]) == 1
    assert chunks.query(SCOPES[0], [1.0, 0, 0, 0], 10)[0].text == "kept before the fault"
    assert chunks.lexical_query(SCOPES[0], "lost", 5, vector=[1.0, 0, 0, 0]) == []
    store.close()


def test_deletes_leave_both_indexes_in_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    chunks = _chunks(store)
    for i in range(3):
        _add(store, SCOPES[0], f"doomed text {i}", source="doomed")
    _add(store, SCOPES[0], "survivor text", source="other")

    def fail(self: SqliteLexical, rowids: Any) -> None:
        raise apsw.IOError("disk I/O error (injected)")

    monkeypatch.setattr(SqliteLexical, "delete", fail)
    with pytest.raises(StoreError, match="I/O error"):
        chunks.remove_by_source(SCOPES[0], "doomed")
    monkeypatch.undo()
    # the failed delete removed nothing: rows, vectors and lexical entries all still there
    assert chunks.count_chunks(SCOPES[0]) == 4 and _fts_rows(chunks, SCOPES[0]) == 4
    assert len(chunks.lexical_query(SCOPES[0], "doomed", 5, vector=[1.0, 0, 0, 0])) == 3
    assert chunks.remove_by_source(SCOPES[0], "doomed") == 3
    assert chunks.count_chunks(SCOPES[0]) == 1 and _fts_rows(chunks, SCOPES[0]) == 1
    assert chunks.lexical_query(SCOPES[0], "doomed", 5, vector=[1.0, 0, 0, 0]) == []
    store.close()


def _writer_killed_mid_transaction(path: str) -> None:  # runs in a child process
    store = open_store(f"sqlite:///{path}")
    real_insert = SqliteLexical.insert

    def insert_then_die(self: SqliteLexical, scope: RagScope, rows: Any) -> None:
        real_insert(self, scope, rows)  # chunk rows, vectors and lexical rows all written...
        os.kill(os.getpid(), signal.SIGKILL)  # ...and the process dies before COMMIT

    SqliteLexical.insert = insert_then_die  # type: ignore[method-assign]
    store.chunks.add_chunks(
        SCOPES[0], [Chunk(f"k{i}", "r1", "s", f"killed text {i}", [1.0, 0, 0, 0]) for i in range(3)]
    )


def test_a_writer_killed_mid_transaction_leaves_both_indexes_agreeing(tmp_path: Path) -> None:
    path = str(tmp_path / "rag.db")
    store = open_store(f"sqlite:///{path}")
    _add(store, SCOPES[0], "committed text")
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_writer_killed_mid_transaction, args=(path,))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    chunks = _chunks(store)
    assert chunks.count_chunks(SCOPES[0]) == 1 and _fts_rows(chunks, SCOPES[0]) == 1
    assert chunks.lexical_query(SCOPES[0], "killed", 5, vector=[1.0, 0, 0, 0]) == []
    assert int(chunks.db.query("SELECT count(*) FROM chunks")[0][0]) == 1
    # the store goes on: the next write lands in both indexes
    _add(store, SCOPES[0], "killed text written again")
    assert len(chunks.lexical_query(SCOPES[0], "killed", 5, vector=[1.0, 0, 0, 0])) == 1
    assert _fts_rows(chunks, SCOPES[0]) == 2
    store.close()


def test_writes_of_this_process_are_absorbed_and_still_rank_as_fts5(
    pair: tuple[SqliteStore, SqliteStore],
) -> None:
    """Re-indexes, additions and removals interleaved with queries: after each write of the
    cached store, its in-process index is already at the RAG's new epoch (the write's delta
    was applied, no reload, no fallback) and ranks as FTS5 does, bit for bit; a write through
    the other handle (another process) is still seen."""
    cached, plain = pair
    cache = _chunks(cached).lexical.cache
    assert cache is not None
    cache.reload_cooldown_s = 3600.0  # a stale index would fall back, not refresh
    rng = random.Random(11)
    vec = [1.0, 0.5, 0.25, 0.125]

    def chunks_of(scope: RagScope, source: str) -> list[Chunk]:
        return [
            Chunk(uuid.uuid4().hex, scope.rag_id, source, _text(rng), vec)
            for _ in range(rng.randint(0, 6))
        ]

    for scope in SCOPES:
        for i in range(8):
            cached.chunks.replace_source(scope, f"s{i}", chunks_of(scope, f"s{i}"))
    queries = [_text(rng) or "cell" for _ in range(12)]

    def agree(scope: RagScope) -> None:
        for query in queries:
            fast, fts = _both(pair, scope, query)
            assert [r for r, _ in fast] == [r for r, _ in fts], query
            assert [s for _, s in fast] == [s for _, s in fts], query

    for scope in SCOPES:
        agree(scope)  # the first load
    reloads = cache.reloads
    for step in range(60):
        scope = SCOPES[step % len(SCOPES)]
        source = f"s{rng.randint(0, 9)}"
        action = rng.random()
        if action < 0.6:
            cached.chunks.replace_source(scope, source, chunks_of(scope, source))
        elif action < 0.8:
            cached.chunks.add_chunks(scope, chunks_of(scope, source))
        else:
            cached.chunks.remove_by_source(scope, source)
        key = (scope.tenant_id, scope.project_id, scope.rag_id)
        assert cache.epoch_of(key) == _chunks(cached).epoch(scope.rag_id), step
        agree(scope)
    assert cache.reloads - reloads >= 40  # deltas applied (remove_by_source of nothing: none)
    # A write through the other handle moves the epoch without a delta: the cached store
    # refreshes from the database (cooldown off) and still agrees.
    cache.reload_cooldown_s = 0.0
    plain.chunks.replace_source(SCOPES[0], "s1", chunks_of(SCOPES[0], "s1"))
    agree(SCOPES[0])
    key = (SCOPES[0].tenant_id, SCOPES[0].project_id, SCOPES[0].rag_id)
    assert cache.epoch_of(key) == _chunks(plain).epoch(SCOPES[0].rag_id)
    cached.chunks.replace_source(SCOPES[0], "s2", chunks_of(SCOPES[0], "s2"))
    assert cache.epoch_of(key) == _chunks(cached).epoch(SCOPES[0].rag_id)
    agree(SCOPES[0])


def test_a_rolled_back_write_is_not_absorbed(pair: tuple[SqliteStore, SqliteStore]) -> None:
    cached, _ = pair
    cache = _chunks(cached).lexical.cache
    assert cache is not None
    scope = SCOPES[0]
    first = _add(cached, scope, "cell gene")
    _both(pair, scope, "cell")
    key = (scope.tenant_id, scope.project_id, scope.rag_id)
    epoch = cache.epoch_of(key)
    vec = [1.0, 0.5, 0.25, 0.125]
    with pytest.raises(InvalidInputError):  # a chunk id twice: the transaction rolls back
        cached.chunks.replace_source(
            scope, "other", [Chunk(uuid.uuid4().hex, scope.rag_id, "other", "cell", vec)] * 2
        )
    assert cache.epoch_of(key) == epoch == _chunks(cached).epoch(scope.rag_id)
    fast, fts = _both(pair, scope, "cell")
    assert fast == fts and len(fast) == 1 and first
