"""The key-value parts of the SQLite control store: cascade settings and the embedding cache.

A base class of :class:`~vancetope_rag.store.sqlite.control.SqliteControlStore`, apart
because neither has anything to do with documents, claims or the RAG catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vancetope_rag.store.shared import unique_batches, vector_from_bytes, vector_to_bytes
from vancetope_rag.store.sqlite.db import SqliteDatabase


class SqliteSettingsAndCache:
    """Settings per tenant and project scope, and cached embeddings per model."""

    db: SqliteDatabase

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
        for part in unique_batches(text_hashes, 500):
            marks = ",".join("?" * len(part))
            for h, blob in self.db.query(
                f"SELECT text_hash, vector FROM embedding_cache WHERE model_key = ? "
                f"AND text_hash IN ({marks})",
                (model_key, *part),
            ):
                found[h] = vector_from_bytes(blob)
        return found

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        if not items:
            return
        with self.db.transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO embedding_cache (model_key, text_hash, vector) "
                "VALUES (?, ?, ?)",
                [(model_key, h, vector_to_bytes(v)) for h, v in items.items()],
            )
