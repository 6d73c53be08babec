"""The PostgreSQL store's own tests, on the real server of ``postgres_support``: ``init``
(before, once, twice), URIs and credentials, privileges, faults (a terminated backend, a
statement timeout, the error mapping), NUL characters, dimensions, and filtered recall.

The contract suite (``conftest.STORE_FACTORIES``) covers the ports; what is here needs SQL
or the adapter's internals.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np
import psycopg
import pytest
from pydantic import ValidationError

import postgres_support
from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import Chunk, IndexState, ProjectStatus, RagRecord
from vancetope_rag.errors import InvalidInputError, StoreError, StoreFullError
from vancetope_rag.store import open_store
from vancetope_rag.store.port.documents import CleanMark
from vancetope_rag.store.port.types import DocumentChange, NewDocument, RagScope
from vancetope_rag.store.postgres import schema
from vancetope_rag.store.postgres.chunks import dense_sql, probes_sql, search_list
from vancetope_rag.store.postgres.errors import ConstraintViolation, store_error
from vancetope_rag.store.postgres.rows import vector_literal
from vancetope_rag.store.postgres.schema import HNSW_EF_CONSTRUCTION, HNSW_M
from vancetope_rag.store.postgres.store import PostgresStore, open_postgres_store
from vancetope_rag.store.postgres.uri import PostgresUri, redact_uri, with_defaults

T, P = "tenant-a", "proj-1"


def rag(rag_id: str, dim: int = 8, *, name: str | None = None, tenant: str = T) -> RagRecord:
    return RagRecord(rag_id, tenant, P, name or rag_id, "test", f"model-{dim}", dim, 200, 20)


def unit(i: int, dim: int = 8) -> list[float]:
    v = [0.0] * dim
    v[i % dim] = 1.0
    return v


@pytest.fixture
def schema_uri() -> Iterator[str]:
    name, uri = postgres_support.fresh_schema()
    yield uri
    postgres_support.drop_schema(name)


@pytest.fixture
def store(schema_uri: str) -> Iterator[PostgresStore]:
    opened = open_postgres_store(schema_uri)
    opened.initialize()
    yield opened
    opened.close()


# -- indexing --------------------------------------------------------------------------------


def test_the_clean_mark_is_one_statement_read_on_the_servers_clock(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marking a claimed document clean runs one UPDATE, which reads the server's clock itself:
    what a no-op reindex costs each document besides its chunk counts (before: a transaction
    around it and a clock query of its own)."""
    control = store.control
    doc = control.insert_document(NewDocument(T, P, "a.md", "text/plain", "hi"))
    control.mark_dirty(T, P, [doc.id])
    (claimed,) = control.claim_for_rag_index(T, P, "w1", 10, 60.0)
    statements: list[str] = []
    for name in ("query", "query_dicts", "execute", "transaction"):
        real = getattr(store.db, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            statements.append(_name if _name == "transaction" else args[0])
            return _real(*args, **kwargs)

        monkeypatch.setattr(store.db, name, counted)
    before = store.db.server_time()
    statements.clear()
    assert control.mark_rag_clean(
        CleanMark(
            T, P, doc.id, "w1", claimed.rag_version, state=IndexState.INDEXED, indexed_hash="h:1"
        )
    )
    assert len(statements) == 1 and statements[0].startswith("UPDATE documents")
    monkeypatch.undo()
    after = store.db.server_time()
    marked = control.get_document(T, P, doc.id)
    assert marked is not None and marked.indexed_at is not None
    assert before <= marked.indexed_at.timestamp() <= after
    assert not marked.rag_dirty and marked.rag_claimed_by is None


# -- init ------------------------------------------------------------------------------------


def test_a_store_before_init_fails_fast_naming_init(schema_uri: str) -> None:
    store = open_postgres_store(schema_uri)  # opening creates nothing
    try:
        for call in (
            lambda: store.control.list_projects(),
            lambda: store.chunks.query(RagScope(T, P, "r", 8), unit(0), 3),
            lambda: store.control.insert_rag(rag("r")),
        ):
            with pytest.raises(StoreError, match=r"not initialised: run `vancetope-rag"):
                call()
        tables = postgres_support.admin().execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s",
            (PostgresUri.parse(schema_uri).schema,),
        )
        assert tables.fetchone() == (0,)  # nothing was created by a query
    finally:
        store.close()


def test_init_on_an_empty_schema_then_again_is_a_no_op(schema_uri: str) -> None:
    store = open_postgres_store(schema_uri)
    try:
        statuses = store.initialize(dimensions=[8])
        assert [(s.collection, s.ready) for s in statuses] == [("chunks_8", True)]
        doc = store.control.insert_document(NewDocument(T, P, "a.md", "text/plain", "hi"))
        scope = RagScope.of(store.control.insert_rag(rag("r")))
        store.chunks.add_chunks(scope, [Chunk("c1", "r", doc.id, "hello", unit(0))])
        again = store.initialize(dimensions=[8])  # idempotent: every deployment runs it
        assert [s.collection for s in again] == ["chunks_8"]
        assert store.control.get_document(T, P, doc.id) == doc
        assert store.chunks.count_chunks(scope) == 1
        versions = store.db.query("SELECT version FROM vtr_schema")
        assert versions == [(schema.SCHEMA_VERSION,)]
    finally:
        store.close()


def test_a_newer_schema_is_refused(store: PostgresStore, schema_uri: str) -> None:
    store.db.execute("UPDATE vtr_schema SET version = 99")
    other = open_postgres_store(schema_uri)
    try:
        with pytest.raises(StoreError, match="newer than this vancetope-rag"):
            other.control.list_projects()
        with pytest.raises(StoreError, match="newer than this vancetope-rag"):
            other.initialize()
    finally:
        other.close()


