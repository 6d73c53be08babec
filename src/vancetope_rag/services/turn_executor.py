"""The threads that run async chat turns (:meth:`RagApp.apre_turn`).

A turn blocks on the query embedding and the store, so an async host runs it in a thread.
``asyncio.to_thread`` would use the event loop's default executor, which every other
``to_thread`` of the host shares (file reads, DNS, other libraries) and whose size is
``min(32, cpu + 4)``: 6 on a 2-core host. Turns get an executor of their own instead: a burst
of turns neither queues behind the host's other blocking work nor starves it, its size is a
setting (``VANCETOPE_RAG_TURN_WORKERS``), and :meth:`RagApp.close` ends its threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from vancetope_rag.errors import EngineClosedError

R = TypeVar("R")


class TurnExecutor:
    """A thread pool for turns, made at the first turn and shut down once."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise EngineClosedError(
                    "this RagApp is closed: async turns cannot run any more; open a new app "
                    "(RagApp.open) for further turns"
                )
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="vrag-turn")
            return self._pool

    async def run(self, fn: Callable[..., R], *args: object) -> R:
        """``fn(*args)`` in one of the turn threads, with the caller's context variables
        (instrumentation spans), as ``asyncio.to_thread`` does."""
        pool = self._executor()
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    def shutdown(self, wait: bool = True) -> None:
        """End the threads (turns already running finish first when ``wait``); later turns
        are refused with :class:`EngineClosedError`."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)
