"""The indexer workers' heartbeats in the SQL stores (SQLite, PostgreSQL): one ``workers``
row per worker, times in seconds since the epoch on the store's clock. One code path for
both (SQL written with ``?``, sent with the store's marker), as :mod:`.sql_catalog`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from vancetope_rag.domain.heartbeats import PRUNE_AFTER_S, WorkerHeartbeat
from vancetope_rag.store.port.types import Clock
from vancetope_rag.store.rows import dt
from vancetope_rag.store.sql_catalog import SqlDatabase

__all__ = ["SqlHeartbeats", "row_to_heartbeat"]

_UPSERT = """
INSERT INTO workers (worker_id, node_id, version, interval_s, started_at, last_tick, stopped_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (worker_id) DO UPDATE SET
    node_id = excluded.node_id, version = excluded.version, interval_s = excluded.interval_s,
    started_at = CASE WHEN workers.stopped_at IS NULL THEN workers.started_at
        ELSE excluded.started_at END,
    last_tick = excluded.last_tick, stopped_at = excluded.stopped_at
"""

D = TypeVar("D", bound=SqlDatabase)


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
    )


class SqlHeartbeats(Generic[D]):
    """:class:`~vancetope_rag.store.port.HeartbeatStore` of a SQL control store (a mixin
    beside :class:`~.sql_catalog.SqlRagCatalog`, whose marker and clock it uses)."""

    db: D
    mark: str
    _clock: Clock

    def _heartbeat_time(self) -> float:
        """Now, on the clock the store's leases use."""
        return self._clock()

    def record_heartbeat(
        self,
        worker_id: str,
        *,
        node_id: str,
        version: str,
        interval_s: float,
        stopped: bool = False,
    ) -> None:
        now = self._heartbeat_time()
        row = (worker_id, node_id, version, interval_s, now, now, now if stopped else None)
        with self.db.transaction():
            self.db.execute(
                "DELETE FROM workers WHERE last_tick < ?".replace("?", self.mark),
                (now - PRUNE_AFTER_S,),
            )
            self.db.execute(_UPSERT.replace("?", self.mark), row)

    def list_heartbeats(self) -> list[WorkerHeartbeat]:
        rows = self.db.query_dicts("SELECT * FROM workers ORDER BY last_tick DESC, worker_id")
        return [row_to_heartbeat(r) for r in rows]

    def check_ready(self) -> str | None:
        """A SQLite file's schema is made when it opens: it is ready once it answers."""
        self.db.query("SELECT 1 FROM workers LIMIT 1")
        return None
