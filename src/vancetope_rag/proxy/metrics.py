"""The proxy's own Prometheus families, on the app's registry next to the engine's.

Requests by method, route template and status are the engine's ``vance_rag_http_requests``
(:meth:`~vancetope_rag.metrics.Metrics.http_request`, as ``serve`` counts them); these add
what only the proxy does. No label carries a key name, tenant or project (unbounded, and they
may name customers).
"""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Histogram

from vancetope_rag.metrics import Metrics

#: What became of a chat turn's block: ``skipped`` (AutoInject off, or the caller opted out),
#: ``failed`` (retrieval or a plugin failed; the turn went on without a block).
INJECTION_OUTCOMES = ("injected", "none", "skipped", "failed")
_OUTCOME_OF_STATE = {"off": "skipped", "opted-out": "skipped"}
RELOAD_OUTCOMES = ("ok", "failed")
_UPSTREAM_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ProxyMetrics:
    """Upstream latency, injection outcomes, rate-limit refusals and key-file reloads."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.upstream_seconds = Histogram(
            "vance_rag_proxy_upstream_seconds",
            "Seconds the upstream took to start its answer (or to fail), by route template.",
            ["route"],
            registry=registry,
            buckets=_UPSTREAM_LATENCY,
        )
        self.injections = Counter(
            "vance_rag_proxy_injections",
            "Chat turns by what the proxy injected: injected (a block), none (on, nothing "
            "scored high enough), skipped (off, or the caller opted out), failed.",
            ["outcome"],
            registry=registry,
        )
        for outcome in INJECTION_OUTCOMES:
            self.injections.labels(outcome=outcome)
        self.rate_limited = Counter(
            "vance_rag_proxy_rate_limited",
            "Requests refused with 429: the caller's key (or token) was over its rate.",
            registry=registry,
        )
        self.key_file_reloads = Counter(
            "vance_rag_proxy_key_file_reloads",
            "Reloads of the proxy key file after it changed, by outcome (failed: no proxy key "
            "is accepted until it loads again).",
            ["outcome"],
            registry=registry,
        )
        for outcome in RELOAD_OUTCOMES:
            self.key_file_reloads.labels(outcome=outcome)

    def injection(self, state: str) -> None:
        """Count a chat turn by its ``X-Vancetope-Rag`` state."""
        self.injections.labels(outcome=_OUTCOME_OF_STATE.get(state, state)).inc()

    def reloaded(self, ok: bool) -> None:
        self.key_file_reloads.labels(outcome="ok" if ok else "failed").inc()


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, ProxyMetrics] = (
    weakref.WeakKeyDictionary()
)


def proxy_metrics(metrics: Metrics) -> ProxyMetrics:
    """The proxy families on the app's registry, registered once however many proxies an
    app serves (tests start several)."""
    found = _BY_REGISTRY.get(metrics.registry)
    if found is None:
        found = _BY_REGISTRY[metrics.registry] = ProxyMetrics(metrics.registry)
    return found
