"""Embedded control store on one SQLite file (projects, documents, RAG catalog, settings, cache)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import numpy as np

from vancetope_rag.domain.records import (
    Document,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
)
from vancetope_rag.errors import DocumentNotFoundError, InvalidInputError, RagAlreadyExistsError
from vancetope_rag.store.port import UNSET, NewDocument, _Unset
from vancetope_rag.store.sqlite_db import Clock, SqliteDatabase


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def _row_to_document(r: Mapping[str, Any]) -> Document:
    return Document(
        id=r["id"],
        tenant_id=r["tenant_id"],
        project_id=r["project_id"],
        path=r["path"],
        mime_type=r["mime_type"],
        content=r["content"],
        summary=r["summary"],
        rag_enabled=None if r["rag_enabled"] is None else bool(r["rag_enabled"]),
        rag_dirty=bool(r["rag_dirty"]),
        rag_claimed_by=r["rag_claimed_by"],
        rag_claimed_at=_dt(r["rag_claimed_at"]),
        rag_version=r["rag_version"],
        index_state=IndexState(r["index_state"]),
        index_attempts=r["index_attempts"],
        index_last_error=r["index_last_error"],
        index_next_attempt_at=_dt(r["index_next_attempt_at"]),
        indexed_at=_dt(r["indexed_at"]),
        rag_indexed_hash=r["rag_indexed_hash"],
        content_hash=r["content_hash"],
        created_at=_dt(r["created_at"]),
        updated_at=_dt(r["updated_at"]),
    )


def _row_to_rag(r: Mapping[str, Any]) -> RagRecord:
    return RagRecord(
        id=r["id"],
        tenant_id=r["tenant_id"],
        project_id=r["project_id"],
        name=r["name"],
        title=r["title"],
        description=r["description"],
        embedding_provider=r["embedding_provider"],
        embedding_model=r["embedding_model"],
        embedding_dimension=r["embedding_dimension"],
        chunk_size=r["chunk_size"],
        chunk_overlap=r["chunk_overlap"],
        created_at=_dt(r["created_at"]),
    )


def _row_to_project(r: Mapping[str, Any]) -> Project:
    return Project(
        tenant_id=r["tenant_id"],
        project_id=r["project_id"],
        status=ProjectStatus(r["status"]),
        home_node=r["home_node"],
        created_at=_dt(r["created_at"]),
    )


class SqliteControlStore:
    """:class:`~vancetope_rag.store.port.ControlStore` on a :class:`SqliteDatabase`."""

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
        rows = self.db.query_dicts(
            "SELECT * FROM projects WHERE tenant_id = ? AND project_id = ?", (tenant_id, project_id)
        )
        return _row_to_project(rows[0]) if rows else None

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
        return [_row_to_project(r) for r in self.db.query_dicts(sql, params)]

    def projects_for_node(self, node_id: str) -> list[Project]:
        rows = self.db.query_dicts(
            "SELECT * FROM projects WHERE status = 'RUNNING' AND "
            "(home_node = ? OR home_node IS NULL) ORDER BY tenant_id, project_id",
            (node_id,),
        )
        return [_row_to_project(r) for r in rows]

    # -- documents ---------------------------------------------------------------------

    def insert_document(self, doc: NewDocument) -> Document:
        now = self._clock()
        doc_id = uuid.uuid4().hex
        try:
            with self.db.transaction():
                self.db.execute(
                    "INSERT INTO documents (id, tenant_id, project_id, path, mime_type, content, "
                    "summary, rag_enabled, rag_dirty, rag_version, index_state, content_hash, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)",
                    (
                        doc_id,
                        doc.tenant_id,
                        doc.project_id,
                        doc.path,
                        doc.mime_type,
                        doc.content,
                        doc.summary,
                        None if doc.rag_enabled is None else int(doc.rag_enabled),
                        int(doc.rag_dirty),
                        IndexState.PENDING.value if doc.rag_dirty else IndexState.NONE.value,
                        content_hash(doc.content),
                        now,
                        now,
                    ),
                )
        except self.db._apsw.ConstraintError as exc:
            raise InvalidInputError(
                f"a document with path {doc.path!r} already exists in the project; "
                "update it instead",
                tenant_id=doc.tenant_id,
                project_id=doc.project_id,
            ) from exc
        created = self.get_document(doc.tenant_id, doc.project_id, doc_id)
        assert created is not None
        return created

    def update_document(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        *,
        path: str | _Unset = UNSET,
        mime_type: str | _Unset = UNSET,
        content: str | _Unset = UNSET,
        summary: str | _Unset | None = UNSET,
        rag_enabled: bool | _Unset | None = UNSET,
        mark_dirty: bool = False,
    ) -> Document:
        sets: list[str] = ["updated_at = ?"]
        params: list[Any] = [self._clock()]
        if not isinstance(path, _Unset):
            sets.append("path = ?")
            params.append(path)
        if not isinstance(mime_type, _Unset):
            sets.append("mime_type = ?")
            params.append(mime_type)
        if not isinstance(content, _Unset):
            sets += ["content = ?", "content_hash = ?"]
            params += [content, content_hash(content)]
        if not isinstance(summary, _Unset):
            sets.append("summary = ?")
            params.append(summary)
        if not isinstance(rag_enabled, _Unset):
            sets.append("rag_enabled = ?")
            params.append(None if rag_enabled is None else int(rag_enabled))
        if mark_dirty:
            sets += [
                "rag_dirty = 1",
                "rag_version = rag_version + 1",
                "index_state = CASE WHEN rag_claimed_by IS NULL THEN 'pending' "
                "ELSE index_state END",
                "index_attempts = 0",
                "index_next_attempt_at = NULL",
                "index_last_error = NULL",
            ]
        try:
            with self.db.transaction():
                changed = self.db.execute(
                    f"UPDATE documents SET {', '.join(sets)} "
                    "WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (*params, document_id, tenant_id, project_id),
                )
        except self.db._apsw.ConstraintError as exc:
            raise InvalidInputError(
                f"another document already has path {path!r}", document_id=document_id
            ) from exc
        if not changed:
            raise DocumentNotFoundError(
                f"no document {document_id!r} in project {project_id!r}",
                tenant_id=tenant_id,
                project_id=project_id,
                document_id=document_id,
            )
        doc = self.get_document(tenant_id, project_id, document_id)
        assert doc is not None
        return doc

    def get_document(self, tenant_id: str, project_id: str, document_id: str) -> Document | None:
        rows = self.db.query_dicts(
            "SELECT * FROM documents WHERE id = ? AND tenant_id = ? AND project_id = ?",
            (document_id, tenant_id, project_id),
        )
        return _row_to_document(rows[0]) if rows else None

    def get_document_by_path(self, tenant_id: str, project_id: str, path: str) -> Document | None:
        rows = self.db.query_dicts(
            "SELECT * FROM documents WHERE tenant_id = ? AND project_id = ? AND path = ?",
            (tenant_id, project_id, path),
        )
        return _row_to_document(rows[0]) if rows else None

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]:
        sql = "SELECT * FROM documents WHERE tenant_id = ? AND project_id = ?"
        params: list[Any] = [tenant_id, project_id]
        if path_prefix:
            sql += " AND substr(path, 1, ?) = ?"
            params += [len(path_prefix), path_prefix]
        sql += " ORDER BY path"
        return [_row_to_document(r) for r in self.db.query_dicts(sql, params)]

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
                    "UPDATE documents SET rag_dirty = 1, rag_version = rag_version + 1, "
                    "index_attempts = 0, index_next_attempt_at = NULL, index_last_error = NULL, "
                    "index_state = CASE WHEN rag_claimed_by IS NULL THEN 'pending' "
                    "ELSE index_state END "
                    "WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (doc_id, tenant_id, project_id),
                )
        return total

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        now = self._clock()
        with self.db.transaction():
            rows = self.db.query_dicts(
                "UPDATE documents SET rag_claimed_by = ?, rag_claimed_at = ?, "
                "index_state = 'processing' WHERE id IN ("
                "  SELECT id FROM documents WHERE tenant_id = ? AND project_id = ? "
                "  AND rag_dirty = 1 AND (rag_claimed_by IS NULL OR rag_claimed_at < ?) "
                "  AND (index_next_attempt_at IS NULL OR index_next_attempt_at <= ?) "
                "  ORDER BY updated_at, id LIMIT ?"
                ") RETURNING *",
                (worker_id, now, tenant_id, project_id, now - claim_ttl_s, now, batch_size),
            )
        docs = [_row_to_document(r) for r in rows]
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
    ) -> bool:
        now = self._clock()
        with self.db.transaction():
            changed = self.db.execute(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "rag_indexed_hash = ?, "
                "rag_dirty = CASE WHEN rag_version = ? THEN 0 ELSE 1 END, "
                "index_state = CASE WHEN rag_version = ? THEN ? ELSE 'pending' END, "
                "index_attempts = 0, index_last_error = NULL, index_next_attempt_at = NULL, "
                "indexed_at = ? "
                "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ?",
                (
                    indexed_hash,
                    version,
                    version,
                    state.value,
                    now,
                    document_id,
                    tenant_id,
                    project_id,
                    worker_id,
                ),
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
    ) -> IndexState:
        now = self._clock()
        with self.db.transaction():
            rows = self.db.query(
                "UPDATE documents SET rag_claimed_by = NULL, rag_claimed_at = NULL, "
                "index_attempts = index_attempts + 1, index_last_error = ?, "
                "index_state = CASE WHEN index_attempts + 1 >= ? THEN 'failed' ELSE 'pending' END, "
                "rag_dirty = CASE WHEN index_attempts + 1 >= ? THEN 0 ELSE 1 END, "
                "index_next_attempt_at = CASE WHEN index_attempts + 1 >= ? THEN NULL ELSE ? END "
                "WHERE id = ? AND tenant_id = ? AND project_id = ? AND rag_claimed_by = ? "
                "RETURNING index_state",
                (
                    error[:2000],
                    max_attempts,
                    max_attempts,
                    max_attempts,
                    now + retry_delay_s,
                    document_id,
                    tenant_id,
                    project_id,
                    worker_id,
                ),
            )
        return IndexState(rows[0][0]) if rows else IndexState.PENDING

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.db.query(
            "SELECT index_state, count(*) FROM documents WHERE tenant_id = ? AND project_id = ? "
            "GROUP BY index_state",
            (tenant_id, project_id),
        )
        counts = {s.value: 0 for s in IndexState}
        counts.update({state: n for state, n in rows})
        return counts

    # -- RAG catalog -------------------------------------------------------------------

    def insert_rag(self, rag: RagRecord) -> RagRecord:
        created = rag.created_at.timestamp() if rag.created_at else self._clock()
        try:
            with self.db.transaction():
                self.db.execute(
                    "INSERT INTO rags (id, tenant_id, project_id, name, title, description, "
                    "embedding_provider, embedding_model, embedding_dimension, chunk_size, "
                    "chunk_overlap, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        rag.id,
                        rag.tenant_id,
                        rag.project_id,
                        rag.name,
                        rag.title,
                        rag.description,
                        rag.embedding_provider,
                        rag.embedding_model,
                        rag.embedding_dimension,
                        rag.chunk_size,
                        rag.chunk_overlap,
                        created,
                    ),
                )
        except self.db._apsw.ConstraintError as exc:
            raise RagAlreadyExistsError(
                f"a RAG named {rag.name!r} already exists in project {rag.project_id!r}",
                tenant_id=rag.tenant_id,
                project_id=rag.project_id,
                rag_name=rag.name,
            ) from exc
        stored = self.get_rag(rag.tenant_id, rag.project_id, rag.id)
        assert stored is not None
        return stored

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        rows = self.db.query_dicts(
            "SELECT * FROM rags WHERE id = ? AND tenant_id = ? AND project_id = ?",
            (rag_id, tenant_id, project_id),
        )
        return _row_to_rag(rows[0]) if rows else None

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        rows = self.db.query_dicts(
            "SELECT * FROM rags WHERE name = ? AND tenant_id = ? AND project_id = ?",
            (name, tenant_id, project_id),
        )
        return _row_to_rag(rows[0]) if rows else None

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        rows = self.db.query_dicts(
            "SELECT * FROM rags WHERE tenant_id = ? AND project_id = ? ORDER BY name",
            (tenant_id, project_id),
        )
        return [_row_to_rag(r) for r in rows]

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        with self.db.transaction():
            return bool(
                self.db.execute(
                    "DELETE FROM rags WHERE id = ? AND tenant_id = ? AND project_id = ?",
                    (rag_id, tenant_id, project_id),
                )
            )

    # -- settings ----------------------------------------------------------------------

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]:
        rows = self.db.query(
            "SELECT key, value FROM settings WHERE tenant_id = ? AND project_id = ?",
            (tenant_id, project_id or ""),
        )
        return {k: v for k, v in rows}

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        with self.db.transaction():
            if value is None:
                self.db.execute(
                    "DELETE FROM settings WHERE tenant_id = ? AND project_id = ? AND key = ?",
                    (tenant_id, project_id or "", key),
                )
            else:
                self.db.execute(
                    "INSERT INTO settings (tenant_id, project_id, key, value) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (tenant_id, project_id, key) DO UPDATE SET value = excluded.value",
                    (tenant_id, project_id or "", key, value),
                )

    # -- embedding cache ---------------------------------------------------------------

    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        hashes = list(dict.fromkeys(text_hashes))
        for start in range(0, len(hashes), 500):
            part = hashes[start : start + 500]
            marks = ",".join("?" * len(part))
            for h, blob in self.db.query(
                f"SELECT text_hash, vector FROM embedding_cache WHERE model_key = ? "
                f"AND text_hash IN ({marks})",
                (model_key, *part),
            ):
                found[h] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        if not items:
            return
        with self.db.transaction():
            self.db.conn.executemany(
                "INSERT OR IGNORE INTO embedding_cache (model_key, text_hash, vector) "
                "VALUES (?, ?, ?)",
                [
                    (model_key, h, np.asarray(v, dtype=np.float32).tobytes())
                    for h, v in items.items()
                ],
            )
