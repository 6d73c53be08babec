"""The key-value parts of the PostgreSQL control store: cascade settings and the embedding
cache (a base class of :class:`~.postgres.control.PostgresControlStore`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vancetope_rag.store.port.shared import (
    settings_by_scope,
    unique_batches,
    vector_from_bytes,
    vector_to_bytes,
)
from vancetope_rag.store.postgres.db import PostgresDatabase


class PostgresSettingsAndCache:
    """Settings per tenant and project scope, and cached embeddings per model."""

    db: PostgresDatabase

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]:
        rows = self.db.query(
            "SELECT key, value FROM settings WHERE tenant_id = %s AND project_id = %s",
            (tenant_id, project_id or ""),
        )
        return {k: v for k, v in rows}

    def get_scope_settings(
        self, tenant_id: str, project_id: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        rows = self.db.query(
            "SELECT project_id, key, value FROM settings WHERE tenant_id = %s "
            "AND project_id IN ('', %s)",
            (tenant_id, project_id),
        )
        return settings_by_scope(rows)

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        if value is None:
            self.db.execute(
                "DELETE FROM settings WHERE tenant_id = %s AND project_id = %s AND key = %s",
                (tenant_id, project_id or "", key),
            )
            return
        self.db.execute(
            "INSERT INTO settings (tenant_id, project_id, key, value) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (tenant_id, project_id, key) DO UPDATE SET value = excluded.value",
            (tenant_id, project_id or "", key, value),
        )

    def settings_scopes(self) -> list[tuple[str, str | None]]:
        rows = self.db.query(
            "SELECT DISTINCT tenant_id, project_id FROM settings ORDER BY tenant_id, project_id"
        )
        return [(str(t), str(p) if p else None) for t, p in rows]

    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for part in unique_batches(text_hashes, 1000):
            for h, blob in self.db.query(
                "SELECT text_hash, vector FROM embedding_cache WHERE model_key = %s "
                "AND text_hash = ANY(%s)",
                (model_key, part),
            ):
                found[h] = vector_from_bytes(bytes(blob))
        return found

    def put_cached_embeddings(self, model_key: str, items: Mapping[str, Sequence[float]]) -> None:
        if not items:
            return
        with self.db.transaction():
            self.db.executemany(
                "INSERT INTO embedding_cache (model_key, text_hash, vector) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                [(model_key, h, vector_to_bytes(v)) for h, v in items.items()],
            )

    def scan_cached_embeddings(
        self, *, after: tuple[str, str] | None = None, limit: int = 1000
    ) -> list[tuple[str, str, list[float]]]:
        if limit < 1:
            return []
        where, params = "", []
        if after is not None:
            where = 'WHERE (model_key COLLATE "C", text_hash COLLATE "C") > (%s, %s) '
            params = [after[0], after[1]]
        rows = self.db.query(
            f"SELECT model_key, text_hash, vector FROM embedding_cache {where}"
            'ORDER BY model_key COLLATE "C", text_hash COLLATE "C" LIMIT %s',
            (*params, limit),
        )
        return [(str(m), str(h), vector_from_bytes(bytes(blob))) for m, h, blob in rows]
