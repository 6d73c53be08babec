"""The key-value parts of a SQL control store: cascade settings and the embedding cache, one
implementation over the store's :class:`~.sql.dialect.Dialect`.

A base class of :class:`~vancetope_rag.store.sql.control.SqlControlStore`, apart because
neither has anything to do with documents, claims or the RAG catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic

from vancetope_rag.store.port.shared import (
    settings_by_scope,
    unique_batches,
    vector_from_bytes,
    vector_to_bytes,
)
from vancetope_rag.store.sql.dialect import D, Dialect, Marked


class SqlSettingsAndCache(Generic[D]):
    """Settings per tenant and project scope, and cached embeddings per model."""

    db: D
    dialect: Dialect
    sql: Marked

    # -- settings ----------------------------------------------------------------------

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]:
        rows = self.sql.query(
            "SELECT key, value FROM settings WHERE tenant_id = ? AND project_id = ?",
            (tenant_id, project_id or ""),
        )
        return {k: v for k, v in rows}

    def get_scope_settings(
        self, tenant_id: str, project_id: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        rows = self.sql.query(
            "SELECT project_id, key, value FROM settings WHERE tenant_id = ? "
            "AND project_id IN ('', ?)",
            (tenant_id, project_id),
        )
        return settings_by_scope(rows)

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        if value is None:
            self.sql.write(
                "DELETE FROM settings WHERE tenant_id = ? AND project_id = ? AND key = ?",
                (tenant_id, project_id or "", key),
            )
            return
        self.sql.write(
            "INSERT INTO settings (tenant_id, project_id, key, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant_id, project_id, key) DO UPDATE SET value = excluded.value",
            (tenant_id, project_id or "", key, value),
        )

    def settings_scopes(self) -> list[tuple[str, str | None]]:
        rows = self.db.query(
            "SELECT DISTINCT tenant_id, project_id FROM settings ORDER BY tenant_id, project_id"
        )
        return [(str(t), str(p) if p else None) for t, p in rows]

    # -- embedding cache ---------------------------------------------------------------

    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for part in unique_batches(text_hashes, self.dialect.list_batch):
            listed, params = self.dialect.in_list("text_hash", part)
            for h, blob in self.db.query(
                self.dialect.sql(
                    "SELECT text_hash, vector FROM embedding_cache WHERE model_key = ? AND "
                )
                + listed,
                (model_key, *params),
            ):
                found[h] = vector_from_bytes(bytes(blob))
        return found

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        if not items:
            return
        with self.db.transaction():
            self.db.executemany(
                self.dialect.sql(
                    "INSERT INTO embedding_cache (model_key, text_hash, vector) VALUES (?, ?, ?) "
                    "ON CONFLICT DO NOTHING"
                ),
                [(model_key, h, vector_to_bytes(v)) for h, v in items.items()],
            )

    def scan_cached_embeddings(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str, list[float]]]:
        if limit < 1:
            return []
        model, text = (f"{column}{self.dialect.bytewise}" for column in ("model_key", "text_hash"))
        where, params = "", []
        if after is not None:
            where, params = f"WHERE ({model}, {text}) > (?, ?) ", [after[0], after[1]]
        rows = self.sql.query(
            f"SELECT model_key, text_hash, vector FROM embedding_cache {where}"
            f"ORDER BY {model}, {text} LIMIT ?",
            (*params, limit),
        )
        return [(str(m), str(h), vector_from_bytes(bytes(blob))) for m, h, blob in rows]
