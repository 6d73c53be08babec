"""One PostgreSQL database (or one schema of it) through a psycopg connection pool:
connections, transactions, snapshots, and the schema check every call passes.

Connections come from a :class:`psycopg_pool.ConnectionPool` (autocommit; each checked on
checkout, so a connection the server ended is replaced before use: :func:`_check_quietly`).
A transaction or a snapshot holds one connection for the calling thread until it ends;
statements outside one borrow a connection each. This class is the adapters' only way to the
database and the one place where a psycopg error becomes a
:class:`~vancetope_rag.errors.StoreError` (:func:`.postgres.errors.store_error`).

Nothing here creates schema: a store that was never initialised answers every call with a
:class:`StoreError` naming ``init`` (:mod:`.postgres.schema` holds the steps ``init`` runs).
"""

from __future__ import annotations

import contextlib
import select
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import get_logger, register_secret
from vancetope_rag.store.port.shared import check_schema_version
from vancetope_rag.store.postgres import textcodec
from vancetope_rag.store.postgres.errors import scrubbed, store_error
from vancetope_rag.store.postgres.uri import PostgresUri

__all__ = ["SCHEMA_TABLE", "SERVER_NOW", "PostgresDatabase"]

log = get_logger(__name__)

#: The table holding the schema version ``init`` reached.
SCHEMA_TABLE = "vtr_schema"
#: The server's clock in seconds since the epoch, as SQL (leases are measured on it).
SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"

#: How long the readiness probe waits for a pooled connection (the pool's own wait is the
#: connect timeout, 15 s by default: longer than a probe's).
READY_TIMEOUT_S = 2.0


def _check_quietly(conn: psycopg.Connection[Any]) -> None:
    """The pool's check on checkout, without a round trip while the connection is sound.

    psycopg_pool's own check sends an empty query: a second round trip for every statement
    outside a transaction. An idle connection has nothing to read unless the server wrote to
    it unasked: that it ended the session (a restart, ``pg_terminate_backend``, an idle
    timeout) before closing the socket. Only then does the full check run, and fail, so the
    pool opens another. A link cut without a word from the server fails the statement, as it
    would fail the empty query."""
    if conn.closed or _readable(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):  # any descriptor number; select() only below FD_SETSIZE
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


