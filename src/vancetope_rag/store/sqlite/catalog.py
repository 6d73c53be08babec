"""The RAG catalog on SQLite (:mod:`vancetope_rag.store.sql_catalog`, with SQLite's ``?``
parameters; the one-live-row index is schema upgrade 6)."""

from __future__ import annotations

from vancetope_rag.store.sql_catalog import SqlRagCatalog
from vancetope_rag.store.sqlite.db import SqliteDatabase
from vancetope_rag.store.sqlite.errors import ConstraintViolation


class SqliteRagCatalog(SqlRagCatalog[SqliteDatabase]):
    """The RAG catalog methods of the SQLite control store (and of its rebuild store)."""

    mark = "?"
    violation = ConstraintViolation
