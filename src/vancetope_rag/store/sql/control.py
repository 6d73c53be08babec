"""The control store of the SQL engines (projects, documents and their claims; the RAG
catalog, settings, embedding cache and workers' heartbeats come from its base classes), one
implementation over the store's :class:`~.sql.dialect.Dialect`.

Each claim batch gets a fresh fencing token from the store's one sequence; where the engine
locks rows, claims take them ``SKIP LOCKED``, so workers of many processes never wait on
each other nor take the same document (SQLite's ``BEGIN IMMEDIATE`` holds the file). Leases
are measured on ``lease_clock``: the server's (PostgreSQL in production) or the injected one
(the contract tests move a fake one).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from vancetope_rag.domain.records import (
    AttentionItem,
    Document,
    IndexState,
    Project,
    ProjectStatus,
)
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.shared import (
    DocumentChanges,
    capped_error,
    content_hash,
    document_not_found_error,
    document_taken_error,
    path_exists_error,
    path_taken_error,
    state_counts,
    unique_batches,
)
from vancetope_rag.store.port.types import Clock, DocumentChange, ImportHead, NewDocument
from vancetope_rag.store.sql.catalog import SqlRagCatalog
from vancetope_rag.store.sql.dialect import D, Dialect
from vancetope_rag.store.sql.errors import ConstraintViolation
from vancetope_rag.store.sql.heartbeats import SqlHeartbeats
from vancetope_rag.store.sql.rows import (
    DIRTY_SETS,
    IMPORT_HEAD_COLUMNS,
    NEEDS_ATTENTION,
    document_row,
    document_update_sql,
    restored_document_row,
    row_to_document,
    row_to_import_head,
    row_to_project,
)
from vancetope_rag.store.sql.settings import SqlSettingsAndCache

__all__ = ["SqlControlStore"]

T = TypeVar("T")


class SqlControlStore(SqlRagCatalog[D], SqlSettingsAndCache[D], SqlHeartbeats[D]):
    """:class:`~vancetope_rag.store.port.ControlStore` on a SQL database, in its dialect.

    Args:
        db: the engine's database wrapper.
        dialect: the engine's :class:`~.sql.dialect.Dialect`.
        uri: the store's URI as shown (no password).
        clock: the injected clock (record times).
        lease_clock: the clock leases are measured on; default ``clock``.
        server_now: a SQL expression of the server's clock, read inside the statement that
            ends a claim instead of a round trip of its own (when leases are on the server's
            clock).
    """

    def __init__(
        self,
        db: D,
        dialect: Dialect,
        *,
        uri: str,
        clock: Clock = time.time,
        lease_clock: Clock | None = None,
        server_now: str | None = None,
    ) -> None:
        super().__init__(db, dialect, clock=clock)
        self.uri = uri
        #: The clock leases are measured on (the server's, or the injected one).
        self.lease_clock: Clock = lease_clock or clock
        self._server_now = server_now

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.lease_clock(), UTC)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    def close(self) -> None:
        self.db.close()

    def _first(self, codec: Callable[[Mapping[str, Any]], T], sql: str, params: Any) -> T | None:
        """The first row of a query (written with ``?``) through ``codec``, or None."""
        rows = self.sql.query_dicts(sql, params)
        return codec(rows[0]) if rows else None

    def _written(self, statement: str, params: Any) -> list[dict[str, Any]]:
        """The rows a write ``… RETURNING *`` returns, in a transaction of its own."""
        with self.db.transaction():
            return self.sql.query_dicts(statement + " RETURNING *", params)

    # -- projects ----------------------------------------------------------------------

    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project:
        rows = self._written(
            "INSERT INTO projects (tenant_id, project_id, status, home_node, created_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, project_id) DO UPDATE SET "
            "status = excluded.status, home_node = excluded.home_node",
            (tenant_id, project_id, status.value, home_node, self._clock()),
        )
        return row_to_project(rows[0])

    def get_project(self, tenant_id: str, project_id: str) -> Project | None:
        return self._first(
            row_to_project,
            "SELECT * FROM projects WHERE tenant_id = ? AND project_id = ?",
            (tenant_id, project_id),
        )

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]:
        sql, params = "SELECT * FROM projects WHERE true", []
        if status is not None:
            sql += " AND status = ?"
            params.append(status.value)
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        sql += " ORDER BY tenant_id, project_id"
        return [row_to_project(r) for r in self.sql.query_dicts(sql, params)]

    def projects_for_node(self, node_id: str) -> list[Project]:
        rows = self.sql.query_dicts(
            "SELECT * FROM projects WHERE status = 'RUNNING' AND "
            "(home_node = ? OR home_node IS NULL) ORDER BY tenant_id, project_id",
            (node_id,),
        )
        return [row_to_project(r) for r in rows]

    # -- documents ---------------------------------------------------------------------

    def _insert_document(self, row: dict[str, Any]) -> Document:
        sql, params = self.dialect.insert("documents", row)
        with self.db.transaction():
            rows = self.db.query_dicts(sql + " RETURNING *", params)
        return row_to_document(rows[0])

    def insert_document(self, doc: NewDocument) -> Document:
        row = document_row(doc, uuid.uuid4().hex, content_hash(doc.content), self._clock())
        try:
            return self._insert_document(row)
        except ConstraintViolation as exc:
            raise path_exists_error(doc) from exc

    def restore_document(self, doc: Document) -> Document:
        row = restored_document_row(doc)
        now = self._clock()
        row["created_at"] = now if row["created_at"] is None else row["created_at"]
        row["updated_at"] = now if row["updated_at"] is None else row["updated_at"]
        try:
            return self._insert_document(row)
        except ConstraintViolation as exc:  # the id (primary key) or the path is taken
            raise document_taken_error(doc) from exc

    def update_document(
        self, tenant_id: str, project_id: str, document_id: str, change: DocumentChange
    ) -> Document:
        sets, params = document_update_sql(DocumentChanges.of(change), self._clock())
        try:
            rows = self._written(
                f"UPDATE documents SET {sets} WHERE id = ? AND tenant_id = ? AND project_id = ?",
                (*params, document_id, tenant_id, project_id),
            )
        except ConstraintViolation as exc:
            raise path_taken_error(change.path, document_id) from exc
        if not rows:
            raise document_not_found_error(tenant_id, project_id, document_id)
        return row_to_document(rows[0])

    def get_document(self, tenant_id: str, project_id: str, document_id: str) -> Document | None:
        return self._first(
            row_to_document,
            "SELECT * FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ?",
            (document_id, tenant_id, project_id),
        )

    def get_document_by_path(self, tenant_id: str, project_id: str, path: str) -> Document | None:
        return self._first(
            row_to_document,
            "SELECT * FROM documents WHERE tenant_id = ? AND project_id = ? AND path = ?",
            (tenant_id, project_id, path),
        )

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]:
        sql = "SELECT * FROM documents WHERE tenant_id = ? AND project_id = ?"
        params: list[Any] = [tenant_id, project_id]
        if path_prefix:
            prefixed, more = self.dialect.starts_with("path", path_prefix)
            sql += f" AND {prefixed}"
            params += more
        sql += " ORDER BY path"
        return [row_to_document(r) for r in self.sql.query_dicts(sql, params)]

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        prefixed, params = self.dialect.starts_with("path", path_prefix)
        rows = self.sql.query_dicts(
            f"SELECT {IMPORT_HEAD_COLUMNS} FROM documents WHERE tenant_id = ? "
            f"AND project_id = ? AND {prefixed} ORDER BY path",
            (tenant_id, project_id, *params),
        )
        return [row_to_import_head(r) for r in rows]

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        rows = self.sql.query_dicts(
            f"SELECT {IMPORT_HEAD_COLUMNS} FROM documents WHERE tenant_id = ? AND "
            "project_id = ? AND extraction_error IS NOT NULL ORDER BY path",
            (tenant_id, project_id),
        )
        return [row_to_import_head(r) for r in rows]

    def needs_attention(
        self, tenant_id: str, project_id: str, *, limit: int
    ) -> tuple[int, list[AttentionItem]]:
        scope = (tenant_id, project_id)
        where = f"WHERE tenant_id = ? AND project_id = ? AND {NEEDS_ATTENTION}"
        [(count,)] = self.sql.query(f"SELECT count(*) FROM documents {where}", scope)
        rows = self.sql.query(
            f"SELECT id, path, extraction_error FROM documents {where} ORDER BY path LIMIT ?",
            (*scope, limit),
        )
        return int(count), [AttentionItem(str(i), str(p), str(e)) for i, p, e in rows]

    def document_paths(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        # Unary ``+`` (SQLite's dialect) on the scope columns: usable, they make SQLite walk
        # the project's documents through the scope index (29 ms at 50k documents) instead
        # of looking the ids up.
        plus = self.dialect.unindexed
        for part in unique_batches(document_ids, self.dialect.list_batch):
            listed, params = self.dialect.in_list("id", part)
            # Every turn's citation lookup: its rows packed in one (SqliteDatabase.query_packed)
            for row in self.db.query_packed(
                ("id", "path"),
                f"FROM documents WHERE {listed} AND "
                + self.dialect.sql(f"{plus}tenant_id = ? AND {plus}project_id = ?"),
                (*params, tenant_id, project_id),
            ):
                found[str(row["id"])] = str(row["path"])
        return found

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool:
        return bool(
            self.sql.write(
                "DELETE FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ?",
                (document_id, tenant_id, project_id),
            )
        )

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        dirty = self.dialect.sql(f"UPDATE documents SET {', '.join(DIRTY_SETS)} WHERE ")
        scope = self.dialect.sql(" AND tenant_id = ? AND project_id = ?")
        with self.db.transaction():
            total = 0
            for part in self.dialect.per_statement(list(dict.fromkeys(document_ids))):
                listed, params = self.dialect.in_list("id", part)
                total += self.db.execute(dirty + listed + scope, (*params, tenant_id, project_id))
            return total

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        if batch_size < 1:
            return []
        claim = self.dialect.claim(
            "documents",
            "id",
            "SELECT id FROM documents WHERE tenant_id = ? AND project_id = ? AND rag_dirty = 1 "
            "AND (rag_claimed_by IS NULL OR rag_claimed_at < ?) "
            "AND (index_next_attempt_at IS NULL OR index_next_attempt_at <= ?) "
            "ORDER BY updated_at, id LIMIT ?",
            "rag_claimed_by = ?, rag_claimed_at = ?, rag_claim_token = ?, "
            "index_state = 'processing'",
        )
        with self.db.transaction():
            now = self.lease_clock()
            token = self.db.next_sequence()  # one fencing token per claim batch
            rows = self.sql.query_dicts(
                claim,
                (tenant_id, project_id, now - claim_ttl_s, now, batch_size, worker_id, now, token),
            )
        docs = [row_to_document(r) for r in rows]
        docs.sort(key=lambda d: (d.updated_at or datetime.min.replace(tzinfo=UTC), d.id))
        return docs

    def holds_claim(self, claim: Claim) -> bool:
        c = claim
        rows = self.sql.query(
            "SELECT 1 FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ? "
            "AND rag_claimed_by = ?",
            (c.document_id, c.tenant_id, c.project_id, c.worker_id),
        )
        return bool(rows)

    def mark_rag_clean(self, mark: CleanMark) -> bool:
        m = mark
        held = (m.document_id, m.tenant_id, m.project_id, m.worker_id)
        fenced = "" if m.claim_token is None else " AND rag_claim_token = ?"
        fence = () if m.claim_token is None else (int(m.claim_token),)
        # One statement (an indexer's write joins its transaction), with the server's clock
        # read in it rather than by a round trip of its own.
        now, at = (self._server_now, ()) if self._server_now else ("?", (self.lease_clock(),))
        changed = self.sql.write(
            "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
            "rag_claim_token = NULL, rag_indexed_hash = ?, truncated = ?, "
            "rag_dirty = CASE WHEN rag_version = ? THEN 0 ELSE 1 END, "
            "index_state = CASE WHEN rag_version = ? THEN ? ELSE 'pending' END, "
            "index_attempts = 0, index_last_error = NULL, index_next_attempt_at = NULL, "
            f"indexed_at = {now} "
            "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ?"
            f"{fenced}",
            (m.indexed_hash, int(m.truncated), *[m.version] * 2, m.state.value, *at, *held, *fence),
        )
        return bool(changed)

    def release_rag_claim(self, release: Release) -> IndexState:
        r = release
        held = (r.document_id, r.tenant_id, r.project_id, r.worker_id)
        n = 1 if r.count_attempt else 0
        with self.db.transaction():
            now = self.lease_clock()
            rows = self.sql.query(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "rag_claim_token = NULL, index_attempts = index_attempts + ?, "
                "index_last_error = ?, "
                "index_state = CASE WHEN index_attempts + ? >= ? THEN 'failed' "
                "ELSE 'pending' END, "
                "rag_dirty = CASE WHEN index_attempts + ? >= ? THEN 0 ELSE 1 END, "
                "index_next_attempt_at = CASE WHEN index_attempts + ? >= ? THEN NULL "
                f"ELSE ?{self.dialect.real} END "
                "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ? "
                "RETURNING index_state",
                (n, capped_error(r.error), *[n, r.max_attempts] * 3, now + r.retry_delay_s, *held),
            )
        return IndexState(rows[0][0]) if rows else IndexState.PENDING

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.sql.query(
            "SELECT index_state, count(*) FROM documents WHERE tenant_id = ? "
            "AND project_id = ? GROUP BY index_state",
            (tenant_id, project_id),
        )
        return state_counts(rows)

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        rows = self.sql.query(
            "SELECT count(*) FROM documents WHERE tenant_id = ? AND project_id = ? "
            "AND truncated = 1",
            (tenant_id, project_id),
        )
        return int(rows[0][0])
