"""One background thread per kind of work, for the whole process.

Work that a query starts but need not wait for (packing a RAG's int8 rows for oneDNN, building
a RAG's in-process BM25 index) runs on a :class:`SerialWorker`: one daemon thread that runs
the jobs queued for it one after another. A process that loads many RAGs at once (a restart
under load) queues their work instead of starting a thread (and its memory, and torch's
threads) per RAG; the queries meanwhile answer the slower way they had before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from vancetope_rag.secrets import get_logger

__all__ = ["SerialWorker"]

log = get_logger(__name__)


class SerialWorker:
    """Runs queued jobs one at a time on a daemon thread named ``name``, started at the
    first job (and again in a forked process: threads do not survive a fork; the queue
    does). A job that raises is logged and the next one runs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], object]) -> None:
        self.revive()
        self._queue.put(job)

    def revive(self) -> None:
        """Start the thread if it is not running (in a forked process: the jobs queued
        before the fork run now)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:
                log.exception("background job of %s failed", self.name)
