"""A circuit per embedding endpoint: an outage is the provider's, not the documents'.

An endpoint is (provider, base URL, hash of the key): one tenant's local Ollama is not paused
because another tenant's OpenAI is down. A failure that is the provider's (connection refused,
DNS, timeout, 5xx, 429) opens the endpoint's circuit; 401/403/404 open one for the endpoint
and model as a configuration error. While a circuit is open every call through
:meth:`ProviderCircuits.guard` is refused at once with :class:`ProviderUnavailableError` (no
timeout waited out, no attempt spent); once its wait is over (doubling up to a cap, at least
what ``Retry-After`` asked) one call goes through as the trial: its success closes the circuit,
its failure opens it again for longer. One warning says an endpoint is down, one line says it
is back; the tries in between log at debug level.

Per process: each process learns of an outage from its own first failed call.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from vancetope_rag.embeddings import EmbeddingSettings
from vancetope_rag.errors import ProviderUnavailableError
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.providers.failures import Failure, FailureKind, classify

log = get_logger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """Where embedding calls go: provider, base URL and a hash of the key (never the key)."""

    provider: str
    base_url: str
    key_hash: str

    @classmethod
    def of(cls, settings: EmbeddingSettings) -> Endpoint:
        return cls.keyed(settings.provider, settings.base_url, settings.api_key)

    @classmethod
    def keyed(cls, provider: str, base_url: str | None, api_key: str | None) -> Endpoint:
        """The endpoint of any remote model (a reranker's, a vision model's)."""
        key = api_key or ""
        digest = hashlib.sha256(key.encode()).hexdigest()[:16] if key else ""
        return cls(provider, (base_url or "").rstrip("/"), digest)

    def describe(self) -> str:
        return f"{self.provider} at {self.base_url or 'its default endpoint'}"


@dataclass(frozen=True)
class CircuitState:
    """An open circuit as status, REST and the UI show it."""

    endpoint: Endpoint
    kind: FailureKind
    since: float  # wall clock (epoch seconds)
    retry_in_s: float
    failures: int
    detail: str

    @property
    def config(self) -> bool:
        return self.kind is FailureKind.CONFIG

    def since_iso(self) -> str:
        return datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")

    def describe(self) -> str:
        """``paused: provider unreachable since …`` and what to do."""
        if self.config:
            return (
                f"paused: provider refuses the settings since {self.since_iso()} "
                f"({self.endpoint.describe()}: {self.detail}); fix ai.embedding.apiKey, "
                "ai.embedding.baseUrl or ai.embedding.model"
            )
        return (
            f"paused: provider unreachable since {self.since_iso()} "
            f"({self.endpoint.describe()}: {self.detail}); "
            f"next try in {self.retry_in_s:.0f}s"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "state": "configError" if self.config else "unreachable",
            "provider": self.endpoint.provider,
            "baseUrl": self.endpoint.base_url or None,
            "since": self.since_iso(),
            "retryInSeconds": round(self.retry_in_s, 1),
            "failures": self.failures,
            "error": self.detail,
            "message": self.describe(),
        }


@dataclass
class _Open:
    kind: FailureKind
    since: float
    retry_at: float
    failures: int
    detail: str
    probing: bool = False


_Key = tuple[Endpoint, str | None]  # model None: the whole endpoint (an outage)


class ProviderCircuits:
    """The open circuits of this process, by endpoint (outages) and endpoint+model (the
    settings refused). Thread-safe."""

    def __init__(
        self,
        *,
        retry_s: float = 2.0,
        retry_max_s: float = 30.0,
        config_retry_s: float = 60.0,
        config_retry_max_s: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        label: str = "embedding provider",
        pauses: str = "indexing with it pauses, documents keep their attempts",
        fix: str = "ai.embedding.apiKey, ai.embedding.baseUrl or ai.embedding.model",
    ) -> None:
        #: What the endpoints are, what their outage stops and which settings to fix, in the
        #: log lines (the extraction service keeps circuits of vision models, the rerank
        #: stage of rerankers).
        self.label, self.pauses, self.fix = label, pauses, fix
        self.retry_s, self.retry_max_s = retry_s, retry_max_s
        self.config_retry_s, self.config_retry_max_s = config_retry_s, config_retry_max_s
        #: Monotonic seconds (retry times) and wall seconds ("since"), replaceable in tests.
        self.clock, self.wall = clock, wall
        self._open: dict[_Key, _Open] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(endpoint: Endpoint, model: str) -> tuple[_Key, _Key]:
        return (endpoint, None), (endpoint, model)

    def state(self, endpoint: Endpoint, model: str) -> CircuitState | None:
        """The open circuit in the way of calls to ``model`` at ``endpoint``, or None."""
        with self._lock:
            now = self.clock()
            for key in self._keys(endpoint, model):
                c = self._open.get(key)
                if c is not None:
                    return self._public(endpoint, c, now)
        return None

    def wait_s(self, endpoint: Endpoint, model: str) -> float:
        """Seconds until a call may be tried (0: closed, or due for its trial)."""
        state = self.state(endpoint, model)
        return 0.0 if state is None else state.retry_in_s

    def next_trial_s(self) -> float | None:
        """Seconds until the earliest open circuit is due to be tried; None: all closed."""
        with self._lock:
            now = self.clock()
            waits = [max(0.0, c.retry_at - now) for c in self._open.values() if not c.probing]
        return min(waits) if waits else None

    def open_counts(self) -> dict[tuple[str, str], int]:
        """(provider, ``open``/``config_error``) → open circuits: the metric's samples."""
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for (endpoint, _), c in self._open.items():
                state = "config_error" if c.kind is FailureKind.CONFIG else "open"
                counts[(endpoint.provider, state)] = counts.get((endpoint.provider, state), 0) + 1
        return counts

    def _public(self, endpoint: Endpoint, c: _Open, now: float) -> CircuitState:
        wait = max(0.0, c.retry_at - now)
        return CircuitState(endpoint, c.kind, c.since, wait, c.failures, c.detail)

    def _refusal(self, endpoint: Endpoint, c: _Open, now: float) -> ProviderUnavailableError:
        state = self._public(endpoint, c, now)
        wait = max(state.retry_in_s, 0.1) if c.probing else state.retry_in_s
        what = "refuses the settings" if state.config else "is unavailable"
        return ProviderUnavailableError(
            f"{self.label} {endpoint.describe()} {what} since {state.since_iso()} "
            f"({c.detail}); no call is made until it is tried again in {wait:.0f}s",
            retry_in_s=wait,
            config=state.config,
        )

    def check(self, endpoint: Endpoint, model: str) -> bool:
        """Refuse at once while a circuit is open; True: this caller makes the trial call
        (then it must report through :meth:`succeeded` or :meth:`failed`).

        Raises:
            ProviderUnavailableError: A circuit is open and not due, or its trial runs.
        """
        trial = False
        with self._lock:
            now = self.clock()
            for key in self._keys(endpoint, model):
                c = self._open.get(key)
                if c is None:
                    continue
                if c.probing or now < c.retry_at:
                    raise self._refusal(endpoint, c, now)
                c.probing = trial = True
        return trial

    def succeeded(self, endpoint: Endpoint, model: str) -> None:
        """The provider answered: its circuits close (and the log says it is back)."""
        with self._lock:
            closed = [self._open.pop(k) for k in self._keys(endpoint, model) if k in self._open]
        for c in closed:
            down = max(0.0, self.wall() - c.since)
            log.info(
                "%s %s is back after %.0fs (%d failed calls); %s",
                self.label,
                endpoint.describe(),
                down,
                c.failures,
                "indexing resumes" if self.label == "embedding provider" else "calls resume",
            )

    def abandoned(self, endpoint: Endpoint, model: str) -> None:
        """The trial call never happened (interrupted): the next caller makes it."""
        with self._lock:
            for key in self._keys(endpoint, model):
                c = self._open.get(key)
                if c is not None:
                    c.probing = False

    def failed(self, endpoint: Endpoint, model: str, exc: BaseException) -> Failure:
        """Sort the failure; open (or reopen, for longer) the circuit when it is the
        provider's or the settings'. The input's failure closes it: the provider answered."""
        failure = classify(exc)
        if not failure.provider_side:
            self.succeeded(endpoint, model)
            return failure
        config = failure.kind is FailureKind.CONFIG
        key: _Key = (endpoint, model if config else None)
        with self._lock:
            now, c = self.clock(), self._open.get(key)
            failures = 1 if c is None else c.failures + 1
            base, cap = (
                (self.config_retry_s, self.config_retry_max_s)
                if config
                else (self.retry_s, self.retry_max_s)
            )
            wait = min(cap, base * 2 ** min(failures - 1, 30))
            if failure.retry_after_s is not None:
                wait = max(wait, failure.retry_after_s)
            since = self.wall() if c is None else c.since
            self._open[key] = _Open(failure.kind, since, now + wait, failures, failure.detail)
        if c is None:
            self._log_opened(endpoint, failure, wait)
        else:
            log.debug("%s %s still down (%s)", self.label, endpoint.describe(), failure.detail)
        return failure

    def _log_opened(self, endpoint: Endpoint, failure: Failure, wait: float) -> None:
        if failure.kind is FailureKind.CONFIG:
            log.warning(
                "%s %s refuses the settings (%s); %s: fix %s",
                self.label,
                endpoint.describe(),
                failure.detail,
                self.pauses,
                self.fix,
            )
            return
        log.warning(
            "%s %s is unreachable (%s); %s; next try in %.0fs",
            self.label,
            endpoint.describe(),
            failure.detail,
            self.pauses,
            wait,
        )

    @contextmanager
    def guard(self, endpoint: Endpoint, model: str) -> Iterator[None]:
        """Around one call to the provider: refused at once while open; the outcome is
        recorded; a failure that is the provider's comes out as
        :class:`ProviderUnavailableError` (the cause chained)."""
        self.check(endpoint, model)
        try:
            yield
        except Exception as exc:
            failure = self.failed(endpoint, model, exc)
            if not failure.provider_side:
                raise
            key: _Key = (endpoint, model if failure.kind is FailureKind.CONFIG else None)
            with self._lock:
                c = self._open.get(key)
                refusal = None if c is None else self._refusal(endpoint, c, self.clock())
            if refusal is None:  # closed meanwhile by another thread's success
                raise
            raise refusal from exc
        except BaseException:
            self.abandoned(endpoint, model)
            raise
        self.succeeded(endpoint, model)
