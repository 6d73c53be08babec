"""Wake-ups across processes: ``LISTEN``/``NOTIFY`` on a dedicated connection.

A trigger on ``documents`` (schema step 2, :mod:`.postgres.schema`) notifies the channel
:data:`CHANNEL` whenever a row is queued for the indexer (inserted or updated with
``rag_dirty = 1``), with the table's schema as the payload: every path that queues a
document notifies, whichever process or tool wrote it. PostgreSQL delivers the notification
when the transaction commits, once per transaction and payload, so a bulk import wakes an
indexer once.

:class:`QueuedListener` holds one connection outside the pool (a pooled connection would be
reused for other statements), ``LISTEN``s, and calls ``wake`` for each notification of its
own schema. A pooler in transaction mode accepts ``LISTEN`` and never delivers: so the
listener first sends itself a notification and waits for it, and says in one log line
whether wake-ups work or the indexer polls. A lost connection is reopened with backoff;
the interval keeps ticking meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable

import psycopg

from vancetope_rag.secrets import get_logger
from vancetope_rag.store.postgres.errors import scrubbed
from vancetope_rag.store.postgres.uri import PostgresUri

__all__ = ["CHANNEL", "QueuedListener"]

log = get_logger(__name__)

#: The channel the ``documents`` trigger notifies.
CHANNEL = "vancetope_rag_queued"

#: How long the start-up round trip waits for its own notification.
_PROBE_S = 5.0
_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


class QueuedListener:
    """A daemon thread that calls ``wake`` when any process queues documents in the store's
    schema. :meth:`stop` ends it; :attr:`delivering` says whether the round trip came back."""

    def __init__(self, uri: PostgresUri, schema: str, wake: Callable[[], None]) -> None:
        self._uri = uri
        self._schema = schema
        self._wake = wake
        self._stop = threading.Event()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        #: None until the start-up check ends; then whether notifications arrive here.
        self.delivering: bool | None = None
        self.checked = threading.Event()
        self.wakeups = 0
        self._thread = threading.Thread(target=self._run, name="vancetope-rag-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):  # closed already
                conn.cancel_safe()  # ends a blocking wait for notifications at once
        self._thread.join(timeout=10)

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        conn = psycopg.connect(
            self._uri.conninfo,
            autocommit=True,
            application_name="vancetope-rag-listen",
            connect_timeout=10,
        )
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._conn = self._connect()
                if self.delivering is None:
                    self._check(self._conn)
                    if not self.delivering:
                        return  # polling only: nothing would ever arrive
                failures = 0
                self._listen(self._conn)
            except Exception as exc:
                if self._stop.is_set():
                    return
                wait = _BACKOFF_S[min(failures, len(_BACKOFF_S) - 1)]
                failures += 1
                log.warning(
                    "store %s: lost the LISTEN connection (%s); wake-ups resume after a "
                    "reconnect in %g s, the indexer's interval keeps ticking",
                    self._uri.shown,
                    scrubbed(exc, self._uri.password),
                    wait,
                )
                self._stop.wait(wait)
            finally:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()

    def _check(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Send ourselves a notification through another connection and wait for it."""
        token = f"probe:{uuid.uuid4().hex}"
        with psycopg.connect(self._uri.conninfo, autocommit=True, connect_timeout=10) as other:
            other.execute("SELECT pg_notify(%s, %s)", (CHANNEL, token))
        self.delivering = any(
            n.payload == token for n in conn.notifies(timeout=_PROBE_S, stop_after=1)
        )
        if self.delivering:
            log.info(
                "store %s: LISTEN/NOTIFY works; a document queued by any process wakes "
                "this indexer",
                self._uri.shown,
            )
        else:
            log.warning(
                "store %s: a NOTIFY did not come back within %g s (a pooler in transaction "
                "mode?); documents queued by other processes are found at the indexer's "
                "next tick",
                self._uri.shown,
                _PROBE_S,
            )
        self.checked.set()

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stop.is_set():
            for note in conn.notifies(timeout=1.0):
                if note.payload == self._schema:
                    self.wakeups += 1
                    self._wake()
