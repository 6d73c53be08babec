"""The RAG catalog of the SQL stores (SQLite, PostgreSQL): live RAGs for readers, every
generation for rebuilds. One code path for both, over the store's
:class:`~.sql.dialect.Dialect` (its parameter marker).

A name's generations are rows of ``rags`` told apart by ``state``; a partial unique index
keeps one *live* row per tenant, project and name, so a rebuild's switch (the stores'
``switch_live``) is two row updates in one transaction.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Generic

from vancetope_rag.domain.records import RagRecord, RagState
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.store.port.shared import rag_exists_error
from vancetope_rag.store.port.types import Clock
from vancetope_rag.store.sql.dialect import D, Dialect, Marked
from vancetope_rag.store.sql.errors import ConstraintViolation
from vancetope_rag.store.sql.rows import rag_row, row_to_rag

__all__ = ["SqlRagCatalog"]


class SqlRagCatalog(Generic[D]):
    """The RAG catalog methods of a SQL control store (and of its rebuild store). SQL is
    written with ``?`` and sent through :attr:`sql` in the dialect's marker."""

    def __init__(self, db: D, dialect: Dialect, *, clock: Clock = time.time) -> None:
        self.db = db
        self.dialect = dialect
        self.sql = Marked(db, dialect)
        self._clock = clock

    def _rags(self, where: str, params: Any) -> list[RagRecord]:
        rows = self.sql.query_dicts(f"SELECT * FROM rags WHERE {where}", params)
        return [row_to_rag(r) for r in rows]

    def _insert(self, rag: RagRecord) -> RagRecord:
        created = rag.created_at.timestamp() if rag.created_at else self._clock()
        try:
            with self.db.transaction():
                self.db.execute(*self.dialect.insert("rags", rag_row(rag, created)))
        except ConstraintViolation as exc:
            raise rag_exists_error(rag) from exc
        stored = self.get_any_rag(rag.tenant_id, rag.project_id, rag.id)
        assert stored is not None
        return stored

    # -- live (what readers see) -----------------------------------------------------------

    def insert_rag(self, rag: RagRecord) -> RagRecord:
        return self._insert(replace(rag, state=RagState.LIVE, retired_at=None))

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        found = self._rags(
            "id = ? AND tenant_id = ? AND project_id = ? AND state = 'live'",
            (rag_id, tenant_id, project_id),
        )
        return found[0] if found else None

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        found = self._rags(
            "name = ? AND tenant_id = ? AND project_id = ? AND state = 'live'",
            (name, tenant_id, project_id),
        )
        return found[0] if found else None

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        return self._rags(
            "tenant_id = ? AND project_id = ? AND state = 'live' ORDER BY name",
            (tenant_id, project_id),
        )

    def set_rag_calibration(
        self, tenant_id: str, project_id: str, rag_id: str, calibration: Calibration
    ) -> bool:
        with self.db.transaction():
            return bool(
                self.sql.execute(
                    (
                        "UPDATE rags SET calibration = ? "
                        "WHERE id = ? AND tenant_id = ? AND project_id = ?"
                    ),
                    (calibration.to_json(), rag_id, tenant_id, project_id),
                )
            )

    def rag_dimensions(self) -> set[int]:
        rows = self.db.query("SELECT DISTINCT embedding_dimension FROM rags")
        return {int(r[0]) for r in rows}

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        with self.db.transaction():
            return bool(
                self.sql.execute(
                    ("DELETE FROM rags WHERE id = ? AND tenant_id = ? AND project_id = ?"),
                    (rag_id, tenant_id, project_id),
                )
            )

    # -- every generation -----------------------------------------------------------------

    def insert_generation(self, rag: RagRecord) -> RagRecord:
        return self._insert(replace(rag, state=RagState.SHADOW, retired_at=None))

    def get_any_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        found = self._rags(
            "id = ? AND tenant_id = ? AND project_id = ?", (rag_id, tenant_id, project_id)
        )
        return found[0] if found else None

    def rag_generations(
        self, tenant_id: str, project_id: str, name: str | None = None
    ) -> list[RagRecord]:
        where, params = "tenant_id = ? AND project_id = ?", [tenant_id, project_id]
        if name is not None:
            where += " AND name = ?"
            params.append(name)
        return self._rags(where + " ORDER BY name, generation, created_at", params)