def test_dimensions_beyond_halfvec_hnsw_are_refused_with_the_reason(store: PostgresStore) -> None:
    with pytest.raises(StoreError, match="at most 4000 dimensions"):
        store.chunks.prepare_dimension(4001)
    scope = RagScope.of(store.control.insert_rag(rag("wide", 3000)))
    store.chunks.add_chunks(scope, [Chunk("w", "wide", "s", "wide text", unit(5, 3000))])
    (hit,) = store.chunks.query(scope, unit(5, 3000), 3)
    assert hit.chunk_id == "w" and hit.score == pytest.approx(1.0, abs=1e-6)


def test_a_query_never_creates_a_dimension(store: PostgresStore) -> None:
    scope = RagScope(T, P, "r", 24)
    assert store.chunks.query(scope, unit(0, 24), 3) == []
    assert store.chunks.lexical_query(scope, "hello", 3, vector=unit(0, 24)) == []
    assert store.db.known_dimensions() == []


# -- URIs and credentials --------------------------------------------------------------------


def test_our_uri_parameters_are_taken_out_and_the_rest_pass_through() -> None:
    uri = PostgresUri.parse(
        "postgresql://app:pa%24s@db.example.net:6432/rag?sslmode=require&schema=tenant_a"
        "&pool_size=3&statement_timeout_ms=250&vector_index=none&application_name=x"
    )
    assert (uri.schema, uri.pool_size, uri.statement_timeout_ms, uri.hnsw) == (
        "tenant_a",
        3,
        250,
        False,
    )
    assert uri.conninfo == (
        "postgresql://app:pa%24s@db.example.net:6432/rag?sslmode=require&application_name=x"
    )
    assert uri.password == "pa$s"
    assert uri.shown == (
        "postgresql://app:***@db.example.net:6432/rag?sslmode=require&schema=tenant_a"
        "&pool_size=3&statement_timeout_ms=250&vector_index=none&application_name=x"
    )
    spaced = PostgresUri.parse("postgresql://h/db?options=-c%20work_mem%3D8MB&schema=s")
    assert spaced.conninfo == "postgresql://h/db?options=-c%20work_mem%3D8MB"  # no "+"
    assert redact_uri("postgres://u:p@h/db?password=secret&x=1") == (
        "postgres://u:***@h/db?password=***&x=1"
    )


def test_engine_settings_fill_what_the_uri_leaves_out() -> None:
    config = EngineConfig(
        store="postgresql://u:pw@h/db?pool_size=3",
        postgres_pool_size=9,
        postgres_statement_timeout_ms=250,
        postgres_sslmode="require",
        postgres_schema="tenant_a",
        postgres_vector_index="none",
    )
    uri = PostgresUri.parse(with_defaults(config.store, config.store_uri_defaults()))
    assert (uri.pool_size, uri.statement_timeout_ms, uri.schema, uri.hnsw) == (
        3,  # the URI's own value wins
        250,
        "tenant_a",
        False,
    )
    assert "sslmode=require" in uri.conninfo and "pw" not in uri.shown
    assert EngineConfig(store="sqlite:///x.db", postgres_pool_size=9).store_uri_defaults() == {}


def test_bad_engine_settings_for_postgres_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VANCETOPE_RAG_POSTGRES_POOL_SIZE", "0")
    with pytest.raises(ValidationError, match="VANCETOPE_RAG_POSTGRES_POOL_SIZE"):
        EngineConfig()
    monkeypatch.delenv("VANCETOPE_RAG_POSTGRES_POOL_SIZE")
    monkeypatch.setenv("VANCETOPE_RAG_POSTGRES_SSLMODE", "sometimes")
    with pytest.raises(ValidationError, match="VANCETOPE_RAG_POSTGRES_SSLMODE"):
        EngineConfig()


def test_an_app_opened_from_engine_settings_uses_their_schema_and_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, uri = postgres_support.fresh_schema()
    parts = urlsplit(uri)
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    bare = urlunsplit(parts._replace(query=urlencode(kept)))
    monkeypatch.setenv("VANCETOPE_RAG_POSTGRES_SCHEMA", name)
    monkeypatch.setenv("VANCETOPE_RAG_POSTGRES_STATEMENT_TIMEOUT_MS", "4321")
    app = RagApp.open(EngineConfig(store=bare))
    try:
        app.init_store()
        store = app.store
        assert isinstance(store, PostgresStore)
        assert store.db.query("SHOW statement_timeout") == [("4321ms",)]
        assert store.db.query("SELECT current_schema()") == [(name,)]
    finally:
        app.close()
        postgres_support.drop_schema(name)


@pytest.mark.parametrize(
    ("query", "expect"),
    [
        ("schema=1bad", "invalid schema"),
        ("schema=a;drop", "invalid schema"),
        ("pool_size=0", "pool_size"),
        ("statement_timeout_ms=soon", "statement_timeout_ms"),
        ("vector_index=ivf", "vector_index"),
    ],
)
def test_bad_uri_parameters_are_refused(query: str, expect: str) -> None:
    with pytest.raises(StoreError, match=expect):
        PostgresUri.parse(f"postgresql://u:pw@h/db?{query}")


def test_credentials_never_appear_in_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    secret = "Sup3rSecretPassw0rd"
    caplog.set_level(logging.DEBUG)
    for uri in (
        f"postgresql://app:{secret}@127.0.0.1:1/rag",
        f"postgres://127.0.0.1:1/rag?user=app&password={secret}",
    ):
        with pytest.raises(StoreError) as info:
            open_store(uri)
        assert secret not in str(info.value)
        assert "cannot open store" in str(info.value) and "***" in str(info.value)
    assert secret not in caplog.text
    err = store_error(psycopg.OperationalError(f"auth failed for {secret}"), "x", password=secret)
    assert secret not in str(err)


