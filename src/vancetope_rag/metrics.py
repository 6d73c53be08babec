"""Prometheus metrics. Each app owns a registry, so several apps (tests) never collide.

No metric carries a tenant, project, document or model label: tenant and project ids may name
customers, and their number is unbounded. Per-project numbers are in the REST status. The
labels are bounded sets: outcomes, states, retrieval modes, provider names (registered by
plugins), HTTP methods, route templates (never raw paths) and status codes.
"""

from __future__ import annotations

import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vancetope_rag.health import liveness
from vancetope_rag.secrets import get_logger
from vancetope_rag.store.inprocess.scan_kernels import QUERY_COUNTS, KernelChoice

log = get_logger(__name__)

OUTCOMES = ("success", "failed", "skipped", "tenant_disabled", "paused")
REBUILD_OUTCOMES = ("completed", "failed", "cancelled")
#: ``written``: chunks (re)written, from the model or the embedding cache; ``unchanged``: the
#: chunks were built from exactly this content, only confirmed (a no-op reindex).
DOCUMENT_RESULTS = ("written", "unchanged", "removed", "failed")
DOCUMENT_STATES = ("pending", "processing", "indexed", "failed", "none")
ITEM_STATES = ("pending", "processing", "done", "failed", "skipped")
RETRIEVAL_MODES = ("dense", "hybrid")
#: Route label of a request no route took (a 404, a body refused before routing: a 413): raw
#: paths are unbounded.
UNMATCHED_ROUTE = "<unmatched>"
#: Methods that keep their name as a label; any other a client makes up is ``other``.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class WorkState:
    """What the store holds of the indexer's work, summed over the projects it serves."""

    documents: Mapping[str, int] = field(default_factory=dict)
    rebuilds_running: int = 0
    rebuild_items: Mapping[str, int] = field(default_factory=dict)
    #: MongoDB Atlas: swap notes waiting for the sweep, by state (``due``: older than the
    #: search grace; ``waiting``: not yet); None for a store without a sweep.
    sweep_backlog: Mapping[str, int] | None = None
    #: MongoDB Atlas: age of the oldest swap note (0 when none): how far search visibility
    #: and the sweep's probe trail the writes. None for a store without a sweep.
    probe_lag_s: float | None = None


#: States of the sweep backlog (``vance_rag_mongo_sweep_backlog``).
SWEEP_STATES = ("due", "waiting")


class _WorkStateCollector(Collector):
    """Gauges read from the store at scrape time, reused for ``ttl_s`` (scrapes stay cheap).
    A store that cannot answer leaves the last numbers (or none) and a warning."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.source: Callable[[], WorkState] | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, WorkState] | None = None

    def _state(self) -> WorkState | None:
        if self.source is None:
            return None
        with self._lock:
            now = self._clock()
            if self._cached is not None and now - self._cached[0] < self.ttl_s:
                return self._cached[1]
            try:
                state = self.source()
            except Exception as exc:
                log.warning("metrics: cannot read the work state from the store: %s", exc)
                return self._cached[1] if self._cached else None
            self._cached = (now, state)
            return state

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "vance_rag_documents",
                "Documents of the projects this node indexes, by index state (the queue: "
                "pending and processing).",
                labels=["state"],
            ),
            GaugeMetricFamily(
                "vance_rag_rebuilds_running",
                "Rebuilds onto a new embedding model running in those projects.",
            ),
            GaugeMetricFamily(
                "vance_rag_rebuild_items",
                "Documents of the running rebuilds, by state (their progress).",
                labels=["state"],
            ),
            GaugeMetricFamily(
                "vance_rag_mongo_sweep_backlog",
                "MongoDB Atlas: replaced chunk versions waiting for the sweep (swap notes), "
                "by state: due (older than the search grace, waiting for a probe to see "
                "their replacement) or waiting (not yet due). A due count that keeps growing: "
                "search does not show new writes.",
                labels=["state"],
            ),
            GaugeMetricFamily(
                "vance_rag_mongo_probe_lag_seconds",
                "MongoDB Atlas: age of the oldest chunk version waiting for the sweep (0: "
                "none): how far search visibility trails the writes.",
            ),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        documents, running, items, backlog, lag = self._families()
        state = self._state()
        if state is not None:
            for name in DOCUMENT_STATES:
                documents.add_metric([name], state.documents.get(name, 0))
            running.add_metric([], state.rebuilds_running)
            for name in ITEM_STATES:
                items.add_metric([name], state.rebuild_items.get(name, 0))
            if state.sweep_backlog is not None:
                for name in SWEEP_STATES:
                    backlog.add_metric([name], state.sweep_backlog.get(name, 0))
            if state.probe_lag_s is not None:
                lag.add_metric([], state.probe_lag_s)
        return (documents, running, items, backlog, lag)


# -- embedding provider circuits ------------------------------------------------------------

#: States of an open circuit: ``open`` (the provider is unreachable or overloaded),
#: ``config_error`` (it refuses the settings: 401/403/404), ``wrong_dimension`` (it answers
#: vectors of another dimension than the RAG pinned).
CIRCUIT_STATES = ("open", "config_error", "wrong_dimension")


class _CircuitCollector(Collector):
    """``vance_rag_embedding_circuits{provider,state}``: open circuits of this process, read
    at scrape time (an endpoint is provider, URL and key: never a label)."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[tuple[str, str], int]] | None = None

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "vance_rag_embedding_circuits",
            "Embedding endpoints whose circuit is open in this process, by provider and "
            "state (open: unreachable or overloaded; config_error: the settings are refused; "
            "wrong_dimension: vectors of another dimension than the RAG pinned). "
            "0 everywhere: every provider answers.",
            labels=["provider", "state"],
        )

    def describe(self) -> Iterable[Metric]:
        return (self._family(),)

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        counts = dict(self.source()) if self.source is not None else {}
        for provider in sorted({p for p, _ in counts}):
            for state in CIRCUIT_STATES:
                family.add_metric([provider, state], counts.get((provider, state), 0))
        return (family,)


