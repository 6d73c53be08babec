"""Pure parts of the SQLite adapters: the SQL pieces they compose, and (re-exported from
:mod:`vancetope_rag.store.rows`, which the PostgreSQL adapters read too) the row ↔ record
codecs.

No I/O here; :mod:`.sqlite.control` and :mod:`.sqlite.chunks` run what these functions build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vancetope_rag.store.port.shared import DocumentChanges, iter_filter
from vancetope_rag.store.port.types import ChunkFilter
from vancetope_rag.store.rows import (
    DIRTY_SETS,
    FAILED_SETS,
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

__all__ = [
    "DIRTY_SETS",
    "FAILED_SETS",
    "HIT_COLUMNS",
    "IMPORT_HEAD_COLUMNS",
    "chunk_filter_sql",
    "chunk_row",
    "document_paths_sql",
    "document_row",
    "document_update_sql",
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


def document_update_sql(changes: DocumentChanges, updated_at: float) -> tuple[str, list[Any]]:
    """The ``SET`` list of an ``UPDATE documents`` for a change set, and its parameters.

    The columns of ``documents`` carry the :class:`Document` field names, so a change set's
    keys are its column names.
    """
    sets = ["updated_at = ?"]
    params: list[Any] = [updated_at]
    for column, value in changes.values.items():
        sets.append(f"{column} = ?")
        params.append(int(value) if isinstance(value, bool) else value)
    if changes.mark_dirty:
        sets += DIRTY_SETS
    if changes.failed_reason is not None:
        sets += FAILED_SETS
        params.append(changes.failed_reason)
    return ", ".join(sets), params


def document_paths_sql(
    tenant_id: str, project_id: str, document_ids: Sequence[str]
) -> tuple[str, tuple[Any, ...]]:
    """What follows ``SELECT id, path`` to read those documents of the project that exist,
    and its parameters.

    Unary ``+`` on the scope columns: usable, they make SQLite walk the project's documents
    through the scope index (29 ms at 50k documents) instead of looking the ids up.
    """
    ids = list(dict.fromkeys(document_ids))
    marks = ",".join("?" * len(ids))
    return (
        f"FROM documents WHERE id IN ({marks}) AND +tenant_id = ? AND +project_id = ?",
        (*ids, tenant_id, project_id),
    )


def chunk_filter_sql(filters: ChunkFilter | None) -> tuple[str, list[Any]]:
    """`` AND …`` conditions on the chunk alias ``c`` for a ChunkFilter, and their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, negated, values in iter_filter(filters):
        marks = ",".join("?" * len(values))
        clauses.append(f"{_CHUNK_COLUMN[key]} {'NOT IN' if negated else 'IN'} ({marks})")
        params += values
    return "".join(f" AND {c}" for c in clauses), params
