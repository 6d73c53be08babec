"""A circuit per embedding endpoint: an outage is the provider's, not the documents'.

An endpoint is (provider, base URL, hash of the key): one tenant's local Ollama is not paused
because another tenant's OpenAI is down. A failure that is the provider's (connection refused,
DNS, timeout, 5xx, 429) opens the endpoint's circuit; 401/403/404 open one for the endpoint
and model as a configuration error; vectors of another dimension than the RAG pinned open one
for the endpoint, model and that dimension (a rebuild onto the new dimension is not held up by
it). While a circuit is open every call through
:meth:`ProviderCircuits.guard` is refused at once with :class:`ProviderUnavailableError` (no
timeout waited out, no attempt spent); once its wait is over (doubling up to a cap, at least
what ``Retry-After`` asked) one call goes through as the trial: its success closes the circuit,
its failure opens it again for longer. One warning says an endpoint is down, one line says it
is back; the tries in between log at debug level.

Per process: each process learns of an outage from its own first failed call. A worker's
heartbeat carries its open circuits (:meth:`ProviderCircuits.open_circuits`), so the status of
any process shows the pause (:meth:`CircuitState.of_record`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from vancetope_rag.domain.heartbeats import OpenCircuit
from vancetope_rag.embeddings import EmbeddingSettings
from vancetope_rag.errors import DimensionPausedError, ProviderUnavailableError
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

    def same(self, circuit: OpenCircuit) -> bool:
        """Is ``circuit`` (another process's) one of this endpoint?"""
        return (self.provider, self.base_url, self.key_hash) == (
            circuit.provider,
            circuit.base_url,
            circuit.key_hash,
        )


@dataclass(frozen=True)
class CircuitState:
    """An open circuit as status, REST and the UI show it."""

    endpoint: Endpoint
    kind: FailureKind
    since: float  # wall clock (epoch seconds)
    retry_in_s: float
    failures: int
    detail: str

    @classmethod
    def of_record(cls, endpoint: Endpoint, record: OpenCircuit, now: float) -> CircuitState:
        """Another process's open circuit of ``endpoint`` (``now``: the wall clock)."""
        return cls(
            endpoint,
            FailureKind(record.kind),
            record.since,
            max(0.0, record.retry_at - now),
            record.failures,
            record.detail,
        )

    @property
    def config(self) -> bool:
        """Waiting does not cure it: the settings (or a rebuild) do."""
        return self.kind in (FailureKind.CONFIG, FailureKind.DIMENSION)

    def since_iso(self) -> str:
        return datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")

    def describe(self) -> str:
        """``paused: provider unreachable since …`` and what to do."""
        if self.kind is FailureKind.DIMENSION:  # the detail says what to do
            return (
                f"paused: the provider answers vectors of another dimension since "
                f"{self.since_iso()} ({self.endpoint.describe()}: {self.detail}); or point "
                "ai.embedding.baseUrl and ai.embedding.model back at the pinned model"
            )
        if self.kind is FailureKind.CONFIG:
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
            "state": _JSON_STATES[self.kind],
            "provider": self.endpoint.provider,
            "baseUrl": self.endpoint.base_url or None,
            "since": self.since_iso(),
            "retryInSeconds": round(self.retry_in_s, 1),
            "failures": self.failures,
            "error": self.detail,
            "message": self.describe(),
        }


_JSON_STATES = {
    FailureKind.OUTAGE: "unreachable",
    FailureKind.CONFIG: "configError",
    FailureKind.DIMENSION: "wrongDimension",
}
#: The metric's ``state`` label of each kind of open circuit.
METRIC_STATES = {
    FailureKind.OUTAGE: "open",
    FailureKind.CONFIG: "config_error",
    FailureKind.DIMENSION: "wrong_dimension",
}


@dataclass
class _Open:
    kind: FailureKind
    since: float
    retry_at: float
    failures: int
    detail: str
    probing: bool = False


#: (endpoint, model, dimension): model None, the whole endpoint (an outage); dimension None,
#: the model whatever the dimension (its settings refused).
_Key = tuple[Endpoint, str | None, int | None]