# -- faults ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sqlstate", "kind", "words"),
    [
        ("53100", StoreFullError, "is full"),
        ("57014", StoreError, "statement_timeout_ms"),
        ("57P01", StoreError, "lost the connection"),
        ("57P02", StoreError, "lost the connection"),
        ("08006", StoreError, "lost the connection"),
        ("23505", ConstraintViolation, "constraint"),
        ("42501", StoreError, "privilege"),
        ("42P01", StoreError, "init"),
        ("53300", StoreError, "pool_size"),
        ("25006", StoreError, "read-only"),
    ],
)
def test_server_errors_map_to_actionable_store_errors(
    sqlstate: str, kind: type[StoreError], words: str
) -> None:
    exc = psycopg.errors.lookup(sqlstate)("server says no")
    err = store_error(exc, "postgresql://app:***@h/db", timeout_ms=250)
    assert type(err) is kind
    assert words in str(err) and "postgresql://app:***@h/db" in str(err)


def _our_backends() -> list[int]:
    # This run's database only: on a server named by VANCETOPE_RAG_TEST_POSTGRES_URI other
    # runs (or a benchmark) hold vancetope-rag connections too.
    rows = postgres_support.admin().execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'vancetope-rag' "
        "AND datname = current_database() AND pid <> pg_backend_pid()"
    )
    return [int(r[0]) for r in rows.fetchall()]


