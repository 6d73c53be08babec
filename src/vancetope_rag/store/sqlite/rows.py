"""Pure parts of the SQLite adapters: the SQL pieces they compose, and (re-exported from
:mod:`vancetope_rag.store.rows`, which the PostgreSQL adapters read too) the row ↔ record
codecs.

No I/O here; :mod:`.sqlite.chunks` runs what these functions build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vancetope_rag.store.rows import (
    HIT_COLUMNS,
    IMPORT_HEAD_COLUMNS,
    chunk_row,
    document_row,
    dt,
    rag_row,
    restored_document_row,
    row_to_chunk,
    row_to_document,
    row_to_hit,
    row_to_import_head,
    row_to_item,
    row_to_migration,
    row_to_project,
    row_to_rag,
)
from vancetope_rag.store.shared import iter_filter
from vancetope_rag.store.types import ChunkFilter

__all__ = [
    "HIT_COLUMNS",
    "IMPORT_HEAD_COLUMNS",
    "chunk_filter_sql",
    "chunk_row",
    "document_row",
    "dt",
    "insert_sql",
    "rag_row",
    "restored_document_row",
    "row_to_chunk",
    "row_to_document",
    "row_to_hit",
    "row_to_import_head",
    "row_to_item",
    "row_to_migration",
    "row_to_project",
    "row_to_rag",
]

_CHUNK_COLUMN = {"kind": "c.kind", "path": "c.path", "sourceRef": "c.source_ref"}


def insert_sql(table: str, row: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``INSERT INTO table (columns) VALUES (?, …)`` for a row, and its parameters."""
    marks = ", ".join("?" * len(row))
    return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values())


def chunk_filter_sql(filters: ChunkFilter | None) -> tuple[str, list[Any]]:
    """`` AND …`` conditions on the chunk alias ``c`` for a ChunkFilter, and their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, negated, values in iter_filter(filters):
        marks = ",".join("?" * len(values))
        clauses.append(f"{_CHUNK_COLUMN[key]} {'NOT IN' if negated else 'IN'} ({marks})")
        params += values
    return "".join(f" AND {c}" for c in clauses), params
