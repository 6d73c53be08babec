"""The control store on PostgreSQL (projects, documents and their claims; the RAG catalog,
settings and embedding cache come from its base classes).

Claims take rows with ``FOR UPDATE SKIP LOCKED``, so workers of many processes never wait
on each other nor take the same document; each claim batch gets a fresh fencing token from
the store's one sequence. Leases are measured on the server's clock unless a clock was
injected (the contract tests move a fake one).
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
from vancetope_rag.store.postgres.catalog import PostgresRagCatalog
from vancetope_rag.store.postgres.db import SERVER_NOW, PostgresDatabase
from vancetope_rag.store.postgres.errors import ConstraintViolation
from vancetope_rag.store.postgres.heartbeats import PostgresHeartbeats
from vancetope_rag.store.postgres.rows import DIRTY, document_update_sql, insert_sql
from vancetope_rag.store.postgres.settings import PostgresSettingsAndCache
from vancetope_rag.store.rows import (
    IMPORT_HEAD_COLUMNS,
    document_row,
    needs_attention,
    read_failures,
    restored_document_row,
    row_to_document,
    row_to_import_head,
    row_to_project,
)

T = TypeVar("T")


class PostgresControlStore(PostgresRagCatalog, PostgresSettingsAndCache, PostgresHeartbeats):
    """:class:`~vancetope_rag.store.port.ControlStore` on a :class:`PostgresDatabase`."""

    def __init__(
        self, db: PostgresDatabase, *, clock: Clock = time.time, server_clock: bool = False
    ) -> None:
        super().__init__(db, clock=clock)
        self.uri = db.shown
        self.server_clock = server_clock
        #: The clock leases are measured on (the server's, or the injected one).
        self.lease_clock: Clock = db.server_time if server_clock else clock

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.lease_clock(), UTC)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    def close(self) -> None:
        self.db.close()

    def _first(self, codec: Callable[[Mapping[str, Any]], T], sql: str, params: Any) -> T | None:
        rows = self.db.query_dicts(sql, params)
        return codec(rows[0]) if rows else None

    # -- projects ----------------------------------------------------------------------

    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project:
        rows = self.db.query_dicts(
            "INSERT INTO projects (tenant_id, project_id, status, home_node, created_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, project_id) DO UPDATE SET "
            "status = excluded.status, home_node = excluded.home_node RETURNING *",
            (tenant_id, project_id, status.value, home_node, self._clock()),
        )
        return row_to_project(rows[0])

    def get_project(self, tenant_id: str, project_id: str) -> Project | None:
        return self._first(
            row_to_project,
            "SELECT * FROM projects WHERE tenant_id = %s AND project_id = %s",
            (tenant_id, project_id),
        )

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]:
        sql, params = "SELECT * FROM projects WHERE true", []
        if status is not None:
            sql += " AND status = %s"
            params.append(status.value)
        if tenant_id is not None:
            sql += " AND tenant_id = %s"
            params.append(tenant_id)
        sql += " ORDER BY tenant_id, project_id"
        return [row_to_project(r) for r in self.db.query_dicts(sql, params)]

    def projects_for_node(self, node_id: str) -> list[Project]:
        rows = self.db.query_dicts(
            "SELECT * FROM projects WHERE status = 'RUNNING' AND "
            "(home_node = %s OR home_node IS NULL) ORDER BY tenant_id, project_id",
            (node_id,),
        )
        return [row_to_project(r) for r in rows]

    # -- documents ---------------------------------------------------------------------

    def insert_document(self, doc: NewDocument) -> Document:
        row = document_row(doc, uuid.uuid4().hex, content_hash(doc.content), self._clock())
        sql, params = insert_sql("documents", row)
        try:
            with self.db.transaction():
                rows = self.db.query_dicts(sql + " RETURNING *", params)
        except ConstraintViolation as exc:
            raise path_exists_error(doc) from exc
        return row_to_document(rows[0])

    def restore_document(self, doc: Document) -> Document:
        row = restored_document_row(doc)
        now = self._clock()
        row["created_at"] = now if row["created_at"] is None else row["created_at"]
        row["updated_at"] = now if row["updated_at"] is None else row["updated_at"]
        sql, params = insert_sql("documents", row)
        try:
            with self.db.transaction():
                rows = self.db.query_dicts(sql + " RETURNING *", params)
        except ConstraintViolation as exc:  # the id (primary key) or the path is taken
            raise document_taken_error(doc) from exc
        return row_to_document(rows[0])

    def update_document(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        change: DocumentChange,
    ) -> Document:
        sets, params = document_update_sql(DocumentChanges.of(change), self._clock())
        try:
            with self.db.transaction():
                rows = self.db.query_dicts(
                    f"UPDATE documents SET {sets} "
                    "WHERE id = %s AND tenant_id = %s AND project_id = %s RETURNING *",
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
            "SELECT * FROM documents WHERE id = %s AND tenant_id = %s AND project_id = %s",
            (document_id, tenant_id, project_id),
        )

    def get_document_by_path(self, tenant_id: str, project_id: str, path: str) -> Document | None:
        return self._first(
            row_to_document,
            "SELECT * FROM documents WHERE tenant_id = %s AND project_id = %s AND path = %s",
            (tenant_id, project_id, path),
        )

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]:
        sql = "SELECT * FROM documents WHERE tenant_id = %s AND project_id = %s"
        params: list[Any] = [tenant_id, project_id]
        if path_prefix:
            sql += " AND starts_with(path, %s)"
            params.append(path_prefix)
        sql += " ORDER BY path"
        return [row_to_document(r) for r in self.db.query_dicts(sql, params)]

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        rows = self.db.query_dicts(
            f"SELECT {IMPORT_HEAD_COLUMNS} FROM documents WHERE tenant_id = %s "
            "AND project_id = %s AND starts_with(path, %s) ORDER BY path",
            (tenant_id, project_id, path_prefix),
        )
        return [row_to_import_head(r) for r in rows]

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        return read_failures(self.db.query_dicts, "%s", tenant_id, project_id)

    def needs_attention(
        self, tenant_id: str, project_id: str, *, limit: int
    ) -> tuple[int, list[AttentionItem]]:
        return needs_attention(self.db.query, "%s", tenant_id, project_id, limit)

    def document_paths(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        for part in unique_batches(document_ids, 1000):
            for doc_id, path in self.db.query(
                "SELECT id, path FROM documents WHERE id = ANY(%s) AND tenant_id = %s "
                "AND project_id = %s",
                (part, tenant_id, project_id),
            ):
                found[str(doc_id)] = str(path)
        return found

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool:
        with self.db.transaction():
            return bool(
                self.db.execute(
                    "DELETE FROM documents WHERE id = %s AND tenant_id = %s AND project_id = %s",
                    (document_id, tenant_id, project_id),
                )
            )

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        if not document_ids:
            return 0
        with self.db.transaction():
            return self.db.execute(
                f"UPDATE documents SET {', '.join(DIRTY)} "
                "WHERE id = ANY(%s) AND tenant_id = %s AND project_id = %s",
                (list(dict.fromkeys(document_ids)), tenant_id, project_id),
            )

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        if batch_size < 1:
            return []
        with self.db.transaction():
            now = self.lease_clock()
            token = self.db.next_sequence()  # one fencing token per claim batch
            rows = self.db.query_dicts(
                "WITH picked AS (SELECT id FROM documents WHERE tenant_id = %s "
                "  AND project_id = %s AND rag_dirty = 1 "
                "  AND (rag_claimed_by IS NULL OR rag_claimed_at < %s) "
                "  AND (index_next_attempt_at IS NULL OR index_next_attempt_at <= %s) "
                "  ORDER BY updated_at, id LIMIT %s FOR UPDATE SKIP LOCKED) "
                "UPDATE documents d SET rag_claimed_by = %s, rag_claimed_at = %s, "
                "rag_claim_token = %s, index_state = 'processing' "
                "FROM picked WHERE d.id = picked.id RETURNING d.*",
                (tenant_id, project_id, now - claim_ttl_s, now, batch_size, worker_id, now, token),
            )
        docs = [row_to_document(r) for r in rows]
        docs.sort(key=lambda d: (d.updated_at or datetime.min.replace(tzinfo=UTC), d.id))
        return docs

    def holds_claim(
        self, tenant_id: str, project_id: str, document_id: str, worker_id: str
    ) -> bool:
        rows = self.db.query(
            "SELECT 1 FROM documents WHERE id = %s AND tenant_id = %s AND project_id = %s "
            "AND rag_claimed_by = %s",
            (document_id, tenant_id, project_id, worker_id),
        )
        return bool(rows)

    def mark_rag_clean(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        worker_id: str,
        version: int,
        *,
        state: IndexState,
        indexed_hash: str | None = None,
        claim_token: int | None = None,
        truncated: bool = False,
    ) -> bool:
        held = (document_id, tenant_id, project_id, worker_id)
        fenced = "" if claim_token is None else " AND rag_claim_token = %s"
        fence = () if claim_token is None else (int(claim_token),)
        # One statement (atomic alone; an indexer's write joins its transaction), with the
        # server's clock read in it rather than by a round trip of its own.
        now, at = (SERVER_NOW, ()) if self.server_clock else ("%s", (self.lease_clock(),))
        changed = self.db.execute(
            "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
            "rag_claim_token = NULL, rag_indexed_hash = %s, truncated = %s, "
            "rag_dirty = CASE WHEN rag_version = %s THEN 0 ELSE 1 END, "
            "index_state = CASE WHEN rag_version = %s THEN %s ELSE 'pending' END, "
            "index_attempts = 0, index_last_error = NULL, index_next_attempt_at = NULL, "
            f"indexed_at = {now} "
            "WHERE id = %s AND tenant_id = %s AND project_id = %s AND rag_claimed_by = %s"
            f"{fenced}",
            (indexed_hash, int(truncated), version, version, state.value, *at, *held, *fence),
        )
        return bool(changed)

    def release_rag_claim(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        worker_id: str,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> IndexState:
        held = (document_id, tenant_id, project_id, worker_id)
        n = 1 if count_attempt else 0
        with self.db.transaction():
            now = self.lease_clock()
            rows = self.db.query(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "rag_claim_token = NULL, index_attempts = index_attempts + %s, "
                "index_last_error = %s, "
                "index_state = CASE WHEN index_attempts + %s >= %s THEN 'failed' "
                "ELSE 'pending' END, "
                "rag_dirty = CASE WHEN index_attempts + %s >= %s THEN 0 ELSE 1 END, "
                "index_next_attempt_at = CASE WHEN index_attempts + %s >= %s THEN NULL "
                "ELSE %s::float8 END "
                "WHERE id = %s AND tenant_id = %s AND project_id = %s AND rag_claimed_by = %s "
                "RETURNING index_state",
                (n, capped_error(error), *[n, max_attempts] * 3, now + retry_delay_s, *held),
            )
        return IndexState(rows[0][0]) if rows else IndexState.PENDING

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.db.query(
            "SELECT index_state, count(*) FROM documents WHERE tenant_id = %s "
            "AND project_id = %s GROUP BY index_state",
            (tenant_id, project_id),
        )
        return state_counts(rows)

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        rows = self.db.query(
            "SELECT count(*) FROM documents WHERE tenant_id = %s AND project_id = %s "
            "AND truncated = 1",
            (tenant_id, project_id),
        )
        return int(rows[0][0])