def _terminate(pids: list[int]) -> None:
    for pid in pids:
        postgres_support.admin().execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def test_a_checkout_of_a_sound_connection_sends_nothing_to_the_server(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement outside a transaction borrows a pooled connection: checking it must not
    cost a round trip of its own (psycopg_pool's check sends an empty query, which doubled
    the round trips of every such statement). A backend that ended is still replaced: the
    test below."""
    store.control.list_projects()  # the pool's connection open and the schema checked
    sent: list[str] = []
    real = psycopg.Connection.execute

    def execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    for _ in range(3):
        assert store.db.query("SELECT 1") == [(1,)]
    assert sent == ["SELECT 1"] * 3


def test_a_terminated_backend_costs_one_call_and_the_next_reconnects(
    store: PostgresStore,
) -> None:
    control = store.control
    control.upsert_project(T, P, status=ProjectStatus.RUNNING, home_node=None)
    _terminate(_our_backends())  # idle pooled connections: replaced on checkout
    assert [p.project_id for p in control.list_projects()] == [P]
    with pytest.raises(StoreError, match="lost the connection"), control.transaction():
        ((pid,),) = store.db.query("SELECT pg_backend_pid()")
        _terminate([int(pid)])
        control.insert_document(NewDocument(T, P, "a.md", "text/plain", "lost"))
    assert control.list_documents(T, P) == []  # nothing of the failed step was kept
    assert (
        control.insert_document(NewDocument(T, P, "a.md", "text/plain", "kept")).content == "kept"
    )


def test_a_statement_timeout_is_a_store_error_naming_the_setting(schema_uri: str) -> None:
    store = open_postgres_store(schema_uri + "&statement_timeout_ms=100")
    try:
        store.initialize()
        with pytest.raises(StoreError, match=r"longer than 100 ms.*statement_timeout_ms"):
            store.db.query("SELECT pg_sleep(2)")
        assert store.control.list_projects() == []  # the connection is usable again
    finally:
        store.close()


# -- privileges ------------------------------------------------------------------------------


@pytest.fixture
def bare_database() -> Iterator[tuple[str, str, str]]:
    """A database without pgvector, a role that may create schemas in it but not extensions,
    and that role's URI with its own schema: ``(database, role, uri)``."""
    admin = postgres_support.admin()
    suffix = uuid.uuid4().hex[:8]
    db, role, password = f"vtr_bare_{suffix}", f"vtr_app_{suffix}", f"pw_{suffix}_secret"
    admin.execute(f'CREATE DATABASE "{db}"')
    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    admin.execute(f'GRANT CREATE ON DATABASE "{db}" TO {role}')
    yield db, role, _role_uri(db, role, password)
    admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    admin.execute(f"DROP ROLE IF EXISTS {role}")


def _role_uri(db: str, role: str, password: str) -> str:
    """The URI of the test server's database ``db`` as ``role``, in schema ``app``."""
    params = psycopg.conninfo.conninfo_to_dict(postgres_support.database_uri())
    where = f"host={params.get('host', '')}" + (
        f"&port={params['port']}" if params.get("port") else ""
    )
    return f"postgresql://{role}:{password}@/{db}?{where}&schema=app&vector_index=none"


def _as_superuser(db: str) -> psycopg.Connection[Any]:
    base = postgres_support.database_uri()
    return psycopg.connect(base, dbname=db, autocommit=True)


def test_init_says_how_to_get_pgvector_when_the_role_may_not_create_it(
    bare_database: tuple[str, str, str],
) -> None:
    db, _role, uri = bare_database
    store = open_postgres_store(uri)
    try:
        with pytest.raises(StoreError, match="may not create the pgvector extension") as info:
            store.initialize()
        assert "CREATE EXTENSION vector" in str(info.value)
        assert "_secret" not in str(info.value)
        with _as_superuser(db) as su:
            su.execute("CREATE EXTENSION vector")
        store.initialize(dimensions=[8])  # the extension exists: the role needs no more
        scope = RagScope.of(store.control.insert_rag(rag("r")))
        store.chunks.add_chunks(scope, [Chunk("c", "r", "s", "text", unit(1))])
        assert [h.chunk_id for h in store.chunks.query(scope, unit(1), 1)] == ["c"]
    finally:
        store.close()


def test_a_role_that_may_not_create_tables_is_told_to_run_init_dimension(
    bare_database: tuple[str, str, str],
) -> None:
    db, role, uri = bare_database
    with _as_superuser(db) as su:
        su.execute("CREATE EXTENSION vector")
    owner = open_postgres_store(uri)
    owner.initialize()
    owner.close()
    reader = f"{role}_dml"
    with _as_superuser(db) as su:
        su.execute(f"CREATE ROLE {reader} LOGIN PASSWORD 'dml_pw_secret'")
        su.execute(f"GRANT USAGE ON SCHEMA app TO {reader}")
        su.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA app TO {reader}")
        su.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA app TO {reader}")
    app = open_postgres_store(_role_uri(db, reader, "dml_pw_secret"))
    try:
        scope = RagScope.of(app.control.insert_rag(rag("r", 12)))
        with pytest.raises(StoreError, match=r"init --dimension 12"):
            app.chunks.add_chunks(scope, [Chunk("c", "r", "s", "text", unit(1, 12))])
        assert app.chunks.query(scope, unit(1, 12), 3) == []
    finally:
        app.close()
        with _as_superuser(db) as su:
            su.execute(f"DROP OWNED BY {reader}")
        postgres_support.admin().execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        postgres_support.admin().execute(f"DROP ROLE IF EXISTS {reader}")


# -- NUL characters: the SQLite store's answers ----------------------------------------------


def _nul_answers(uri: str) -> list[Any]:
    store = open_store(uri)
    try:
        if isinstance(store, PostgresStore):
            store.initialize()
        c = store.control
        doc = c.insert_document(
            NewDocument(T, P, "a\x00b.md", "text/plain", "he\x00llo \x01 x", summary="s\x00")
        )
        c.update_document(T, P, doc.id, DocumentChange(content="new\x00\x01\x00"))
        record = c.insert_rag(rag("r\x00", name="n\x00"))
        scope = RagScope.of(record)
        store.chunks.add_chunks(
            scope,
            [
                Chunk(
                    "c\x001",
                    record.id,
                    "src\x00",
                    "text wi\x00th nul",
                    unit(0),
                    path="p\x00",
                    metadata={"k\x00": "v\x00"},
                )
            ],
        )
        c.set_setting(T, None, "k\x00", "v\x00\x01")
        got = c.get_document(T, P, doc.id)
        assert got is not None
        hits = store.chunks.get_chunks(scope, filters={"path": "p\x00"})
        return [
            (got.path, got.content, got.summary),
            c.find_rag(T, P, "n\x00") is not None,
            [(h.chunk_id, h.text, h.source_ref, h.path, h.metadata) for h in hits],
            [h.chunk_id for h in store.chunks.lexical_query(scope, "text", 3, vector=unit(0))],
            c.get_settings(T, None),
        ]
    finally:
        store.close()


def test_text_with_nul_characters_gives_the_sqlite_stores_answers(
    schema_uri: str, tmp_path: Any
) -> None:
    assert _nul_answers(schema_uri) == _nul_answers(f"sqlite:///{tmp_path}/rag.db")
    # A path prefix holding NUL finds its document here (SQLite's substr() stops at NUL,
    # so it finds nothing there: not an answer worth copying).
    store = open_postgres_store(schema_uri)
    try:
        store.control.insert_document(NewDocument(T, P, "b\x00c.md", "text/plain", "x"))
        found = store.control.list_documents(T, P, path_prefix="b\x00")
        assert [d.path for d in found] == ["b\x00c.md"]
    finally:
        store.close()


def test_a_lone_surrogate_is_invalid_input_as_on_sqlite(store: PostgresStore) -> None:
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.control.insert_document(NewDocument(T, P, "a.md", "text/plain", "bad \ud800"))
    assert store.control.list_documents(T, P) == []


# -- filtered recall -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hnsw",
    [
        pytest.param(False, id="scan"),
        pytest.param(
            True,
            id="hnsw",
            marks=[
                pytest.mark.skipif(
                    not postgres_support.hnsw_supported(), reason=postgres_support.NO_HNSW
                ),
                pytest.mark.slow,  # 12 s of a core: `make test-all`
            ],
        ),
    ],
)
def test_a_rag_holding_1pct_of_the_table_gets_its_exact_top_k(hnsw: bool) -> None:
    """5,000 chunks of other RAGs, 50 of ours; the index path (exact scans off) must
    return the exact top 10 of ours, by numpy."""
    name, uri = postgres_support.fresh_schema(hnsw=hnsw)
    store = open_postgres_store(uri, exact_scan_max=0)
    try:
        store.initialize(dimensions=[32])
        rng = np.random.default_rng(7)
        others = RagScope.of(store.control.insert_rag(rag("big", 32)))
        vecs = rng.standard_normal((5000, 32)).astype(np.float32)
        for start in range(0, 5000, 1000):
            store.chunks.add_chunks(
                others,
                [
                    Chunk(f"o{i}", "big", f"s{i % 50}", "other", vecs[i].tolist())
                    for i in range(start, start + 1000)
                ],
            )
        mine = RagScope.of(store.control.insert_rag(rag("small", 32)))
        ours = rng.standard_normal((50, 32)).astype(np.float32)
        store.chunks.add_chunks(
            mine, [Chunk(f"m{i}", "small", "s", "mine", v.tolist()) for i, v in enumerate(ours)]
        )
        unit_ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
        for q in rng.standard_normal((5, 32)).astype(np.float32):
            exact = np.argsort(-(unit_ours @ (q / np.linalg.norm(q))))[:10]
            hits = store.chunks.query(mine, q.tolist(), 10)
            assert [h.chunk_id for h in hits] == [f"m{i}" for i in exact]
        # the calibrator's probes, all in one statement, through the same path
        probes = rng.standard_normal((6, 32)).astype(np.float32)
        best = [(unit_ours @ (q / np.linalg.norm(q))).max() for q in probes]
        assert store.chunks.best_scores(mine, probes.tolist()) == pytest.approx(best, abs=1e-6)
        assert store.chunks.best_scores(mine, probes.tolist()) == [
            store.chunks.query(mine, q.tolist(), 1)[0].score for q in probes
        ]
    finally:
        store.close()
        postgres_support.drop_schema(name)


