"""Pacing of remote embedding providers: ``ai.embedding.requestsPerMinute`` and
``ai.embedding.tokensPerMinute`` per endpoint, in this process.

A sliding window of the last minute's requests: a request that would exceed either limit
waits until enough of them have left the window, so no 60-second window ever holds more
than the limit (what providers' rate limiters count). In-process models are not paced: they
drain as fast as the model allows.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

WINDOW_S = 60.0
_MIN_SLEEP_S = 0.001  # a float rounding a wait to nothing must not spin


class _Window:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # one waiter at a time per endpoint: first come first served
        self.sent: deque[tuple[float, int]] = deque()  # (when, tokens)


class Pacer:
    """Requests and tokens per minute, per endpoint (any hashable key). Thread-safe."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        window_s: float = WINDOW_S,
    ) -> None:
        self._clock, self._sleep, self.window_s = clock, sleep, window_s
        self._windows: dict[Hashable, _Window] = {}
        self._lock = threading.Lock()
        #: Seconds this pacer made callers wait, in all (for tests and the log).
        self.waited_s = 0.0

    def _window(self, endpoint: Hashable) -> _Window:
        with self._lock:
            return self._windows.setdefault(endpoint, _Window())

    def _wait(self, w: _Window, now: float, rpm: int | None, tpm: int | None, tokens: int) -> float:
        """Seconds until one more request of ``tokens`` fits both limits (0: now)."""
        while w.sent and w.sent[0][0] <= now - self.window_s:
            w.sent.popleft()
        wait = 0.0
        if rpm is not None and len(w.sent) >= rpm:
            wait = w.sent[len(w.sent) - rpm][0] + self.window_s - now
        if tpm is not None and w.sent:
            used = sum(n for _, n in w.sent)
            for when, n in w.sent:  # the oldest leave first
                if used + tokens <= tpm:
                    break
                used -= n
                wait = max(wait, when + self.window_s - now)
        return wait

    def acquire(
        self,
        endpoint: Hashable,
        *,
        rpm: int | None,
        tpm: int | None,
        tokens: int = 0,
        block: bool = True,
    ) -> float:
        """Take one request's place in the window, waiting for it when ``block``; returns
        the seconds waited. ``block=False`` (a chat turn's query) counts the request at once:
        a turn never waits for the indexer's budget, the indexer waits for the turn's."""
        if rpm is None and tpm is None:
            return 0.0
        w = self._window(endpoint)
        waited = 0.0
        with w.lock:
            while True:
                now = self._clock()
                wait = self._wait(w, now, rpm, tpm, tokens) if block else 0.0
                if wait <= 0:
                    w.sent.append((now, tokens))
                    break
                step = max(wait, _MIN_SLEEP_S)
                self._sleep(step)
                waited += step
        with self._lock:
            self.waited_s += waited
        return waited

    def try_acquire(
        self, endpoint: Hashable, *, rpm: int | None, tpm: int | None, tokens: int = 0
    ) -> bool:
        """Take one request's place only if it fits the limits now; False (nothing taken)
        otherwise: for a caller that goes without rather than waits (the rerank stage)."""
        if rpm is None and tpm is None:
            return True
        w = self._window(endpoint)
        with w.lock:
            now = self._clock()
            if self._wait(w, now, rpm, tpm, tokens) > 0:
                return False
            w.sent.append((now, tokens))
        return True
