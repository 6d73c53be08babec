"""How many searches this process runs at this moment.

A kernel that can run on one thread or on every core picks by it. A search alone takes every
core: that is its latency (the 12 ms chat turn). Searches side by side take one thread each,
so no thread spins waiting for its share of another search's work while that search's other
steps (the scan, the Python of the turn) need the core (16 concurrent turns: docs/benchmarks.md,
"Concurrent turns at the default threads").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SEARCHES", "Gauge"]


class Gauge:
    """A count of what runs now, raised for the span of a ``with``."""

    def __init__(self) -> None:
        self._count = 0
        #: How many have begun since the process started.
        self.begun = 0
        self._lock = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            self._count += 1
            self.begun += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    @property
    def count(self) -> int:
        return self._count

    def crowded(self) -> bool:
        """More than one runs now."""
        return self._count > 1


#: Queries being answered (embedded and searched) in this process: :meth:`RagService.query
#: <vancetope_rag.services.rag.RagService.query>` holds it.
SEARCHES = Gauge()