# -- lexical meaning: the SQLite store's -----------------------------------------------------

CORPUS = [
    "Cats purr and cats sleep.",
    "The café serves crème brûlée",
    "A naive resume of running",
    "Résumé writing for naïve runners",
    "the and of",
]
#: Stemming (cats, running, runner), accents folded both ways, stopwords kept in texts and
#: dropped from queries unless a query holds nothing else.
QUERIES = [
    "cats",
    "cafe",
    "café",
    "naïve résumé",
    "running",
    "the",
    "CRÈME",
    "runner",
    "sleeping cat",
]


def _lexical_hits(store: Any) -> dict[str, list[str]]:
    if isinstance(store, PostgresStore):
        store.initialize()
    scope = RagScope.of(store.control.insert_rag(rag("r", 4)))
    store.chunks.add_chunks(
        scope, [Chunk(f"c{i}", "r", "s", text, unit(0, 4)) for i, text in enumerate(CORPUS)]
    )
    return {
        q: [h.chunk_id for h in store.chunks.lexical_query(scope, q, 10, vector=unit(0, 4))]
        for q in QUERIES
    }


def test_lexical_hits_mean_what_they_mean_on_sqlite(schema_uri: str, tmp_path: Any) -> None:
    """The same words find the same chunks in the same order (scores differ a little: the
    stemmers are Porter's and Snowball's, and PostgreSQL splits ``snake_case`` words)."""
    sqlite, postgres = open_store(f"sqlite:///{tmp_path}/rag.db"), open_store(schema_uri)
    try:
        assert _lexical_hits(postgres) == _lexical_hits(sqlite)
    finally:
        sqlite.close()
        postgres.close()


# -- lexical statistics, and the passes that keep BM25 bounded -----------------------------

#: Words by frequency: the first ones are in most chunks, the last in a few.
VOCABULARY = [f"w{i:02d}x" for i in range(40)]


def _text(rng: np.random.Generator) -> str:
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1) ** 1.1
    picks = rng.choice(len(VOCABULARY), size=int(rng.integers(3, 12)), p=weights / weights.sum())
    return " ".join(VOCABULARY[i] for i in picks)


def _kept_and_counted(store: PostgresStore, scope: RagScope) -> tuple[Any, Any]:
    table = schema.chunk_table(scope.dimension)
    key = (scope.tenant_id, scope.project_id, scope.rag_id)
    where = "tenant_id = %s AND project_id = %s AND rag_id = %s"
    kept = (
        store.db.query(f"SELECT n_rows, n_tokens FROM rag_text_stats WHERE {where}", key)
        or [(0, 0)],
        dict(store.db.query(f"SELECT lexeme, df FROM rag_terms WHERE {where} AND df <> 0", key)),
    )
    counted = (
        store.db.query(
            f"SELECT count(*), coalesce(sum(n_tokens), 0) FROM {table} WHERE {where}", key
        ),
        dict(
            store.db.query(
                f"SELECT l.lexeme, count(*) FROM {table} c CROSS JOIN LATERAL unnest(c.tsv) l "
                f"WHERE c.{where.replace(' AND ', ' AND c.')} GROUP BY 1",
                key,
            )
        ),
    )
    return kept, counted


def test_lexical_statistics_follow_every_write(store: PostgresStore) -> None:
    """Adds, replacements, removals by source, id and filter, and another RAG's drop: the
    statistics the triggers keep are the RAG's chunks counted again, after every step."""
    rng = np.random.default_rng(3)
    mine = RagScope.of(store.control.insert_rag(rag("mine", 4)))
    other = RagScope.of(store.control.insert_rag(rag("other", 4)))

    def chunks(scope: RagScope, source: str, n: int) -> list[Chunk]:
        return [
            Chunk(uuid.uuid4().hex, scope.rag_id, source, _text(rng), unit(i, 4)) for i in range(n)
        ]

    store.chunks.add_chunks(other, chunks(other, "o", 5))
    steps = [
        lambda: store.chunks.add_chunks(mine, chunks(mine, "a", 6)),
        lambda: store.chunks.add_chunks(mine, chunks(mine, "b", 4) + chunks(mine, "c", 3)),
        lambda: store.chunks.replace_source(mine, "a", chunks(mine, "a", 2)),
        lambda: store.chunks.replace_source(mine, "d", chunks(mine, "d", 3), chunk_version=5),
        lambda: store.chunks.replace_source(mine, "d", chunks(mine, "d", 9), chunk_version=4),
        lambda: store.chunks.remove_by_source(mine, "b"),
        lambda: store.chunks.remove_chunks(
            mine, chunk_ids=[h.chunk_id for h in store.chunks.get_chunks(mine)][:2]
        ),
        lambda: store.chunks.drop_rag(other),
        lambda: store.chunks.replace_source(mine, "c", []),
    ]
    for step in steps:
        step()
        kept, counted = _kept_and_counted(store, mine)
        assert kept == counted
    assert _kept_and_counted(store, other) == (([(0, 0)], {}), ([(0, 0)], {}))
    assert store.db.query("SELECT count(*) FROM rag_terms WHERE rag_id = 'other'") == [(0,)]


