"""Liveness and readiness of a process (``/healthz``, ``/readyz`` on ``serve`` and on
``worker --metrics-port``), in the shapes Kubernetes probes expect.

``/healthz`` answers 200 while the process serves HTTP at all: it touches nothing. ``/readyz``
answers 200 when the store answers and holds the schema this package needs, else 503 with a
reason in fixed words (``store unreachable``, ``store not initialised: …``): probes are
unauthenticated, so no answer names a host, a database, a schema or a driver's message (the
log has those, once per change). The store is asked at most once per ``ttl_s`` whatever the
probe rate, and a store that does not answer within ``timeout_s`` makes a 503, not a probe
that hangs.

What every process's access lines share lives here too: the probe paths (DEBUG lines) and
the rule a caller's ``X-Request-Id`` is kept by (:func:`request_id_of`).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from vancetope_rag.errors import StoreError
from vancetope_rag.secrets import error_text, get_logger

log = get_logger(__name__)

#: Paths of the probes (and of the scrape): their access lines are DEBUG, not INFO, since a
#: load balancer or Prometheus calls them every few seconds.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
UNREACHABLE = "store unreachable"
#: ``/readyz``'s status when it answers 503, on every process (``serve``, ``worker``, ``proxy``).
UNAVAILABLE = "unavailable"
#: A caller's ``X-Request-Id`` is kept (logged, echoed, sent upstream by the proxy) only when
#: it is this plain: bounded, printable, no spaces. Anything else (a newline forging a log
#: line, a key pasted by mistake) is replaced by one of ours.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")

Check = Callable[[], "str | None"]


def request_id_of(given: str | None) -> str:
    """The caller's request id when it is a plain token, else a new one."""
    if given is not None and _REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def liveness() -> tuple[int, dict[str, Any]]:
    return 200, {"status": "ok"}


class Readiness:
    """``/readyz``'s answer from ``check`` (a store's ``check_ready``: None when ready, a
    reason when not, :class:`StoreError` when unreachable), run by one thread of its own
    (which keeps its store connection from probe to probe)."""

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
        self._cond = threading.Condition()
        self._asked = 0  # checks asked for …
        self._answered = 0  # … and answered, by the checking thread
        self._result: str | None = None
        self._thread: threading.Thread | None = None
        self._answer: tuple[float, str | None] | None = None
        self._last_logged: str | None = None

    def reason(self) -> str | None:
        """None when ready, else why not."""
        with self._cond:
            if self._answer is not None and self._clock() - self._answer[0] < self.ttl_s:
                return self._answer[1]
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="readyz", daemon=True)
                self._thread.start()
            if self._asked == self._answered:  # else a check is under way: wait for it
                self._asked += 1
                self._cond.notify_all()
            wanted = self._asked
            answered = self._cond.wait_for(lambda: self._answered >= wanted, self.timeout_s)
            answer = (
                self._result
                if answered
                else f"store did not answer within {self.timeout_s:g} s ({UNREACHABLE})"
            )
            self._answer = (self._clock(), answer)
            if answer != self._last_logged:
                if answer is not None:
                    log.warning("not ready: %s", answer)
                elif self._last_logged is not None:
                    log.info("ready again")
                self._last_logged = answer
            return answer

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._asked > self._answered)
                target = self._asked
            result = self._run_check()
            with self._cond:
                self._result, self._answered = result, target
                self._cond.notify_all()

    def _run_check(self) -> str | None:
        try:
            return self._check()
        except StoreError as exc:
            log.warning("readiness check: %s", error_text(exc))
            return UNREACHABLE
        except Exception:
            log.exception("readiness check failed")
            return "readiness check failed"

    def answer(self) -> tuple[int, dict[str, Any]]:
        """The status code and JSON body of ``/readyz``."""
        why = self.reason()
        if why is None:
            return 200, {"status": "ready"}
        return 503, {"status": UNAVAILABLE, "reason": why}
