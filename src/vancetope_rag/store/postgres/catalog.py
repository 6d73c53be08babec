"""The RAG catalog on PostgreSQL (:mod:`vancetope_rag.store.sql_catalog`, with psycopg's
``%s`` parameters)."""

from __future__ import annotations

from vancetope_rag.store.postgres.db import PostgresDatabase
from vancetope_rag.store.postgres.errors import ConstraintViolation
from vancetope_rag.store.sql_catalog import SqlRagCatalog


class PostgresRagCatalog(SqlRagCatalog[PostgresDatabase]):
    """The RAG catalog methods of the PostgreSQL control store (and of its rebuild store)."""

    mark = "%s"
    violation = ConstraintViolation