def test_init_counts_the_statistics_of_chunks_written_before_them(store: PostgresStore) -> None:
    """A store at schema version 2 (no statistics) with chunks: ``init`` counts them."""
    rng = np.random.default_rng(4)
    scope = RagScope.of(store.control.insert_rag(rag("r", 4)))
    store.chunks.add_chunks(
        scope, [Chunk(f"c{i}", "r", f"s{i % 3}", _text(rng), unit(i, 4)) for i in range(30)]
    )
    store.db.execute("DROP FUNCTION vtr_count_terms() CASCADE")  # and the triggers
    store.db.execute("DROP FUNCTION vtr_count_terms_of(text)")
    store.db.execute("DROP TABLE rag_text_stats, rag_terms")
    store.db.execute("ALTER TABLE documents DROP COLUMN metadata")  # step 4's
    store.db.execute("UPDATE vtr_schema SET version = 2")
    store.initialize()
    kept, counted = _kept_and_counted(store, scope)
    assert kept == counted and counted[0] == [(30, counted[0][0][1])]
    store.chunks.remove_by_source(scope, "s0")  # and the triggers are back
    assert _kept_and_counted(store, scope)[0] == _kept_and_counted(store, scope)[1]


def test_bounded_lexical_passes_rank_as_scoring_every_match(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rare words select the rows first and common ones join only when a row without the
    rare ones could still reach the top k: the hits and scores are those of one pass over
    every matching row, for queries whose rare words match fewer rows than ``top_k`` too."""
    from vancetope_rag.store.postgres import lexical

    rng = np.random.default_rng(5)
    store.chunks.lexical_index = None  # the SQL passes, not the in-process postings
    scope = RagScope.of(store.control.insert_rag(rag("r", 4)))
    store.chunks.add_chunks(
        scope, [Chunk(f"c{i}", "r", f"s{i}", _text(rng), unit(i, 4)) for i in range(400)]
    )
    queries = [" ".join(rng.choice(VOCABULARY, size=int(rng.integers(1, 6)))) for _ in range(40)]
    queries += ["w00x w39x", "w39x", "w00x w01x w02x", "w38x w37x w00x"]
    passes = []
    real = store.db.query_dicts

    def counting(sql: str, params: Any = (), **kwargs: Any) -> Any:
        passes.append(sql)
        return real(sql, params, **kwargs)

    def ranked(budget: int) -> list[list[tuple[str, float]]]:
        monkeypatch.setattr(lexical, "MATCH_BUDGET", budget)
        return [
            [
                (h.chunk_id, h.lexical_score or 0.0)
                for h in store.chunks.lexical_query(scope, q, 8, vector=unit(0, 4))
            ]
            for q in queries
        ]

    every_match = ranked(10**9)
    monkeypatch.setattr(store.db, "query_dicts", counting)
    bounded = ranked(0)
    assert bounded == every_match
    assert len(passes) > len(queries)  # some queries needed a second pass …
    assert all(len(r) == 8 for r in every_match[-4:])  # … and the last four are full


def _ranked(store: PostgresStore, scope: RagScope, queries: list[str]) -> list[Any]:
    return [
        [
            (h.chunk_id, round(h.lexical_score or 0.0, 9), round(h.score, 6))
            for h in store.chunks.lexical_query(scope, q, 8, vector=unit(1, 4))
        ]
        for q in queries
    ]


def test_the_in_process_postings_rank_as_the_sql_passes_after_every_write(
    store: PostgresStore, schema_uri: str
) -> None:
    """The postings fed from the stored ``tsvector``\\ s give the SQL path's hits, scores and
    cosines, for a RAG that shares its table with another, after adds, replacements and
    removals (each moves the RAG's epoch), also written by another process's store."""
    from vancetope_rag.store.postgres.lexical_index import PostgresLexicalIndex

    rng = np.random.default_rng(7)
    indexed = store.chunks.lexical_index
    assert isinstance(indexed, PostgresLexicalIndex)
    sql_only = open_postgres_store(schema_uri, lexical_index=False)  # a second process
    scope = RagScope.of(store.control.insert_rag(rag("r", 4)))
    other = RagScope.of(store.control.insert_rag(rag("o", 4)))
    quoted = "it's a back\\slash O'Brien w00x"  # lexemes the tsvector text quotes

    def chunks(prefix: str, n: int, rag_id: str = "r") -> list[Chunk]:
        return [
            Chunk(f"{prefix}{i}", rag_id, f"{prefix}{i % 7}", _text(rng), unit(i, 4))
            for i in range(n)
        ]

    queries = [" ".join(rng.choice(VOCABULARY, size=int(rng.integers(1, 6)))) for _ in range(25)]
    queries += ["w39x", "w00x w01x", quoted, "o'brien slash"]
    first = [*chunks("a", 300), Chunk("q", "r", "q", quoted, unit(0, 4))]
    writes = [
        lambda: store.chunks.add_chunks(scope, first),
        lambda: store.chunks.add_chunks(other, chunks("o", 200, "o")),
        lambda: store.chunks.replace_source(scope, "a3", chunks("b", 5)),
        lambda: sql_only.chunks.add_chunks(scope, chunks("c", 40)),
        lambda: sql_only.chunks.remove_by_source(scope, "a5"),
        lambda: store.chunks.remove_chunks(scope, chunk_ids=["a1", "a2", "q"]),
    ]
    try:
        for write in writes:
            write()
            assert _ranked(store, scope, queries) == _ranked(sql_only, scope, queries)
        assert indexed.cache.reloads >= 1
        found = {
            h.chunk_id
            for q in queries
            for h in store.chunks.lexical_query(scope, q, 50, vector=unit(0, 4))
        }
        assert found and not any(chunk_id.startswith("o") for chunk_id in found)
    finally:
        sql_only.close()


def test_tsvector_text_is_read_as_the_server_counts_it(store: PostgresStore) -> None:
    """Quotes, backslashes, weights and lexemes without positions in a ``tsvector``'s text
    form: each lexeme as often as ``cardinality(positions)`` (at least once)."""
    from vancetope_rag.store.postgres.lexical_index import tsvector_tokens

    literal = "'it''s':1,2B 'back\\\\slash':3 'plain' 'x:y':4A,5,6"
    ((text, counted),) = store.db.query(
        "SELECT v::text, (SELECT array_agg(lexeme || '*' || greatest(cardinality(positions), 1) "
        "ORDER BY lexeme) FROM unnest(v)) FROM (SELECT %s::tsvector AS v) t",
        (literal,),
    )
    tokens = tsvector_tokens(text)
    assert sorted(f"{t}*{tokens.count(t)}" for t in set(tokens)) == sorted(counted)
    assert {"it's", "back\\slash", "x:y"} <= set(tokens)


def test_a_large_rag_is_answered_in_sql_while_its_postings_load(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the synchronous limit the first load runs on a thread; the query meanwhile gets
    the SQL path's answer, and the next one the postings' (the same)."""
    from vancetope_rag.store.postgres.lexical_index import PostgresLexicalIndex

    rng = np.random.default_rng(8)
    indexed = store.chunks.lexical_index
    assert isinstance(indexed, PostgresLexicalIndex)
    monkeypatch.setattr(indexed.cache, "sync_build_max_rows", 10)
    scope = RagScope.of(store.control.insert_rag(rag("r", 4)))
    store.chunks.add_chunks(
        scope, [Chunk(f"c{i}", "r", f"s{i}", _text(rng), unit(i, 4)) for i in range(120)]
    )
    searched: list[object] = []
    real = indexed.cache.search
    monkeypatch.setattr(
        indexed.cache, "search", lambda *a, **k: searched.append(found := real(*a, **k)) or found
    )
    first = _ranked(store, scope, ["w03x w10x"])
    assert searched == [None]  # answered by SQL while the thread loads
    assert indexed.cache.wait_idle(30)
    assert _ranked(store, scope, ["w03x w10x"]) == first
    assert searched[-1] is not None


def test_the_index_path_orders_by_what_the_hnsw_index_holds() -> None:
    """The large-scope query can be served by the HNSW index (planned, never run: planning
    executes none of pgvector's HNSW code, so this holds on every CPU), and the exact one
    cannot."""
    name, uri = postgres_support.fresh_schema(hnsw=True)
    store = open_postgres_store(uri)
    try:
        store.initialize(dimensions=[8])  # an empty index: nothing inserted
        with store.db.snapshot(), store.db.connection() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL enable_sort = off")
            params = (T, P, "r", vector_literal(np.ones(8, dtype=np.float32)), 10)
            plans = {
                exact: "\n".join(
                    r[0] for r in conn.execute("EXPLAIN " + dense_sql(8, "", exact=exact), params)
                )
                for exact in (False, True)
            }
        assert "Index Scan using chunks_8_hnsw" in plans[False]
        assert "chunks_8_hnsw" not in plans[True]
        # the graph this store builds, not pgvector's defaults (recall at 1M, see schema.py)
        (definition,) = store.db.query(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_8_hnsw' "
            "AND schemaname = current_schema()"
        )[0]
        assert f"m='{HNSW_M}'" in definition
        assert f"ef_construction='{HNSW_EF_CONSTRUCTION}'" in definition
    finally:
        store.close()
        postgres_support.drop_schema(name)


def _numbered(statement: str) -> str:
    """``%s`` placeholders as ``$1``, ``$2``, …: what the server sees of a prepared statement."""
    numbers = iter(range(1, statement.count("%s") + 1))
    return re.sub("%s", lambda _: f"${next(numbers)}", statement)


def test_prepared_searches_parse_their_vectors_once_not_per_row() -> None:
    """psycopg prepares a statement run five times on a connection, and the server may then
    plan it once for any parameters (a generic plan). There, ``$4::halfvec`` in the sort key
    was parsed again for every row ranked: ~27 µs a row, so the same query took 1.1 ms
    and then 6.2 ms for the rest of the connection's life, at 188 chunks (an exact scan of
    10,000 chunks: a quarter of a second). The dense query's vector must be an InitPlan,
    parsed once; the calibrator's probes, parsed once each before the join (in its first
    version a calibration took 342 ms for it, at 188 chunks)."""
    name, uri = postgres_support.fresh_schema(hnsw=True)
    store = open_postgres_store(uri)
    try:
        store.initialize(dimensions=[8])
        for exact in (False, True):
            for statement in (dense_sql(8, "", exact=exact), probes_sql(8, exact=exact)):
                plan = _generic_plan(store, statement)
                ranked = [
                    line for line in plan.splitlines() if "Sort Key" in line or "Order By" in line
                ]
                assert ranked, plan
                assert not any("::halfvec" in line for line in ranked), plan
            assert "InitPlan" in _generic_plan(store, dense_sql(8, "", exact=exact))
    finally:
        store.close()
        postgres_support.drop_schema(name)


def _generic_plan(store: PostgresStore, statement: str) -> str:
    return "\n".join(r[0] for r in store.db.query("EXPLAIN (GENERIC_PLAN) " + _numbered(statement)))


def test_the_search_list_grows_with_the_scope() -> None:
    """``hnsw.ef_search`` stays 200 up to 100k chunks and grows with the square root of the
    scope beyond (recall@10 at 1M was 0.84 with 200, 0.98 with 600), within pgvector's 1,000."""
    assert search_list(0) == search_list(100_000) == 200
    assert 200 < search_list(400_000) < search_list(1_000_000)
    assert 600 <= search_list(1_000_000) <= 700
    assert search_list(10**9) == 1000


@pytest.fixture
def small_tablespace() -> Iterator[str]:
    """A 2 MiB tmpfs as a tablespace of the bundled server (root only; skipped otherwise)."""
    if os.environ.get(postgres_support.POSTGRES_URI_ENV):
        pytest.skip("the full-disk test mounts a tmpfs for the bundled server only")
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tempfile.mkdtemp(prefix="vtr-small-")  # the server's user must reach it
    os.chmod(mount, 0o755)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mount],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        os.rmdir(mount)
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    name = f"vtr_small_{uuid.uuid4().hex[:8]}"
    try:
        owner = os.stat(postgres_support.data_directory()).st_uid
        os.chown(mount, owner, -1)
        postgres_support.admin().execute(f"CREATE TABLESPACE {name} LOCATION '{mount}'")
        yield name
    finally:
        postgres_support.admin().execute(f"DROP TABLESPACE IF EXISTS {name}")
        subprocess.run(["umount", mount], check=False)
        os.rmdir(mount)


def test_a_full_disk_is_a_store_full_error_and_reads_go_on(small_tablespace: str) -> None:
    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(f"{uri}&options=-c%20default_tablespace%3D{small_tablespace}")
    try:
        store.initialize(dimensions=[8])
        scope = RagScope.of(store.control.insert_rag(rag("r")))
        rng = np.random.default_rng(3)
        written = 0
        with pytest.raises(StoreFullError, match="is full") as info:
            for i in range(400):  # 50 kB of incompressible text each: 2 MiB fill up first
                text = rng.bytes(25_000).hex()
                store.chunks.add_chunks(scope, [Chunk(f"c{i}", "r", f"s{i}", text, unit(i))])
                written += 1
        assert "free space" in str(info.value)
        assert written > 0 and store.chunks.count_chunks(scope) == written
    finally:
        store.close()
        postgres_support.drop_schema(name)


# -- hybrid queries: the dense scan runs while the lexical list is ranked ----------------------


def test_a_pipelined_statement_runs_while_the_caller_works(store: PostgresStore) -> None:
    """``send`` inside ``pipeline`` returns before the server is done: the server runs the
    statement while the caller has not asked for its rows yet (seen in ``pg_stat_activity``,
    not timed: a busy machine stretches durations, never this order)."""
    import time

    statement = "SELECT pg_sleep(1.5), 7 AS seven"
    running = (
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s "
        "AND pid <> pg_backend_pid()"
    )
    with store.db.snapshot(), store.db.pipeline():
        rows = store.db.send(statement)
        deadline = time.monotonic() + 60  # a guard only: it is there within milliseconds
        while postgres_support.admin().execute(running, (statement,)).fetchone() != (1,):
            assert time.monotonic() < deadline, "the statement never reached the server"
            time.sleep(0.01)
        assert rows() == [{"pg_sleep": "", "seven": 7}]


def test_a_hybrid_query_sends_its_dense_scan_before_ranking_the_lexical_list(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dense statement is on its way (one snapshot, in a pipeline) when the lexical list
    is ranked; the hybrid answer is the two lists' fusion as without the pipeline."""
    from vancetope_rag.domain.retrieval.ranking import Candidates, FusionParams

    scope = RagScope.of(store.control.insert_rag(rag("h", 4)))
    words = ["apple", "banana", "cherry", "damson"]
    store.chunks.add_chunks(
        scope,
        [Chunk(f"c{i}", "h", f"s{i}", f"{words[i % 4]} pie {i}", unit(i, 4)) for i in range(40)],
    )
    events: list[str] = []
    send, ranked = store.db.send, store.chunks._lexical_ranked

    def sent(statement: str, *args: Any, **kwargs: Any) -> Any:
        events.append("dense sent" if "ORDER BY" in statement and "<=>" in statement else "sent")
        return send(statement, *args, **kwargs)

    def ranking(*args: Any, **kwargs: Any) -> Any:
        assert store.db.in_transaction()
        events.append("lexical ranked")
        return ranked(*args, **kwargs)

    monkeypatch.setattr(store.db, "send", sent)
    monkeypatch.setattr(store.chunks, "_lexical_ranked", ranking)
    fusion = FusionParams()
    found = store.chunks.hybrid_query(scope, "banana pie", unit(1, 4), 5, fusion=fusion)
    assert events.index("dense sent") < events.index("lexical ranked")
    with store.db.snapshot():
        dense = store.chunks.query(scope, unit(1, 4), 5)
        lexical = store.chunks.lexical_query(scope, "banana pie", 5, vector=unit(1, 4))
        expected = Candidates.hybrid(dense, lexical, 5, fusion)
        assert list(found.hits) == list(expected.hits)
    assert (found.complete, found.cosine_floor) == (expected.complete, expected.cosine_floor)
    assert [h.chunk_id for h in found.hits][:1] == ["c1"]
