"""Pure SQL pieces of the PostgreSQL adapters (``%s`` placeholders) and the vector literal.

The row ↔ record codecs are shared with the SQLite store (:mod:`vancetope_rag.store.rows`):
the two schemas share their column names and value encodings (see :mod:`.postgres.schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from vancetope_rag.store.port.shared import DocumentChanges, iter_filter
from vancetope_rag.store.port.types import ChunkFilter
from vancetope_rag.store.rows import DIRTY_SETS, FAILED_SETS, HIT_COLUMNS

__all__ = [
    "CHUNK_COLUMNS",
    "DIRTY",
    "chunk_filter_sql",
    "document_update_sql",
    "insert_sql",
    "vector_literal",
    "vector_of",
]

#: The SET clauses that queue a document, and those that fail it (the SQLite store's, with
#: this driver's placeholder).
DIRTY = tuple(s.replace("?", "%s") for s in DIRTY_SETS)
_FAILED = tuple(s.replace("?", "%s") for s in FAILED_SETS)

_CHUNK_COLUMN = {"kind": "c.kind", "path": "c.path", "sourceRef": "c.source_ref"}

#: A chunk's row as every read returns it (:data:`~vancetope_rag.store.rows.HIT_COLUMNS`;
#: never its vector or tsvector).
CHUNK_COLUMNS = ", ".join(f"c.{column}" for column in HIT_COLUMNS)


def insert_sql(table: str, row: Mapping[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``INSERT INTO table (columns) VALUES (%s, …)`` for a row, and its parameters."""
    marks = ", ".join(["%s"] * len(row))
    return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values())


def document_update_sql(changes: DocumentChanges, updated_at: float) -> tuple[str, list[Any]]:
    """The ``SET`` list of an ``UPDATE documents`` for a change set, and its parameters."""
    sets = ["updated_at = %s"]
    params: list[Any] = [updated_at]
    for column, value in changes.values.items():
        sets.append(f"{column} = %s")
        params.append(int(value) if isinstance(value, bool) else value)
    if changes.mark_dirty:
        sets += DIRTY
    if changes.failed_reason is not None:
        sets += _FAILED
        params.append(changes.failed_reason)
    return ", ".join(sets), params


def chunk_filter_sql(filters: ChunkFilter | None) -> tuple[str, list[Any]]:
    """`` AND …`` conditions on the chunk alias ``c`` for a ChunkFilter, and parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, negated, values in iter_filter(filters):
        column = _CHUNK_COLUMN[key]
        clauses.append(f"NOT ({column} = ANY(%s))" if negated else f"{column} = ANY(%s)")
        params.append(values)
    return "".join(f" AND {c}" for c in clauses), params


def vector_literal(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form of a float32 vector (``[x,y,…]``, every float32 digit kept)."""
    return "[" + ",".join(repr(float(x)) for x in vector.tolist()) + "]"


def vector_of(data: bytes) -> npt.NDArray[np.float32]:
    """A ``vector`` column read in binary (``query_dicts(…, binary=True)``): pgvector's send
    format is the dimension and an unused word (two int16), then the float32 values, big
    endian. The exact values stored, with no text to format and parse (that cost ~5 ms per
    100 384-dimension rows, a third of a hybrid query's store time at 100k chunks;
    docs/benchmarks.md)."""
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)
