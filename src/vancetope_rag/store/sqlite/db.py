"""One SQLite file through apsw with sqlite-vec: connections, schema upgrades, transactions.

Connections are per thread (apsw connections are safe to share, but a transaction is per
connection, so sharing one would mix transactions of different threads). Several processes may
open the same file: WAL mode plus ``BEGIN IMMEDIATE`` for every write transaction.

This class is the adapters' only way to the database, and the one place where an apsw error
becomes a :class:`~vancetope_rag.errors.StoreError` (:func:`.sqlite.errors.store_error`). A
failed transaction is rolled back and forgets the schema it cached (the ``vec0`` tables made
in it), whether the failure came from a statement or from ``COMMIT`` itself.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from vancetope_rag.errors import StoreCorruptError, StoreError
from vancetope_rag.store.port.shared import check_schema_version
from vancetope_rag.store.sqlite.bm25 import FTS5_BM25_FUNCTION, fts5_bm25, scope_token
from vancetope_rag.store.sqlite.errors import store_error
from vancetope_rag.store.sqlite.schema import SCHEMA_VERSION, UPGRADES

__all__ = ["SCHEMA_VERSION", "UPGRADES", "SqliteDatabase"]


def _load_apsw() -> Any:
    import apsw
    import sqlite_vec

    return apsw, sqlite_vec


class SqliteDatabase:
    """A SQLite file with sqlite-vec, per-thread connections and versioned schema."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 30_000) -> None:
        self.path = str(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._apsw, self._sqlite_vec = _load_apsw()
        self._check_path()
        try:
            self._upgrade()
        except BaseException:
            self.close()  # a refused file keeps no connection (nor -wal/-shm files) open
            raise

    # -- connections -------------------------------------------------------------------

    def _check_path(self) -> None:
        if self.path == ":memory:":
            raise StoreError(
                "an in-memory SQLite store cannot be shared between threads; use a file path"
            )
        p = Path(self.path)
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.exists():
            raise StoreError(
                f"cannot open store {self.path!r}: folder {str(parent)!r} does not exist; "
                "create it or pass another --store"
            )
        if p.exists():
            if p.is_dir():
                raise StoreError(f"cannot open store {self.path!r}: it is a directory")
            if not os.access(p, os.R_OK | os.W_OK):
                raise StoreError(
                    f"cannot open store {self.path!r}: the file is not readable and writable "
                    "by this user"
                )
            with open(p, "rb") as fh:
                head = fh.read(16)
            if not head:
                # What `touch` makes, and what a store truncated by accident looks like:
                # taking it as a new store would hide the loss and bury a restore under new
                # writes. The store creates its file itself; an empty one is not ours to fill.
                raise StoreError(
                    f"cannot open store {self.path!r}: the file is empty (0 bytes). If it was "
                    "a store, it has been truncated: restore it from a backup. If it was "
                    "created for a new store, delete it: vancetope-rag creates the file itself"
                )
            if head != b"SQLite format 3\x00":
                raise StoreError(
                    f"cannot open store {self.path!r}: the file exists but is not a SQLite "
                    "database; pass another --store or move the file away"
                )
        elif not os.access(parent, os.W_OK):
            raise StoreError(
                f"cannot create store {self.path!r}: folder {str(parent)!r} is not writable"
            )

    def _open(self) -> Any:
        apsw = self._apsw
        try:
            conn = apsw.Connection(self.path)
        except apsw.Error as exc:
            raise StoreError(f"cannot open store {self.path!r}: {exc}") from exc
        try:
            conn.enable_load_extension(True)
            conn.load_extension(self._sqlite_vec.loadable_path())
            conn.enable_load_extension(False)
            conn.set_busy_timeout(self._busy_timeout_ms)
            # used by schema upgrade 3's backfill; the same function the chunk writes call
            conn.create_scalar_function("vtr_scope_token", scope_token, 3, deterministic=True)
            self._refuse_foreign(conn)  # before WAL mode, which rewrites the file header
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            # BM25 with a RAG's own statistics (store/sqlite/fts.py); after the file is known
            # to be a store: registering reads it
            conn.register_fts5_function(FTS5_BM25_FUNCTION, fts5_bm25)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, apsw.Error):
                raise self._error(exc) from exc
            raise
        return conn

    def _refuse_foreign(self, conn: Any) -> None:
        """Another application's database has tables but no schema version of ours."""
        if conn.execute("PRAGMA user_version").fetchone()[0] != 0:
            return
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreError(
                f"cannot open store {self.path!r}: it is a SQLite database of another "
                "application, not a vancetope-rag store; pass another --store"
            )

    @property
    def conn(self) -> Any:
        """This thread's connection, after checking that the file under it is still the one
        it opened. Inside a :meth:`snapshot` the check was made when it began: its reads see
        that state whatever happens to the file meanwhile (and each check costs a ``stat``,
        which gives the GIL up, a handoff to another thread when turns run side by side)."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or getattr(local, "pid", None) != os.getpid():
            conn = self._open()
            local.conn = conn
            local.pid = os.getpid()
            local.depth = 0
            local.reading = False
            local.vec_tables = set()
            local.file_id = self._file_id()
        elif not local.reading and self._file_id() != local.file_id:
            self._file_gone()
        return conn

    @property
    def apsw(self) -> Any:
        """The apsw module (its constants and exception classes)."""
        return self._apsw

    def fts5_tokenizer(self, name: str, args: list[str]) -> Any:
        """An FTS5 tokenizer of this thread's connection, callable from Python."""
        conn = self.conn
        cache: dict[tuple[str, tuple[str, ...]], Any] = getattr(self._local, "tokenizers", {})
        if getattr(self._local, "tokenizers_conn", None) is not conn:
            cache = {}
            self._local.tokenizers_conn = conn
        key = (name, tuple(args))
        if key not in cache:
            cache[key] = conn.fts5_tokenizer(name, list(args))
            self._local.tokenizers = cache
        return cache[key]

    def _file_id(self) -> tuple[int, int, bool]:
        """(device, inode, empty) of the store file; a missing file raises."""
        try:
            st = os.stat(self.path)
        except OSError:
            self._file_gone()
        return st.st_dev, st.st_ino, st.st_size == 0

    def _file_gone(self) -> NoReturn:
        """The file under an open connection was removed, replaced or truncated. SQLite
        would go on answering from its WAL and caches, or fail with a busy or corrupt error
        much later; stop at once instead, and say what happened."""
        raise StoreCorruptError(
            f"store {self.path!r} was removed, replaced or truncated while in use; stop every "
            "process using it and restore it from a backup"
        )

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- errors ------------------------------------------------------------------------

    def _error(self, exc: BaseException) -> Exception:
        return store_error(self._apsw, exc, self.path)

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """Run a statement: an apsw error (or text SQLite cannot encode) leaves as a RagError."""
        try:
            yield
        except (self._apsw.Error, UnicodeError) as exc:
            raise self._error(exc) from exc

    def _forget(self, conn: Any) -> None:
        """After a failed transaction: roll back what is left and drop cached schema state.

        SQLite rolls some failures back itself (a full disk at COMMIT), leaves others open (a
        deferred constraint at COMMIT); either way nothing of the transaction stays, so no
        ``vec0`` table it created may be remembered. A connection that cannot even roll back
        is closed; the next use opens a fresh one.
        """
        self._local.depth = 0
        self._local.vec_tables = set()
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except self._apsw.Error:
            try:
                conn.close()
            finally:
                self._local.conn = None

    # -- transactions ------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; nested use joins the outer transaction."""
        conn = self.conn
        depth: int = self._local.depth
        if depth:
            self._local.depth = depth + 1
            try:
                yield conn
            finally:
                self._local.depth = depth
            return
        with self._mapped():
            conn.execute("BEGIN IMMEDIATE")
        self._local.depth = 1
        try:
            yield conn
        except BaseException as exc:
            self._forget(conn)
            if isinstance(exc, self._apsw.Error | UnicodeEncodeError):
                raise self._error(exc) from exc
            raise
        self._local.depth = 0
        try:
            conn.execute("COMMIT")
        except self._apsw.Error as exc:
            self._forget(conn)
            raise self._error(exc) from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction: every statement inside reads the same committed state (WAL
        keeps it while writers commit). A query that reads twice (candidate rowids, then
        their rows, then their vectors) sees a document's old chunks or its new ones, never
        none and never a mix. Nested use, or use inside a write transaction, joins it.

        Only reads belong inside: a write there would have to upgrade a snapshot that may be
        stale already. (``CREATE ... IF NOT EXISTS`` of a table that exists writes nothing.)
        """
        conn = self.conn
        if self._local.depth or self._local.reading or conn.in_transaction:
            yield
            return
        with self._mapped():
            conn.execute("BEGIN DEFERRED")  # the snapshot starts at the first read
        self._local.reading = True
        try:
            yield
        except BaseException:
            self._local.reading = False
            self._forget(conn)
            raise
        self._local.reading = False
        try:
            conn.execute("COMMIT")
        except self._apsw.Error as exc:
            self._forget(conn)
            raise self._error(exc) from exc

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with self._mapped():
            return list(self.conn.execute(sql, params))

    def query_dicts(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        with self._mapped():
            cur = self.conn.execute(sql, params)
            try:
                names = [d[0] for d in cur.get_description()]
            except self._apsw.ExecutionCompleteError:  # no row at all
                return []
            return [dict(zip(names, r, strict=True)) for r in cur]

    def query_packed(
        self, columns: Sequence[str], rest: str, params: Any = ()
    ) -> list[dict[str, Any]]:
        """``SELECT <columns> <rest>`` as dicts, every row packed into one.

        apsw gives the GIL up at each step of a statement, once per row, and when turns run
        side by side each of those is a handoff to another thread and back. Here SQLite packs
        the rows into one JSON array, so a read of 18 chunk rows takes two steps (its one row,
        then the end) instead of 19 (docs/benchmarks.md, "Fewer GIL handoffs per turn"). For
        text, integer, real and null columns (JSON has no blob; reals and text come back
        exact).
        """
        listed = ", ".join(columns)
        with self._mapped():
            rows = list(
                self.conn.execute(
                    f"SELECT json_group_array(json_array({listed})) FROM (SELECT {listed} {rest})",
                    params,
                )
            )
        names = list(columns)
        return [dict(zip(names, row, strict=True)) for row in json.loads(rows[0][0])]

    def execute(self, sql: str, params: Any = ()) -> int:
        """Run one statement; the number of rows it changed."""
        with self._mapped():
            conn = self.conn
            conn.execute(sql, params)
            return int(conn.changes())

    def insert(self, sql: str, params: Any = ()) -> int:
        """Run one ``INSERT``; the rowid of the new row."""
        with self._mapped():
            conn = self.conn
            conn.execute(sql, params)
            return int(conn.last_insert_rowid())

    def executemany(self, sql: str, rows: Any) -> None:
        with self._mapped():
            self.conn.executemany(sql, rows)

    # -- schema ------------------------------------------------------------------------

    def _upgrade(self) -> None:
        apsw = self._apsw
        try:
            with self.transaction() as conn:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                check_schema_version(self.path, version, SCHEMA_VERSION)
                for step in range(version, SCHEMA_VERSION):
                    conn.execute(UPGRADES[step])
                if version != SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except StoreError as exc:
            cause = exc.__cause__
            if isinstance(cause, apsw.NotADBError):
                raise StoreError(
                    f"cannot open store {self.path!r}: the file is not a SQLite database "
                    "(corrupt or another format)"
                ) from cause
            if isinstance(cause, apsw.CantOpenError | apsw.ReadOnlyError | apsw.PermissionsError):
                raise StoreError(
                    f"cannot open store {self.path!r} for writing: {cause}; check the path "
                    "and its permissions"
                ) from cause
            raise

    def check_ready(self) -> str | None:
        """A SQLite file's schema is made when it opens: it is ready once it answers."""
        self.query("SELECT 1 FROM workers LIMIT 1")
        return None

    def next_sequence(self) -> int:
        """The next number of the store's one increasing sequence (claim tokens and source
        chunk versions; the stored counter keeps its old name ``generation``); call inside a
        transaction."""
        rows = self.query(
            "INSERT INTO counters (name, value) VALUES ('generation', 1) "
            "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value"
        )
        return int(rows[0][0])

    def ensure_vec_table(self, dim: int) -> str:
        """The ``vec0`` table for vectors of ``dim`` floats (one table per dimension)."""
        if not 1 <= dim <= 8192:
            raise StoreError(f"unsupported embedding dimension {dim}")
        name = f"vec_chunks_{dim}"
        conn = self.conn  # first: opening a connection starts with an empty cache
        created: set[int] = self._local.vec_tables
        if dim not in created:
            with self._mapped():
                conn.execute(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0("
                    f"rag_id TEXT PARTITION KEY, embedding float[{dim}] distance_metric=cosine, "
                    "kind TEXT)"
                )
            created.add(dim)
        return name
