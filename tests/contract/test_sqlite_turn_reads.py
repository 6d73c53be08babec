"""What a chat turn's reads of the SQLite store cost in GIL handoffs.

apsw gives the GIL up at every step of a statement, once per row; when turns run side by side
each of those is a handoff to another thread and back. The hot reads of a turn (a search's
chunk rows, its citations' document paths) hand Python one row whatever their number, and
a snapshot checks the store file once, when it begins, not at each of its statements.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from vancetope_rag.domain.records import Chunk
from vancetope_rag.errors import StoreCorruptError, StoreError
from vancetope_rag.store import open_store
from vancetope_rag.store.port.types import NewDocument, RagScope
from vancetope_rag.store.sqlite.db import SqliteDatabase

DIM = 4


@contextmanager
def rows_stepped(db: SqliteDatabase) -> Iterator[list[Any]]:
    """The rows apsw hands to Python on this thread's connection meanwhile."""
    seen: list[Any] = []

    def trace(cursor: Any, row: Any) -> Any:
        seen.append(row)
        return row

    conn = db.conn
    conn.row_trace = trace
    try:
        yield seen
    finally:
        conn.row_trace = None


def test_packed_rows_come_back_exact(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "rag.db")
    db.execute("CREATE TABLE t (i INTEGER, r REAL, s TEXT, n)")
    values = [
        (2**63 - 1, 0.1 + 0.2, 'nul \x00, quote ", backslash \\, 🙂, \u2028', None),
        (-(2**63), 1e-300, "", None),
        (0, 1 / 3, "x" * 100_000, None),
    ]
    for value in values:
        db.execute("INSERT INTO t VALUES (?, ?, ?, ?)", value)
    packed = db.query_packed(("i", "r", "s", "n"), "FROM t")
    assert sorted(tuple(row.values()) for row in packed) == sorted(values)
    assert packed == db.query_dicts("SELECT i, r, s, n FROM t")
    assert db.query_packed(("i",), "FROM t WHERE i = ?", (42,)) == []


def test_a_packed_blob_is_a_store_error_not_a_crash(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "rag.db")
    db.execute("CREATE TABLE t (b BLOB)")
    db.execute("INSERT INTO t VALUES (?)", (b"\x00\x01",))
    with pytest.raises(StoreError, match="BLOB"):
        db.query_packed(("b",), "FROM t")


def test_a_searchs_chunk_rows_and_citation_paths_reach_python_as_one_row_each(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'rag.db'}")
    scope = RagScope("t", "p", "rag-1", DIM)
    docs = [
        store.control.insert_document(NewDocument("t", "p", f"d{i}.md", "text/plain", "x"))
        for i in range(5)
    ]
    store.chunks.add_chunks(
        scope,
        [
            Chunk(f"c{i}", scope.rag_id, docs[i % 5].id, f"text {i}", [1.0, float(i), 0.0, 0.0])
            for i in range(18)
        ],
    )
    db = store.chunks.db  # type: ignore[attr-defined]
    rowids = [int(r[0]) for r in db.query("SELECT rowid FROM chunks")]
    with rows_stepped(db) as stepped:
        rows = store.chunks._rows_by_rowid(scope, rowids)  # type: ignore[attr-defined]
    assert len(rows) == 18 and len(stepped) == 1
    assert {r["text"] for r in rows.values()} == {f"text {i}" for i in range(18)}
    with rows_stepped(db) as stepped:
        paths = store.control.document_paths("t", "p", [d.id for d in docs])
    assert paths == {d.id: d.path for d in docs} and len(stepped) == 1
    store.close()


def test_a_snapshot_checks_the_store_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rag.db"
    db = SqliteDatabase(path)
    db.query("SELECT 1")  # this thread's connection is open
    checks: list[int] = []
    real = db._file_id
    monkeypatch.setattr(db, "_file_id", lambda: checks.append(1) or real())
    with db.snapshot():
        for _ in range(5):
            db.query("SELECT 1")
    assert len(checks) == 1  # when the snapshot began
    db.query("SELECT 1")
    assert len(checks) == 2  # outside a snapshot, every statement checks
    SqliteDatabase(tmp_path / "other.db").close()
    os.replace(tmp_path / "other.db", path)
    with pytest.raises(StoreCorruptError, match="replaced"):
        db.query("SELECT 1")
