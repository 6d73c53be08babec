"""The SQLite database layer's failures: every apsw error leaves as a StoreError that says what
to do, and a failed transaction (COMMIT included) forgets the schema it cached, so
the next one reads it again."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from vancetope_rag.domain.records import Chunk
from vancetope_rag.errors import (
    InvalidInputError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
)
from vancetope_rag.store import open_store
from vancetope_rag.store.port.types import NewDocument, RagScope
from vancetope_rag.store.sqlite.db import SqliteDatabase
from vancetope_rag.store.sqlite.errors import ConstraintViolation, store_error

DIM = 12  # a dimension no other write of the test uses: its vec0 table is made on demand


def _chunk(scope: RagScope, cid: str) -> Chunk:
    return Chunk(cid, scope.rag_id, "src", "text", [1.0] + [0.0] * (DIM - 1))


def test_a_failed_commit_forgets_the_vec_table_made_in_the_transaction(tmp_path: Path) -> None:
    """Regression: a COMMIT that failed left the vec-table cache saying ``vec_chunks_N``
    exists; the next write recorded ``no such table: vec_chunks_N``. The COMMIT here fails
    for real, on a deferred foreign key (SQLite then keeps the transaction open, unlike a full
    disk, which rolls it back: both must leave the connection usable)."""
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    db = store.control.db  # type: ignore[attr-defined]
    assert isinstance(db, SqliteDatabase)
    db.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    db.execute(
        "CREATE TABLE child (pid INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
    )
    scope = RagScope("t", "p", "rag-1", DIM)
    with pytest.raises(StoreError, match="FOREIGN KEY"), db.transaction():
        db.execute("INSERT INTO child VALUES (42)")  # fails only at COMMIT
        store.chunks.add_chunks(scope, [_chunk(scope, "c1")])  # creates vec_chunks_12
    assert store.chunks.count_chunks(scope) == 0  # nothing of it stayed
    store.chunks.add_chunks(scope, [_chunk(scope, "c2")])  # the table is made again
    assert [h.chunk_id for h in store.chunks.query(scope, _chunk(scope, "q").embedding, 5)] == [
        "c2"
    ]
    store.control.insert_document(NewDocument("t", "p", "a.md", "text/plain", "after"))
    store.close()


def test_a_statement_that_fails_inside_a_transaction_leaves_the_connection_usable(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    db = store.control.db  # type: ignore[attr-defined]
    with pytest.raises(StoreError, match="no such table"), db.transaction():
        db.execute("INSERT INTO no_such_table VALUES (1)")
    with db.transaction():
        db.execute("CREATE TABLE ok (x)")
    assert db.query("SELECT count(*) FROM ok") == [(0,)]
    store.close()


def test_a_lone_surrogate_is_invalid_input_not_a_crash(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        store.control.insert_document(NewDocument("t", "p", "a.md", "text/plain", "x\udc80y"))
    assert store.control.list_documents("t", "p") == []
    store.close()


@pytest.mark.parametrize(
    ("error", "kind", "words"),
    [
        (apsw.CorruptError("database disk image is malformed"), StoreCorruptError, "backup"),
        (apsw.NotADBError("file is not a database"), StoreCorruptError, "integrity_check"),
        (apsw.FullError("database or disk is full"), StoreFullError, "free space"),
        (apsw.BusyError("database is locked"), StoreError, "busy timeout"),
        (apsw.LockedError("database table is locked"), StoreError, "locked"),
        (apsw.ReadOnlyError("attempt to write a readonly database"), StoreError, "permissions"),
        (apsw.CantOpenError("unable to open database file"), StoreError, "permissions"),
        (apsw.IOError("disk I/O error"), StoreError, "truncated or removed"),
        (apsw.SQLError("no such table: vec_chunks_7"), StoreError, "no such table"),
        (apsw.SQLError("no such table: projects"), StoreCorruptError, "truncated while in use"),
        (apsw.ConstraintError("UNIQUE constraint failed"), ConstraintViolation, "constraint"),
    ],
)
def test_every_apsw_error_maps_to_an_actionable_store_error(
    error: Exception, kind: type[StoreError], words: str
) -> None:
    mapped = store_error(apsw, error, "/data/rag.db")
    assert type(mapped) is kind
    assert words in mapped.message and "'/data/rag.db'" in mapped.message
    assert mapped.code.startswith("STORE_")
