"""The indexer workers' heartbeats in the SQL stores (SQLite, PostgreSQL): one ``workers``
row per worker, times in seconds since the epoch on the store's clock. One code path for
both (SQL written with ``?``, sent in the store's dialect), as :mod:`.sql.catalog`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic

from vancetope_rag.domain.heartbeats import (
    PRUNE_AFTER_S,
    WorkerHeartbeat,
    circuits_from_text,
    circuits_to_text,
)
from vancetope_rag.store.port.heartbeats import Beat
from vancetope_rag.store.port.types import Clock
from vancetope_rag.store.sql.dialect import D, Marked
from vancetope_rag.store.sql.rows import dt

__all__ = ["SqlHeartbeats", "row_to_heartbeat"]

_UPSERT = """
INSERT INTO workers
    (worker_id, node_id, version, interval_s, started_at, last_tick, stopped_at, circuits)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (worker_id) DO UPDATE SET
    node_id = excluded.node_id, version = excluded.version, interval_s = excluded.interval_s,
    started_at = CASE WHEN workers.stopped_at IS NULL THEN workers.started_at
        ELSE excluded.started_at END,
    last_tick = excluded.last_tick, stopped_at = excluded.stopped_at,
    circuits = excluded.circuits
"""


def row_to_heartbeat(r: Mapping[str, Any]) -> WorkerHeartbeat:
    started, last = dt(r["started_at"]), dt(r["last_tick"])
    assert started is not None and last is not None
    return WorkerHeartbeat(
        worker_id=r["worker_id"],
        node_id=r["node_id"],
        version=r["version"],
        interval_s=float(r["interval_s"]),
        started_at=started,
        last_tick=last,
        stopped_at=dt(r["stopped_at"]),
        circuits=circuits_from_text(r.get("circuits")),
    )


class SqlHeartbeats(Generic[D]):
    """:class:`~vancetope_rag.store.port.HeartbeatStore` of a SQL control store (a mixin
    beside :class:`~.sql.catalog.SqlRagCatalog`, whose database and clock it uses)."""

    db: D
    sql: Marked
    lease_clock: Clock

    def record_heartbeat(self, beat: Beat) -> None:
        now, b = self.lease_clock(), beat
        stopped_at, text = now if b.stopped else None, circuits_to_text(b.circuits)
        row = (b.worker_id, b.node_id, b.version, b.interval_s, now, now, stopped_at, text)
        with self.db.transaction():
            self.sql.execute("DELETE FROM workers WHERE last_tick < ?", (now - PRUNE_AFTER_S,))
            self.sql.execute(_UPSERT, row)

    def list_heartbeats(self) -> list[WorkerHeartbeat]:
        rows = self.db.query_dicts("SELECT * FROM workers ORDER BY last_tick DESC, worker_id")
        return [row_to_heartbeat(r) for r in rows]

    def check_ready(self) -> str | None:
        return self.db.check_ready()