class PostgresDatabase:
    """A pool of connections to the store's database, with per-thread transactions."""

    def __init__(
        self,
        uri: PostgresUri,
        *,
        schema_version: int,
        connect_timeout_s: float = 15.0,
        session_settings: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.uri = uri
        #: Settings every pooled connection makes when it opens (besides the statement
        #: timeout and the search path), e.g. the chunk store's HNSW scan settings.
        self.session_settings = tuple(session_settings)
        self.shown = uri.shown
        register_secret(uri.password)
        self._schema_version = schema_version
        self._local = threading.local()
        self._schema_ok = False
        #: Dimensions whose chunk table is known to exist.
        self.dimensions: set[int] = set()
        self._lock = threading.Lock()
        self._connect_timeout_s = connect_timeout_s
        self._probe(connect_timeout_s)
        self.pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self.uri.conninfo,
            min_size=1,
            max_size=self.uri.pool_size,
            kwargs={"autocommit": True, "application_name": "vancetope-rag"},
            configure=self._configure,
            check=_check_quietly,
            timeout=self._connect_timeout_s,
            num_workers=1,
            open=False,
            name="vancetope-rag",
        )
        pool.open(wait=False)
        return pool

    def reconnect(self) -> None:
        """Replace every pooled connection (``init`` made the extension: a store in its own
        schema puts the extension's schema on its connections' search path)."""
        old, self.pool = self.pool, self._new_pool()
        old.close()

    # -- connections -----------------------------------------------------------------------

    def _probe(self, timeout_s: float) -> None:
        """Connect once on open, so a wrong host, database or password fails at once with
        the server's reason (a pool would only time out)."""
        try:
            conn = psycopg.connect(
                self.uri.conninfo, autocommit=True, connect_timeout=max(1, int(timeout_s))
            )
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open store {self.shown!r}: {scrubbed(exc, self.uri.password)}; check "
                "that the server is up, and the host, port, database, user and password "
                "(sslmode too, for a managed server)"
            ) from exc
        conn.close()

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        textcodec.register(conn)
        settings = [("statement_timeout", str(self.uri.statement_timeout_ms))]
        if self.uri.schema:
            row = conn.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
            ).fetchone()
            names = [self.uri.schema]
            if row and row[0] != self.uri.schema:
                names.append(str(row[0]))
            path = sql.SQL(", ").join(sql.Identifier(n) for n in names).as_string(conn)
            settings.append(("search_path", path))
        settings.extend(self.session_settings)
        for name, value in settings:
            conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    def close(self) -> None:
        self.pool.close()

    # -- errors ----------------------------------------------------------------------------

    def _error(self, exc: BaseException) -> Exception:
        return store_error(
            exc,
            self.shown,
            password=self.uri.password,
            timeout_ms=self.uri.statement_timeout_ms,
        )

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        try:
            yield
        except (psycopg.Error, PoolTimeout, UnicodeEncodeError) as exc:
            raise self._error(exc) from exc

    # -- the schema ------------------------------------------------------------------------

    def schema_version(self, conn: psycopg.Connection[Any]) -> int:
        """The version ``init`` reached (0: never initialised)."""
        found = conn.execute("SELECT to_regclass(%s)", (SCHEMA_TABLE,)).fetchone()
        if not found or found[0] is None:
            return 0
        row = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _require_schema(self, conn: psycopg.Connection[Any]) -> None:
        if self._schema_ok or getattr(self._local, "initializing", False):
            return
        with self._mapped():
            version = self.schema_version(conn)
        if version == self._schema_version:
            self._schema_ok = True
            return
        if version == 0:
            raise StoreError(
                f"store {self.shown!r} is not initialised: run `vancetope-rag --store … init` "
                "once (it creates the pgvector extension and the store's tables)"
            )
        check_schema_version(self.shown, version, self._schema_version)
        raise StoreError(
            f"store {self.shown!r} has schema version {version}; this vancetope-rag needs "
            f"{self._schema_version}: run `vancetope-rag --store … init` to upgrade it"
        )

    def schema_checked(self) -> None:
        """``init`` brought the schema to this version."""
        self._schema_ok = True

    @contextmanager
    def initializing(self) -> Iterator[None]:
        """Calls inside skip the schema check (``init`` creates what it checks)."""
        self._local.initializing = True
        try:
            yield
        finally:
            self._local.initializing = False

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """The thread's transaction connection, or a pooled one for one statement."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._mapped(), self.pool.connection() as pooled:
            self._require_schema(pooled)
            yield pooled

    @contextmanager
    def _held(self, begin: str) -> Iterator[psycopg.Connection[Any]]:
        with self._mapped(), self.pool.connection() as conn:
            self._require_schema(conn)
            conn.execute(begin)
            self._local.conn = conn
            self._local.depth = 1
            try:
                yield conn
            except BaseException:
                self._local.conn = None
                self._rollback(conn)
                raise
            self._local.conn = None
            conn.execute("COMMIT")

    @staticmethod
    def _rollback(conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            return
        with contextlib.suppress(psycopg.Error):  # gone: the pool drops the connection
            conn.execute("ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A read-committed write transaction; nested use joins the outer one."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.depth += 1
            try:
                yield conn
            finally:
                self._local.depth -= 1
            return
        with self._held("BEGIN") as held:
            yield held

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A ``REPEATABLE READ`` read-only transaction: every query inside reads one
        committed state. Nested use, or use inside a write transaction, joins it."""
        if getattr(self._local, "conn", None) is not None:
            yield
            return
        with self._held("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"):
            yield

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """Inside a :meth:`snapshot` or :meth:`transaction`: statements are sent to the server
        at once and the caller goes on while they run; a statement's rows are waited for
        when they are read (psycopg's pipeline mode, in order: reading one waits for the
        statements sent before it). So the server can scan HNSW while this process ranks."""
        conn: psycopg.Connection[Any] = self._local.conn
        with self._mapped(), conn.pipeline():
            yield

    def send(
        self, statement: str, params: Sequence[Any] | None = (), *, binary: bool = False
    ) -> Callable[[], list[dict[str, Any]]]:
        """Send one statement of the thread's transaction; the function returned waits for
        its rows, as dicts (in a :meth:`pipeline`, the statement runs meanwhile)."""
        conn: psycopg.Connection[Any] = self._local.conn
        with self._mapped():
            cur = conn.cursor(row_factory=dict_row)
            cur.execute(statement, params, binary=binary)

        def rows() -> list[dict[str, Any]]:
            with self._mapped(), cur:
                return cur.fetchall()

        return rows

    def in_transaction(self) -> bool:
        return getattr(self._local, "conn", None) is not None

    # -- statements ------------------------------------------------------------------------

    def query(self, statement: str, params: Sequence[Any] | None = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn, self._mapped():
            return conn.execute(statement, params).fetchall()

    def query_dicts(
        self, statement: str, params: Sequence[Any] | None = (), *, binary: bool = False
    ) -> list[dict[str, Any]]:
        """The rows as dicts; ``binary``: in PostgreSQL's binary format (a vector column
        comes as its raw bytes, :func:`.postgres.rows.vector_of`, not as text to parse)."""
        with self.connection() as conn, self._mapped(), conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statement, params, binary=binary)
            return cur.fetchall()

    def execute(self, statement: str, params: Sequence[Any] | None = ()) -> int:
        """Run one statement; the number of rows it changed."""
        with self.connection() as conn, self._mapped():
            return conn.execute(statement, params).rowcount

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self.connection() as conn, self._mapped(), conn.cursor() as cur:
            cur.executemany(statement, rows)

    def query_packed(
        self, columns: Sequence[str], rest: str, params: Sequence[Any] | None = ()
    ) -> list[dict[str, Any]]:
        """``SELECT <columns> <rest>`` as dicts (the shared SQL stores' call; SQLite packs
        the rows into one, here they come as they are)."""
        return self.query_dicts(f"SELECT {', '.join(columns)} {rest}", params)

    def check_ready(self) -> str | None:
        """None when the store answers with the schema this package needs, else what to do.
        Read again on every probe (a schema once found good is cached for statements), and
        a pooled connection is waited for :data:`READY_TIMEOUT_S` at most."""
        try:
            with self.pool.connection(timeout=READY_TIMEOUT_S) as conn:
                found = self.schema_version(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self._error(exc) from exc
        if found == 0:
            return "store not initialised: run `vancetope-rag init`"
        if found != self._schema_version:
            return (
                f"store schema version {found}, this package needs {self._schema_version}: run init"
            )
        return None

    def next_sequence(self) -> int:
        """The next number of the store's one increasing sequence (claim tokens and chunk
        versions)."""
        ((value,),) = self.query("SELECT nextval('vtr_sequence')")
        return int(value)

    def server_time(self) -> float:
        """The server's clock, in seconds since the epoch (leases are measured on it)."""
        ((value,),) = self.query(f"SELECT {SERVER_NOW}")
        return float(value)

    def has_dimension(self, dim: int) -> bool:
        """Does the chunk table of ``dim`` exist? (Looked up again until it does: another
        process may create it.)"""
        if dim in self.dimensions:
            return True
        rows = self.query("SELECT 1 FROM vtr_dimensions WHERE dim = %s", (dim,))
        if rows:
            with self._lock:
                self.dimensions.add(dim)
        return bool(rows)

    def known_dimensions(self) -> list[int]:
        return sorted(int(r[0]) for r in self.query("SELECT dim FROM vtr_dimensions"))
