"""The PostgreSQL side of the workers' heartbeats (schema step 9): the lease clock, and a
readiness probe that reads the schema version again and waits briefly for a connection."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from vancetope_rag.store.port.types import Clock
from vancetope_rag.store.postgres.db import PostgresDatabase
from vancetope_rag.store.postgres.schema import SCHEMA_VERSION
from vancetope_rag.store.sql_heartbeats import SqlHeartbeats

#: How long the readiness probe waits for a pooled connection (the pool's own wait is the
#: connect timeout, 15 s by default: longer than a probe's).
READY_TIMEOUT_S = 2.0


class PostgresHeartbeats(SqlHeartbeats[PostgresDatabase]):
    """Heartbeats and the readiness probe of :class:`~.postgres.control.PostgresControlStore`."""

    lease_clock: Clock

    def _heartbeat_time(self) -> float:
        return self.lease_clock()

    def check_ready(self) -> str | None:
        # Read again on every probe: the database caches a schema it once found good.
        try:
            with self.db.pool.connection(timeout=READY_TIMEOUT_S) as conn:
                found = self.db.schema_version(conn)
        except (psycopg.Error, PoolTimeout) as exc:
            raise self.db._error(exc) from exc
        if found == 0:
            return "store not initialised: run `vancetope-rag init`"
        if found != SCHEMA_VERSION:
            return f"store schema version {found}, this package needs {SCHEMA_VERSION}: run init"
        return None
