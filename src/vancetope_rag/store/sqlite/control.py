"""Embedded control store on one SQLite file (projects, documents, RAG catalog, settings, cache).

The I/O class; row codecs and the SQL of a document change set come from :mod:`.sqlite.rows`,
the rules both adapters share from :mod:`.port.shared`.
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
from vancetope_rag.store.rows import needs_attention, read_failures
from vancetope_rag.store.sql_heartbeats import SqlHeartbeats
from vancetope_rag.store.sqlite.catalog import SqliteRagCatalog
from vancetope_rag.store.sqlite.db import SqliteDatabase
from vancetope_rag.store.sqlite.errors import ConstraintViolation
from vancetope_rag.store.sqlite.rows import (
    DIRTY_SETS,
    IMPORT_HEAD_COLUMNS,
    document_paths_sql,
    document_row,
    document_update_sql,
    insert_sql,
    restored_document_row,
    row_to_document,
    row_to_import_head,
    row_to_project,
)
from vancetope_rag.store.sqlite.settings import SqliteSettingsAndCache

T = TypeVar("T")


class SqliteControlStore(SqliteRagCatalog, SqliteSettingsAndCache, SqlHeartbeats[SqliteDatabase]):
    """:class:`~vancetope_rag.store.port.ControlStore` on a :class:`SqliteDatabase` (the RAG
    catalog comes from :class:`~.sqlite.catalog.SqliteRagCatalog`, settings and the embedding
    cache from :class:`~.sqlite.settings.SqliteSettingsAndCache`, the workers' heartbeats
    from :class:`~vancetope_rag.store.sql_heartbeats.SqlHeartbeats`)."""

    def __init__(self, db: SqliteDatabase, *, clock: Clock = time.time) -> None:
        self.db = db
        self.uri = f"sqlite:///{db.path}"
        self._clock = clock

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    def close(self) -> None:
        self.db.close()

    def _first(self, codec: Callable[[Mapping[str, Any]], T], sql: str, params: Any) -> T | None:
        """The first row of a query through ``codec``, or None when there is none."""
        rows = self.db.query_dicts(sql, params)
        return codec(rows[0]) if rows else None

    # -- projects ----------------------------------------------------------------------

    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project:
        with self.db.transaction():
            self.db.execute(
                "INSERT INTO projects (tenant_id, project_id, status, home_node, created_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, project_id) DO UPDATE SET "
                "status = excluded.status, home_node = excluded.home_node",
                (tenant_id, project_id, status.value, home_node, self._clock()),
            )
        project = self.get_project(tenant_id, project_id)
        assert project is not None
        return project

    def get_project(self, tenant_id: str, project_id: str) -> Project | None:
        return self._first(
            row_to_project,
            "SELECT * FROM projects WHERE tenant_id = ? AND project_id = ?",
            (tenant_id, project_id),
        )

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]:
        sql, params = "SELECT * FROM projects WHERE 1 = 1", []
        if status is not None:
            sql += " AND status = ?"
            params.append(status.value)
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        sql += " ORDER BY tenant_id, project_id"
        return [row_to_project(r) for r in self.db.query_dicts(sql, params)]

    def projects_for_node(self, node_id: str) -> list[Project]:
        rows = self.db.query_dicts(
            "SELECT * FROM projects WHERE status = 'RUNNING' AND "
            "(home_node = ? OR home_node IS NULL) ORDER BY tenant_id, project_id",
            (node_id,),
        )
        return [row_to_project(r) for r in rows]

    # -- documents ---------------------------------------------------------------------

    def insert_document(self, doc: NewDocument) -> Document:
        doc_id = uuid.uuid4().hex
        row = document_row(doc, doc_id, content_hash(doc.content), self._clock())
        try:
            with self.db.transaction():
                self.db.execute(*insert_sql("documents", row))
        except ConstraintViolation as exc:
            raise path_exists_error(doc) from exc
        created = self.get_document(doc.tenant_id, doc.project_id, doc_id)
        assert created is not None
        return created

    def restore_document(self, doc: Document) -> Document:
        row = restored_document_row(doc)
        now = self._clock()
        row["created_at"] = now if row["created_at"] is None else row["created_at"]
        row["updated_at"] = now if row["updated_at"] is None else row["updated_at"]
        try:
            with self.db.transaction():
                self.db.execute(*insert_sql("documents", row))
        except ConstraintViolation as exc:  # the id (primary key) or the path is taken
            raise document_taken_error(doc) from exc
        restored = self.get_document(doc.tenant_id, doc.project_id, doc.id)
        assert restored is not None
        return restored

    def update_document(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        change: DocumentChange,
    ) -> Document:
        changes = DocumentChanges.of(change)
        sets, params = document_update_sql(changes, self._clock())
        try:
            with self.db.transaction():
                changed = self.db.execute(
                    f"UPDATE documents SET {sets} "
                    "WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (*params, document_id, tenant_id, project_id),
                )
        except ConstraintViolation as exc:
            raise path_taken_error(change.path, document_id) from exc
        if not changed:
            raise document_not_found_error(tenant_id, project_id, document_id)
        doc = self.get_document(tenant_id, project_id, document_id)
        assert doc is not None
        return doc

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
            sql += " AND substr(path, 1, ?) = ?"
            params += [len(path_prefix), path_prefix]
        sql += " ORDER BY path"
        return [row_to_document(r) for r in self.db.query_dicts(sql, params)]

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        rows = self.db.query_dicts(
            f"SELECT {IMPORT_HEAD_COLUMNS} FROM documents WHERE tenant_id = ? "
            "AND project_id = ? AND substr(path, 1, ?) = ? ORDER BY path",
            (tenant_id, project_id, len(path_prefix), path_prefix),
        )
        return [row_to_import_head(r) for r in rows]

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        return read_failures(self.db.query_dicts, "?", tenant_id, project_id)

    def needs_attention(
        self, tenant_id: str, project_id: str, *, limit: int
    ) -> tuple[int, list[AttentionItem]]:
        return needs_attention(self.db.query, "?", tenant_id, project_id, limit)

    def document_paths(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> dict[str, str]:
        found: dict[str, str] = {}
        for part in unique_batches(document_ids, 500):
            # Every turn's citation lookup: its rows packed in one (SqliteDatabase.query_packed)
            rest, params = document_paths_sql(tenant_id, project_id, part)
            for row in self.db.query_packed(("id", "path"), rest, params):
                found[str(row["id"])] = str(row["path"])
        return found

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool:
        with self.db.transaction():
            return bool(
                self.db.execute(
                    "DELETE FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (document_id, tenant_id, project_id),
                )
            )

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        total = 0
        with self.db.transaction():
            for doc_id in document_ids:
                total += self.db.execute(
                    f"UPDATE documents SET {', '.join(DIRTY_SETS)} "
                    "WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (doc_id, tenant_id, project_id),
                )
        return total

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        now = self._clock()
        with self.db.transaction():
            token = self.db.next_sequence()
            rows = self.db.query_dicts(
                "UPDATE documents SET rag_claimed_by = ?, rag_claimed_at = ?, "
                f"rag_claim_token = {token:d}, "
                "index_state = 'processing' WHERE id IN ("
                "  SELECT id FROM documents WHERE tenant_id = ? AND project_id = ? "
                "  AND rag_dirty = 1 AND (rag_claimed_by IS NULL OR rag_claimed_at < ?) "
                "  AND (index_next_attempt_at IS NULL OR index_next_attempt_at <= ?) "
                "  ORDER BY updated_at, id LIMIT ?"
                ") RETURNING *",
                (worker_id, now, tenant_id, project_id, now - claim_ttl_s, now, batch_size),
            )
        docs = [row_to_document(r) for r in rows]
        docs.sort(key=lambda d: (d.updated_at or datetime.min.replace(tzinfo=UTC), d.id))
        return docs

    def holds_claim(
        self, tenant_id: str, project_id: str, document_id: str, worker_id: str
    ) -> bool:
        rows = self.db.query(
            "SELECT 1 FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ? "
            "AND rag_claimed_by = ?",
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
        now = self._clock()
        held = (document_id, tenant_id, project_id, worker_id)
        fenced = "" if claim_token is None else f" AND rag_claim_token = {int(claim_token):d}"
        with self.db.transaction():
            changed = self.db.execute(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "rag_claim_token = NULL, rag_indexed_hash = ?, truncated = ?, "
                "rag_dirty = CASE WHEN rag_version = ? THEN 0 ELSE 1 END, "
                "index_state = CASE WHEN rag_version = ? THEN ? ELSE 'pending' END, "
                "index_attempts = 0, index_last_error = NULL, index_next_attempt_at = NULL, "
                "indexed_at = ? "
                "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ?"
                f"{fenced}",
                (indexed_hash, int(truncated), version, version, state.value, now, *held),
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
        now = self._clock()
        held = (document_id, tenant_id, project_id, worker_id)
        n = 1 if count_attempt else 0
        with self.db.transaction():
            rows = self.db.query(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "rag_claim_token = NULL, index_attempts = index_attempts + ?, "
                "index_last_error = ?, "
                "index_state = CASE WHEN index_attempts + ? >= ? THEN 'failed' ELSE 'pending' END, "
                "rag_dirty = CASE WHEN index_attempts + ? >= ? THEN 0 ELSE 1 END, "
                "index_next_attempt_at = CASE WHEN index_attempts + ? >= ? THEN NULL ELSE ? END "
                "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ? "
                "RETURNING index_state",
                (n, capped_error(error), *[n, max_attempts] * 3, now + retry_delay_s, *held),
            )
        return IndexState(rows[0][0]) if rows else IndexState.PENDING

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.db.query(
            "SELECT index_state, count(*) FROM documents WHERE tenant_id = ? AND project_id = ? "
            "GROUP BY index_state",
            (tenant_id, project_id),
        )
        return state_counts(rows)

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        rows = self.db.query(
            "SELECT count(*) FROM documents WHERE tenant_id = ? AND project_id = ? "
            "AND truncated = 1",
            (tenant_id, project_id),
        )
        return int(rows[0][0])
