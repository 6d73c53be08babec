"""Liveness and readiness of a process (``/healthz``, ``/readyz`` on ``serve`` and on
``worker --metrics-port``), in the shapes Kubernetes probes expect.

``/healthz`` answers 200 while the process serves HTTP at all: it touches nothing. ``/readyz``
answers 200 when the store answers and holds the schema this package needs, else 503 with a
reason in fixed words (``store unreachable``, ``store not initialised: …``): probes are
unauthenticated, so no answer names a host, a database, a schema or a driver's message (the
log has those, once per change). The store is asked at most once per ``ttl_s`` whatever the
probe rate, and a store that does not answer within ``timeout_s`` makes a 503, not a probe
that hangs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import error_text, get_logger

log = get_logger(__name__)

#: Paths of the probes (and of the scrape): their access lines are DEBUG, not INFO, since a
#: load balancer or Prometheus calls them every few seconds.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
UNREACHABLE = "store unreachable"

Check = Callable[[], "str | None"]


def liveness() -> tuple[int, dict[str, Any]]:
    return 200, {"status": "ok"}


class Readiness:
    """``/readyz``'s answer from ``check`` (a store's ``check_ready``: None when ready, a
    reason when not, :class:`StoreError` when unreachable)."""

    def __init__(
        self,
        check: Check,
        *,
        timeout_s: float = 3.0,
        ttl_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._check = check
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._answer: tuple[float, str | None] | None = None
        self._running: threading.Thread | None = None
        self._result: list[str | None] = []
        self._last_logged: str | None = None

    def reason(self) -> str | None:
        """None when ready, else why not."""
        with self._lock:
            now = self._clock()
            if self._answer is not None and now - self._answer[0] < self.ttl_s:
                return self._answer[1]
            if self._running is None or not self._running.is_alive():
                self._result = []
                self._running = threading.Thread(
                    target=self._run, args=(self._result,), name="readyz", daemon=True
                )
                self._running.start()
            running, result = self._running, self._result
        running.join(self.timeout_s)
        answer = (
            result[0]
            if result
            else f"store did not answer within {self.timeout_s:g} s ({UNREACHABLE})"
        )
        with self._lock:
            self._answer = (self._clock(), answer)
            if answer != self._last_logged:
                if answer is not None:
                    log.warning("not ready: %s", answer)
                elif self._last_logged is not None:
                    log.info("ready again")
                self._last_logged = answer
        return answer

    def _run(self, result: list[str | None]) -> None:
        try:
            result.append(self._check())
        except StoreError as exc:
            log.warning("readiness check: %s", error_text(exc))
            result.append(UNREACHABLE)
        except Exception:
            log.exception("readiness check failed")
            result.append("readiness check failed")

    def answer(self) -> tuple[int, dict[str, Any]]:
        """The status code and JSON body of ``/readyz``."""
        why = self.reason()
        if why is None:
            return 200, {"status": "ready"}
        return 503, {"status": "unavailable", "reason": why}
