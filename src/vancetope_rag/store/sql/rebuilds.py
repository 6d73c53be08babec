"""RAG generations and rebuild migrations on a SQL store (:class:`RebuildStore`), one
implementation for SQLite and PostgreSQL over the store's :class:`~.sql.dialect.Dialect`.

Every state change is one transaction: the switch from the shadow to the live generation
locks the migration row (where the engine locks rows; SQLite's ``BEGIN IMMEDIATE`` holds the
file), retires the old generation, makes the new one live (the partial unique index on live
names holds at every instant) and completes the migration, so a reader sees either
generation whole and a crash leaves either state. Items are claimed under fencing tokens of
the store's one sequence (``SKIP LOCKED`` where the engine locks rows).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime

from vancetope_rag.domain.rebuilds import (
    ItemClaim,
    ItemState,
    Migration,
    MigrationItem,
    MigrationState,
)
from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port.catalog import GenerationsOfCatalog
from vancetope_rag.store.port.shared import capped_error, rebuild_fields, rebuild_running_error
from vancetope_rag.store.port.types import Clock, DocumentHead
from vancetope_rag.store.sql.catalog import SqlRagCatalog
from vancetope_rag.store.sql.dialect import Dialect, Marked, SqlDatabase
from vancetope_rag.store.sql.errors import ConstraintViolation
from vancetope_rag.store.sql.rows import dt, row_to_item, row_to_migration

__all__ = ["SqlRebuildStore"]

_ACTIVE = ("running", "switching")
_ITEM_COLUMNS = "(migration_id, document_id, tenant_id, project_id)"


#: ``SET`` clauses that put an item (back) in the queue: no claim, fresh attempts.
_REQUEUE = (
    "state = 'pending', claimed_by = NULL, claimed_at = NULL, claim_token = NULL, "
    "attempts = 0, last_error = NULL, next_attempt_at = NULL"
)

#: ``WHERE`` of an item a claim still holds; its parameters: :func:`_held`.
_HELD = (
    "WHERE migration_id = ? AND document_id = ? AND state = 'processing' "
    "AND claimed_by = ? AND claim_token = ?"
)


def _key(m: Migration) -> tuple[str, str, str]:
    """The parameters of ``id = ? AND tenant_id = ? AND project_id = ?``."""
    return (m.id, m.tenant_id, m.project_id)


def _held(c: ItemClaim) -> tuple[str, str, str, int]:
    return (c.migration_id, c.document_id, c.worker_id, c.claim_token)


class SqlRebuildStore(GenerationsOfCatalog):
    """:class:`~vancetope_rag.store.port.RebuildStore` on a SQL database, in its dialect."""

    def __init__(self, db: SqlDatabase, dialect: Dialect, *, clock: Clock = time.time) -> None:
        self.db = db
        self.dialect = dialect
        self._clock = clock
        self.sql = Marked(db, dialect)
        self.catalog: SqlRagCatalog[SqlDatabase] = SqlRagCatalog(db, dialect, clock=clock)

    # -- generations (insert_generation, get_any_rag, rag_generations: the catalog's) -------

    def switch_live(self, migration: Migration) -> bool:
        m = migration
        scope = (m.tenant_id, m.project_id)
        with self.db.transaction():
            rows = self.sql.query(
                "SELECT state FROM migrations WHERE id = ? AND tenant_id = ? AND project_id = ?",
                (m.id, *scope),
            )
            if not rows or rows[0][0] not in _ACTIVE:
                return bool(rows) and rows[0][0] == MigrationState.COMPLETED.value
            target = self.get_any_rag(m.tenant_id, m.project_id, m.to_rag_id)
            if target is None:
                return False
            # retire first: the partial unique index allows one live RAG per name
            self.sql.execute(
                "UPDATE rags SET state = 'retired', retired_at = ? WHERE tenant_id = ? "
                "AND project_id = ? AND name = ? AND state = 'live' AND id != ?",
                (self._clock(), *scope, m.rag_name, m.to_rag_id),
            )
            self.sql.execute(
                "UPDATE rags SET state = 'live', retired_at = NULL WHERE id = ? "
                "AND tenant_id = ? AND project_id = ?",
                (m.to_rag_id, *scope),
            )
            self.sql.execute(
                "UPDATE migrations SET state = 'completed', finished_at = ? WHERE id = ?",
                (self._clock(), m.id),
            )
        return True

    # -- migrations ------------------------------------------------------------------------

    def start_rebuild(self, migration: Migration) -> Migration:
        m = migration
        row = rebuild_fields(m) | {"created_at": self._clock()}
        try:
            with self.db.transaction():
                self.db.execute(*self.dialect.insert("migrations", row))
        except ConstraintViolation as exc:
            raise rebuild_running_error(m.tenant_id, m.project_id, m.rag_name) from exc
        stored = self.get_rebuild(m.tenant_id, m.project_id, m.id)
        assert stored is not None
        return stored

    def get_rebuild(self, tenant_id: str, project_id: str, migration_id: str) -> Migration | None:
        rows = self.sql.query_dicts(
            "SELECT * FROM migrations WHERE id = ? AND tenant_id = ? AND project_id = ?",
            (migration_id, tenant_id, project_id),
        )
        return row_to_migration(rows[0]) if rows else None

    def active_rebuilds(self, tenant_id: str, project_id: str) -> list[Migration]:
        rows = self.sql.query_dicts(
            "SELECT * FROM migrations WHERE tenant_id = ? AND project_id = ? "
            "AND state IN ('running', 'switching') ORDER BY created_at",
            (tenant_id, project_id),
        )
        return [row_to_migration(r) for r in rows]

    def latest_rebuild(self, tenant_id: str, project_id: str, rag_name: str) -> Migration | None:
        rows = self.sql.query_dicts(
            "SELECT * FROM migrations WHERE tenant_id = ? AND project_id = ? AND rag_name = ? "
            f"ORDER BY created_at DESC, {self.dialect.insertion_order} DESC LIMIT 1",
            (tenant_id, project_id, rag_name),
        )
        return row_to_migration(rows[0]) if rows else None

    def end_rebuild(
        self,
        migration: Migration,
        *,
        state: MigrationState,
        expected: Sequence[MigrationState],
        reason: str | None = None,
    ) -> bool:
        if not expected:
            return False
        expected_in, expected_params = self.dialect.in_list("state", [s.value for s in expected])
        finished = None if state.active else self._clock()
        with self.db.transaction():
            changed = self.db.execute(
                self.dialect.sql(
                    "UPDATE migrations SET state = ?, reason = coalesce(?, reason), "
                    "finished_at = ? WHERE id = ? AND tenant_id = ? AND project_id = ? AND "
                )
                + expected_in,
                (state.value, reason, finished, *_key(migration), *expected_params),
            )
        return bool(changed)

    # -- the queue -------------------------------------------------------------------------

    def _upsert_items(
        self, migration_id: str, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> int:
        ids = list(dict.fromkeys(document_ids))
        if self.dialect.arrays:  # one statement for the whole list
            if not ids:
                return 0
            return self.sql.execute(
                f"INSERT INTO migration_items {_ITEM_COLUMNS} "
                "SELECT ?, d, ?, ? FROM unnest(?::text[]) AS d "
                f"ON CONFLICT (migration_id, document_id) DO UPDATE SET {_REQUEUE}",
                (migration_id, tenant_id, project_id, ids),
            )
        return sum(
            self.sql.execute(
                f"INSERT INTO migration_items {_ITEM_COLUMNS} VALUES (?, ?, ?, ?) "
                f"ON CONFLICT (migration_id, document_id) DO UPDATE SET {_REQUEUE}",
                (migration_id, doc_id, tenant_id, project_id),
            )
            for doc_id in ids
        )

    def queue_items(self, migration: Migration, document_ids: Sequence[str]) -> int:
        with self.db.transaction():
            return self._upsert_items(
                migration.id, migration.tenant_id, migration.project_id, document_ids
            )

    def requeue_documents(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> int:
        if not document_ids:
            return 0
        total = 0
        with self.db.transaction():  # joins the caller's (the document change's) transaction
            for m in self.active_rebuilds(tenant_id, project_id):
                total += self._upsert_items(m.id, tenant_id, project_id, document_ids)
        return total

    def remove_items(self, migration_id: str, document_ids: Sequence[str]) -> int:
        delete = self.dialect.sql("DELETE FROM migration_items WHERE migration_id = ? AND ")
        with self.db.transaction():
            total = 0
            for part in self.dialect.per_statement(list(dict.fromkeys(document_ids))):
                listed, params = self.dialect.in_list("document_id", part)
                total += self.db.execute(delete + listed, (migration_id, *params))
            return total

    def claim_items(
        self, migration: Migration, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[MigrationItem]:
        now = self._clock()
        claim = self.dialect.claim(
            "migration_items",
            "document_id",
            "SELECT document_id FROM migration_items "
            "WHERE migration_id = ? AND tenant_id = ? AND project_id = ? AND ("
            "  (state = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= ?))"
            "  OR (state = 'processing' AND claimed_at < ?)) "
            "ORDER BY document_id LIMIT ?",
            "state = 'processing', claimed_by = ?, claimed_at = ?, claim_token = ?",
            scope="migration_id = ?",
        )
        with self.db.transaction():
            token = self.db.next_sequence()  # one fencing token per claim batch
            rows = self.sql.query_dicts(
                claim,
                (
                    *_key(migration),
                    now,
                    now - claim_ttl_s,
                    batch_size,
                    worker_id,
                    now,
                    token,
                    migration.id,
                ),
            )
        return sorted((row_to_item(r) for r in rows), key=lambda i: i.document_id)

    def holds_item(self, claim: ItemClaim) -> bool:
        return bool(self.sql.query(f"SELECT 1 FROM migration_items {_HELD}", _held(claim)))

    def finish_item(
        self,
        claim: ItemClaim,
        *,
        doc_version: int,
        indexed_hash: str | None,
        skipped: bool = False,
    ) -> bool:
        state = ItemState.SKIPPED if skipped else ItemState.DONE
        with self.db.transaction():
            changed = self.sql.execute(
                "UPDATE migration_items SET state = ?, claimed_by = NULL, claimed_at = NULL, "
                "claim_token = NULL, last_error = NULL, next_attempt_at = NULL, "
                f"doc_version = ?, indexed_hash = ?, completed_at = ? {_HELD}",
                (state.value, doc_version, indexed_hash, self._clock(), *_held(claim)),
            )
        return bool(changed)

    def release_item(
        self,
        claim: ItemClaim,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> ItemState:
        now = self._clock()
        n = 1 if count_attempt else 0
        gave_up, real = f"attempts + {n} >= ?", self.dialect.real
        with self.db.transaction():
            rows = self.sql.query(
                "UPDATE migration_items SET claimed_by = NULL, claimed_at = NULL, "
                f"claim_token = NULL, attempts = attempts + {n}, last_error = ?, "
                f"state = CASE WHEN {gave_up} THEN 'failed' ELSE 'pending' END, "
                f"next_attempt_at = CASE WHEN {gave_up} THEN NULL ELSE ?{real} END, "
                f"completed_at = CASE WHEN {gave_up} THEN ?{real} ELSE NULL END {_HELD} "
                "RETURNING state",
                (
                    capped_error(error),
                    max_attempts,
                    max_attempts,
                    now + retry_delay_s,
                    max_attempts,
                    now,
                    *_held(claim),
                ),
            )
        return ItemState(rows[0][0]) if rows else ItemState.PENDING

    def list_items(self, migration_id: str) -> list[MigrationItem]:
        rows = self.sql.query_dicts(
            "SELECT * FROM migration_items WHERE migration_id = ? ORDER BY document_id",
            (migration_id,),
        )
        return [row_to_item(r) for r in rows]

    def item_counts(self, migration_id: str) -> dict[str, int]:
        counts = {s.value: 0 for s in ItemState}
        for state, n in self.sql.query(
            "SELECT state, count(*) FROM migration_items WHERE migration_id = ? GROUP BY state",
            (migration_id,),
        ):
            counts[state] = int(n)
        return counts

    def item_activity(self, migration_id: str, since: datetime) -> tuple[int, datetime | None]:
        rows = self.sql.query(
            "SELECT count(*), min(completed_at) FROM migration_items WHERE migration_id = ? "
            f"AND completed_at >= ?{self.dialect.real}",
            (migration_id, since.timestamp()),
        )
        return int(rows[0][0]), dt(rows[0][1])

    # -- reads for reconciliation and progress -----------------------------------------------

    def document_heads(self, tenant_id: str, project_id: str) -> list[DocumentHead]:
        rows = self.sql.query_dicts(
            "SELECT id, path, mime_type, rag_enabled, rag_version, index_state, indexed_at "
            "FROM documents WHERE tenant_id = ? AND project_id = ? ORDER BY id",
            (tenant_id, project_id),
        )
        return [
            DocumentHead(
                id=r["id"],
                path=r["path"],
                mime_type=r["mime_type"],
                rag_enabled=None if r["rag_enabled"] is None else bool(r["rag_enabled"]),
                rag_version=int(r["rag_version"]),
                index_state=IndexState(r["index_state"]),
                indexed_at=dt(r["indexed_at"]),
            )
            for r in rows
        ]

    def indexing_activity(
        self, tenant_id: str, project_id: str, since: datetime
    ) -> tuple[int, datetime | None]:
        rows = self.sql.query(
            "SELECT count(*), min(indexed_at) FROM documents WHERE tenant_id = ? "
            f"AND project_id = ? AND indexed_at >= ?{self.dialect.real}",
            (tenant_id, project_id, since.timestamp()),
        )
        return int(rows[0][0]), dt(rows[0][1])

    def adopt_indexed_hashes(
        self, tenant_id: str, project_id: str, hashes: Mapping[str, tuple[int, str | None]]
    ) -> int:
        total = 0
        with self.db.transaction():
            for doc_id, (version, digest) in hashes.items():
                total += self.sql.execute(
                    "UPDATE documents SET rag_indexed_hash = ? WHERE id = ? AND tenant_id = ? "
                    "AND project_id = ? AND rag_version = ?",
                    (digest, doc_id, tenant_id, project_id, version),
                )
        return total
