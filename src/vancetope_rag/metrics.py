"""Prometheus metrics. Each app owns a registry, so several apps (tests) never collide."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

OUTCOMES = ("success", "failed", "skipped", "tenant_disabled")
REBUILD_OUTCOMES = ("completed", "failed", "cancelled")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.indexer_runs = Counter(
            "vance_rag_indexer_runs",
            "Project RAG indexer outcomes (per document: success/failed; per project: "
            "skipped/tenant_disabled).",
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

    def runs(self, outcome: str) -> float:
        """Current value of ``vance_rag_indexer_runs_total{outcome}``."""
        value = self.registry.get_sample_value("vance_rag_indexer_runs_total", {"outcome": outcome})
        return float(value or 0.0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
