"""SQLite's :class:`~vancetope_rag.store.sql.dialect.Dialect`: apsw's ``?`` marker, one
marker per listed value, no row locks (``BEGIN IMMEDIATE`` holds the file)."""

from __future__ import annotations

from vancetope_rag.store.sql.dialect import Dialect

__all__ = ["SQLITE"]

SQLITE = Dialect(
    mark="?",
    arrays=False,
    lock="",
    real="",
    insertion_order="rowid",
    list_batch=500,
    bytewise="",
    lone_write_transaction=True,
    unindexed="+",
    prefix_test="substr({column}, 1, length(?)) = ?",
)