# -- what serves: the embedding backend, the vector pass's kernel ----------------------------


class _RuntimeCollector(Collector):
    """What this process computes with, and the timings that chose it, read at scrape time:
    ``vance_rag_embedding_runtime_info{provider,runtime}`` (the line ``status`` prints) and
    ``vance_rag_vector_pass_ms{dim,queries,kernel,serving}`` (each kernel's timed pass)."""

    def __init__(self) -> None:
        self.embeddings: Callable[[], Mapping[str, str]] | None = None
        self.kernels: Callable[[], Sequence[KernelChoice]] | None = None

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "vance_rag_embedding_runtime_info",
                "How each loaded embedding provider computes in this process and why (1).",
                labels=["provider", "runtime"],
            ),
            GaugeMetricFamily(
                "vance_rag_vector_pass_ms",
                "Milliseconds of one first pass of the SQLite vector cache by kernel, as "
                "timed on this machine for passes of 1, 2 and 8 queries; serving=true marks "
                "the kernel that serves such passes.",
                labels=["dim", "queries", "kernel", "serving"],
            ),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        runtime, passes = self._families()
        for provider, line in sorted((self.embeddings() if self.embeddings else {}).items()):
            runtime.add_metric([provider, line], 1)
        for choice in self.kernels() if self.kernels else ():
            for at, count in enumerate(QUERY_COUNTS):
                serving = choice.first(count)
                for kernel, timings in sorted(choice.timings.items()):
                    ms = timings[at] if at < len(timings) else None
                    if ms is not None:
                        flag = "true" if kernel == serving else "false"
                        passes.add_metric([str(choice.dim), str(count), kernel, flag], ms)
        return (runtime, passes)


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, state_ttl_s: float = 10.0
    ) -> None:
        self.registry = registry or CollectorRegistry()
        # The process's CPU, memory, open files and start time (``process_*``; Linux only,
        # empty elsewhere) and the Python version (``python_info``), as every exporter has.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.indexer_runs = Counter(
            "vance_rag_indexer_runs",
            "Project RAG indexer outcomes (per document: success/failed; per project: "
            "skipped/tenant_disabled/paused, paused: its embedding provider is down).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.indexer_runs.labels(outcome=outcome)
        self.rebuilds = Counter(
            "vance_rag_rebuilds",
            "Rebuilds onto a new embedding model ended by this process, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in REBUILD_OUTCOMES:
            self.rebuilds.labels(outcome=outcome)
        self.pre_turn_seconds = Histogram(
            "vance_rag_autoinject_seconds",
            "Latency of the AutoInject pre-turn step.",
            registry=self.registry,
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.indexed_documents = Counter(
            "vance_rag_indexed_documents",
            "Documents the live indexer finished, by result: written (chunks rewritten, "
            "from the model or the embedding cache), unchanged (chunks confirmed: a no-op "
            "reindex), removed (no longer eligible), failed.",
            ["result"],
            registry=self.registry,
        )
        for result in DOCUMENT_RESULTS:
            self.indexed_documents.labels(result=result)
        self.indexed_chunks = Counter(
            "vance_rag_indexed_chunks",
            "Chunks written by the live indexer.",
            registry=self.registry,
        )
        self.embedding_cache = Counter(
            "vance_rag_embedding_cache",
            "Chunk texts to embed, by result: hit (from the embedding cache, or a duplicate "
            "in the batch) or miss (sent to the model).",
            ["result"],
            registry=self.registry,
        )
        for result in ("hit", "miss"):
            self.embedding_cache.labels(result=result)
        self.embedding_requests = Counter(
            "vance_rag_embedding_requests",
            "Calls to an embedding model, by provider, kind (text: chunks; query) and "
            "outcome (ok/error).",
            ["provider", "kind", "outcome"],
            registry=self.registry,
        )
        self.embedding_seconds = Histogram(
            "vance_rag_embedding_request_seconds",
            "Latency of the calls to an embedding model, by provider (errors included).",
            ["provider", "kind"],
            registry=self.registry,
            buckets=_LATENCY,
        )
        self.retrieval_seconds = Histogram(
            "vance_rag_retrieval_seconds",
            "Latency of a retrieval (query embedding, search, citation check), by mode.",
            ["mode"],
            registry=self.registry,
            buckets=_LATENCY,
        )
        for mode in RETRIEVAL_MODES:
            self.retrieval_seconds.labels(mode=mode)
        self.rerank_requests = Counter(
            "vance_rag_rerank_requests",
            "Rerank stages of queries, by reranker provider and outcome: ok (the reranker "
            "ordered the candidates), skipped (its circuit is open) or error (it failed); "
            "skipped and error queries keep the retrieval's order.",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self.rerank_seconds = Histogram(
            "vance_rag_rerank_seconds",
            "Latency of the calls to a reranker, by provider (errors included).",
            ["provider"],
            registry=self.registry,
            buckets=_LATENCY,
        )
        self.http_requests = Counter(
            "vance_rag_http_requests",
            "REST and UI requests, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_seconds = Histogram(
            "vance_rag_http_request_seconds",
            "Latency of REST and UI requests, by method and route template.",
            ["method", "route"],
            registry=self.registry,
            buckets=_LATENCY,
        )
        self._work = _WorkStateCollector(state_ttl_s)
        self.registry.register(self._work)
        self._circuits = _CircuitCollector()
        self.registry.register(self._circuits)
        self._runtime = _RuntimeCollector()
        self.registry.register(self._runtime)

    def watch_work(self, source: Callable[[], WorkState]) -> None:
        """Read the queue depth and rebuild progress from ``source`` at scrape time."""
        self._work.source = source

    def watch_circuits(self, source: Callable[[], Mapping[tuple[str, str], int]]) -> None:
        """Read the open circuits ((provider, state) → count) from ``source`` at scrape time."""
        self._circuits.source = source

    def watch_runtime(
        self,
        embeddings: Callable[[], Mapping[str, str]],
        kernels: Callable[[], Sequence[KernelChoice]],
    ) -> None:
        """Read what serves embeddings and the vector pass from these at scrape time."""
        self._runtime.embeddings, self._runtime.kernels = embeddings, kernels

    def embedding_call(self, provider: str, kind: str, seconds: float, ok: bool) -> None:
        """Count one call to an embedding model."""
        outcome = "ok" if ok else "error"
        self.embedding_requests.labels(provider=provider, kind=kind, outcome=outcome).inc()
        self.embedding_seconds.labels(provider=provider, kind=kind).observe(seconds)

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one REST or UI request (``route`` is its template, never the raw path)."""
        method = method if method in HTTP_METHODS else OTHER_METHOD
        self.http_requests.labels(method=method, route=route, status=str(status)).inc()
        self.http_seconds.labels(method=method, route=route).observe(seconds)

    def runs(self, outcome: str) -> float:
        """Current value of ``vance_rag_indexer_runs_total{outcome}``."""
        value = self.registry.get_sample_value("vance_rag_indexer_runs_total", {"outcome": outcome})
        return float(value or 0.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def serve_metrics(
    metrics: Metrics,
    host: str,
    port: int,
    *,
    token: str | None = None,
    ready: Callable[[], tuple[int, dict[str, Any]]] | None = None,
) -> ThreadingHTTPServer:
    """Serve ``GET /metrics`` on ``host:port`` (IPv4 or IPv6) in a daemon thread (the
    worker's endpoint); with ``token``, only for ``Authorization: Bearer <token>``, as the
    REST API's. With ``ready`` (:meth:`vancetope_rag.health.Readiness.answer`), also the
    probes ``GET /healthz`` and ``GET /readyz``, unauthenticated, as ``serve`` has them.
    ``shutdown()`` the returned server to stop it.

    Raises:
        OSError: ``host`` names no address, or ``host:port`` cannot be bound (in use).
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if ready is not None and path in ("/healthz", "/readyz"):
                code, body = liveness() if path == "/healthz" else ready()
                self._answer(code, json.dumps(body).encode(), "application/json")
                return
            if path != "/metrics":
                self._answer(404, b"not found; the metrics are at /metrics\n", "text/plain")
                return
            if token and not hmac.compare_digest(
                (self.headers.get("Authorization") or "").encode(), f"Bearer {token}".encode()
            ):
                self._answer(401, b"/metrics needs 'Authorization: Bearer <token>'\n")
                return
            self._answer(200, metrics.exposition(), CONTENT_TYPE_LATEST)

        def _answer(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("metrics endpoint: " + format, *args)

    class Server(ThreadingHTTPServer):
        # The family of the address ``host`` names: ``::1`` or ``::`` need an IPv6 socket
        # (``""``, as HTTPServer reads it, means every interface).
        address_family = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0][0]
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="vancetope-rag-metrics", daemon=True).start()
    return server