class ProviderCircuits:
    """The open circuits of this process, by endpoint (outages), endpoint+model (the
    settings refused) and endpoint+model+dimension (the wrong dimension). Thread-safe."""

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
        forget_after_s: float = 3600.0,
    ) -> None:
        #: What the endpoints are, what their outage stops and which settings to fix, in the
        #: log lines (the extraction service keeps circuits of vision models, the rerank
        #: stage of rerankers).
        self.label, self.pauses, self.fix = label, pauses, fix
        self.retry_s, self.retry_max_s = retry_s, retry_max_s
        self.config_retry_s, self.config_retry_max_s = config_retry_s, config_retry_max_s
        #: Monotonic seconds (retry times) and wall seconds ("since"), replaceable in tests.
        self.clock, self.wall = clock, wall
        #: A circuit nobody tried this long after it was due is forgotten: nothing calls
        #: that endpoint (or model, or dimension) any more; a rebuild moved the RAG to
        #: another dimension, the settings to another key. Metrics, heartbeats and trial
        #: times stop counting it.
        self.forget_after_s = forget_after_s
        self._open: dict[_Key, _Open] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(endpoint: Endpoint, model: str, dimension: int | None) -> list[_Key]:
        keys: list[_Key] = [(endpoint, None, None), (endpoint, model, None)]
        if dimension is not None:
            keys.append((endpoint, model, dimension))
        return keys

    def state(
        self, endpoint: Endpoint, model: str, dimension: int | None = None
    ) -> CircuitState | None:
        """The open circuit in the way of calls to ``model`` at ``endpoint`` (for vectors of
        ``dimension``, when given), or None."""
        with self._lock:
            now = self.clock()
            for key in self._keys(endpoint, model, dimension):
                c = self._open.get(key)
                if c is not None:
                    return self._public(endpoint, c, now)
        return None

    def wait_s(self, endpoint: Endpoint, model: str, dimension: int | None = None) -> float:
        """Seconds until a call may be tried (0: closed, or due for its trial)."""
        state = self.state(endpoint, model, dimension)
        return 0.0 if state is None else state.retry_in_s

    def next_trial_s(self) -> float | None:
        """Seconds until the earliest open circuit is due to be tried; None: all closed."""
        with self._lock:
            now = self.clock()
            self._forget_unused(now)
            waits = [max(0.0, c.retry_at - now) for c in self._open.values() if not c.probing]
        return min(waits) if waits else None

    def open_counts(self) -> dict[tuple[str, str], int]:
        """(provider, ``open``/``config_error``/``wrong_dimension``) → open circuits: the
        metric's samples."""
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            self._forget_unused(self.clock())
            for (endpoint, _, _), c in self._open.items():
                state = (endpoint.provider, METRIC_STATES[c.kind])
                counts[state] = counts.get(state, 0) + 1
        return counts

    def open_circuits(self) -> list[OpenCircuit]:
        """The open circuits as a heartbeat carries them to other processes (retry times on
        the wall clock), in a stable order."""
        with self._lock:
            now, wall = self.clock(), self.wall()
            self._forget_unused(now)
            found = [
                OpenCircuit(
                    provider=endpoint.provider,
                    base_url=endpoint.base_url,
                    key_hash=endpoint.key_hash,
                    model=model,
                    dimension=dimension,
                    kind=c.kind.value,
                    since=c.since,
                    retry_at=wall + max(0.0, c.retry_at - now),
                    failures=c.failures,
                    detail=c.detail,
                )
                for (endpoint, model, dimension), c in self._open.items()
            ]
        return sorted(found, key=lambda o: (o.provider, o.base_url, o.model or "", o.since))

    def _forget_unused(self, now: float) -> None:
        """Drop the circuits untried for :attr:`forget_after_s` after they were due (under
        the lock)."""
        for key in [
            k
            for k, c in self._open.items()
            if not c.probing and now - c.retry_at > self.forget_after_s
        ]:
            del self._open[key]

    def _public(self, endpoint: Endpoint, c: _Open, now: float) -> CircuitState:
        wait = max(0.0, c.retry_at - now)
        return CircuitState(endpoint, c.kind, c.since, wait, c.failures, c.detail)

    def _refusal(self, endpoint: Endpoint, c: _Open, now: float) -> ProviderUnavailableError:
        state = self._public(endpoint, c, now)
        wait = max(state.retry_in_s, 0.1) if c.probing else state.retry_in_s
        what = {
            FailureKind.OUTAGE: "is unavailable",
            FailureKind.CONFIG: "refuses the settings",
            FailureKind.DIMENSION: "answers vectors of another dimension",
        }[state.kind]
        error = (
            DimensionPausedError
            if state.kind is FailureKind.DIMENSION
            else ProviderUnavailableError
        )
        return error(
            f"{self.label} {endpoint.describe()} {what} since {state.since_iso()} "
            f"({c.detail}); no call is made until it is tried again in {wait:.0f}s",
            retry_in_s=wait,
            config=state.config,
        )

    def check(self, endpoint: Endpoint, model: str, dimension: int | None = None) -> bool:
        """Refuse at once while a circuit is open; True: this caller makes the trial call
        (then it must report through :meth:`succeeded` or :meth:`failed`).

        Raises:
            ProviderUnavailableError: A circuit is open and not due, or its trial runs.
        """
        trial = False
        with self._lock:
            now = self.clock()
            for key in self._keys(endpoint, model, dimension):
                c = self._open.get(key)
                if c is None:
                    continue
                if c.probing or now < c.retry_at:
                    raise self._refusal(endpoint, c, now)
                c.probing = trial = True
        return trial

    def succeeded(self, endpoint: Endpoint, model: str, dimension: int | None = None) -> None:
        """The provider answered (with vectors of ``dimension``, when given): its circuits
        close (and the log says it is back)."""
        keys = self._keys(endpoint, model, dimension)
        with self._lock:
            closed = [self._open.pop(k) for k in keys if k in self._open]
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

    def abandoned(self, endpoint: Endpoint, model: str, dimension: int | None = None) -> None:
        """The trial call never happened (interrupted): the next caller makes it."""
        with self._lock:
            for key in self._keys(endpoint, model, dimension):
                c = self._open.get(key)
                if c is not None:
                    c.probing = False

    def failed(
        self, endpoint: Endpoint, model: str, exc: BaseException, dimension: int | None = None
    ) -> Failure:
        """Sort the failure; open (or reopen, for longer) the circuit when it is the
        provider's, the settings' or the pinned dimension's. The input's failure closes it:
        the provider answered."""
        failure = classify(exc)
        if not failure.provider_side:
            self.succeeded(endpoint, model, dimension)
            return failure
        config = failure.lasting
        key = self._key(endpoint, model, dimension, failure.kind)
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
            for other in self._keys(endpoint, model, dimension):
                # a trial of another circuit that failed for this one's reason gave it no
                # verdict: it is tried again when due, not held as probing for good
                if other != key and other in self._open:
                    self._open[other].probing = False
        if c is None:
            self._log_opened(endpoint, failure, wait)
        else:
            log.debug("%s %s still down (%s)", self.label, endpoint.describe(), failure.detail)
        return failure

    @staticmethod
    def _key(endpoint: Endpoint, model: str, dimension: int | None, kind: FailureKind) -> _Key:
        """The circuit a failure opens: the endpoint's (an outage), the model's (settings
        refused) or the model's at that dimension (a rebuild onto another is not held up)."""
        if kind is FailureKind.OUTAGE:
            return (endpoint, None, None)
        return (endpoint, model, dimension if kind is FailureKind.DIMENSION else None)

    def _log_opened(self, endpoint: Endpoint, failure: Failure, wait: float) -> None:
        if failure.kind is FailureKind.DIMENSION:  # its detail says what to do
            log.warning(
                "%s %s answers vectors of another dimension (%s); %s",
                self.label,
                endpoint.describe(),
                failure.detail,
                self.pauses,
            )
            return
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
    def guard(self, endpoint: Endpoint, model: str, dimension: int | None = None) -> Iterator[None]:
        """Around one call to the provider: refused at once while open; the outcome is
        recorded; a failure that is the provider's comes out as
        :class:`ProviderUnavailableError` (the cause chained). ``dimension``: the caller
        checks the vectors inside the block, and a :class:`DimensionMismatchError` there
        pauses calls for that dimension only."""
        self.check(endpoint, model, dimension)
        try:
            yield
        except Exception as exc:
            failure = self.failed(endpoint, model, exc, dimension)
            if not failure.provider_side:
                raise
            key = self._key(endpoint, model, dimension, failure.kind)
            with self._lock:
                c = self._open.get(key)
                refusal = None if c is None else self._refusal(endpoint, c, self.clock())
            if refusal is None:  # closed meanwhile by another thread's success
                raise
            raise refusal from exc
        except BaseException:
            self.abandoned(endpoint, model, dimension)
            raise
        self.succeeded(endpoint, model, dimension)
