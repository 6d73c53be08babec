"""/metrics says what an operator of the service watches, in families Prometheus parses.

Before, it had three families (indexer outcomes, rebuild outcomes, AutoInject latency): no
queue depth, no embedding calls or cache hits, no retrieval or HTTP latency, and a no-op
reindex looked exactly like re-embedding everything.
"""

from __future__ import annotations

from api_support import ApiAppFactory, bearer
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fakes import P, T
from vancetope_rag.api import create_api

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient) -> tuple[set[str], Samples]:
    response = client.get("/metrics")
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.text))
    samples: Samples = {}
    for family in families:
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return {f.name for f in families}, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_cover_queue_indexing_embeddings_retrieval_and_http(
    make_api_app: ApiAppFactory,
) -> None:
    app = make_api_app(metrics_state_ttl_s=0)
    for i in range(3):
        app.document_saved(T, P, f"documents/n{i}.md", f"note {i} about apples and pears {i}")
    with TestClient(create_api(app)) as client:
        names, samples = scrape(client)
        assert value(samples, "vance_rag_documents", state="pending") == 3
        assert value(samples, "vance_rag_documents", state="indexed") == 0

        app.scheduler.run_until_idle()
        _, samples = scrape(client)
        assert value(samples, "vance_rag_documents", state="pending") == 0
        assert value(samples, "vance_rag_documents", state="indexed") == 3
        assert value(samples, "vance_rag_indexed_documents_total", result="written") == 3
        assert value(samples, "vance_rag_indexed_chunks_total") >= 3
        texts = value(samples, "vance_rag_embedding_cache_total", result="miss")
        assert texts >= 3
        calls = value(
            samples,
            "vance_rag_embedding_requests_total",
            provider="hashing",
            kind="text",
            outcome="ok",
        )
        assert calls >= 1
        assert (
            value(
                samples,
                "vance_rag_embedding_request_seconds_count",
                provider="hashing",
                kind="text",
            )
            == calls
        )

        # A no-op reindex: the documents are confirmed unchanged, nothing is embedded.
        client.post(f"/brain/{T}/projects/{P}/rag/reindex", headers=bearer())
        app.scheduler.run_until_idle()
        _, after = scrape(client)
        assert value(after, "vance_rag_indexed_documents_total", result="unchanged") == 3
        assert value(after, "vance_rag_indexed_documents_total", result="written") == 3
        assert value(after, "vance_rag_embedding_cache_total", result="miss") == texts
        assert (
            value(
                after,
                "vance_rag_embedding_requests_total",
                provider="hashing",
                kind="text",
                outcome="ok",
            )
            == calls
        )

        app.as_retriever(T, P, mode="dense").retrieve("apples")
        app.as_retriever(T, P, mode="hybrid").retrieve("pears")
        client.get(f"/brain/{T}/projects/{P}/rag/status", headers=bearer())
        client.get(f"/brain/{T}/projects/{P}/rag/status")  # 401
        client.get("/no/such/route")
        names, samples = scrape(client)

    assert value(samples, "vance_rag_retrieval_seconds_count", mode="dense") == 1
    assert value(samples, "vance_rag_retrieval_seconds_count", mode="hybrid") == 1
    assert value(
        samples,
        "vance_rag_embedding_requests_total",
        provider="hashing",
        kind="query",
        outcome="ok",
    )
    route = "/brain/{tenant}/projects/{project}/rag/status"
    assert value(samples, "vance_rag_http_requests_total", method="GET", route=route, status="200")
    assert value(samples, "vance_rag_http_requests_total", method="GET", route=route, status="401")
    unmatched = value(
        samples, "vance_rag_http_requests_total", method="GET", route="<unmatched>", status="404"
    )
    assert unmatched == 1
    # Bounded cardinality: route templates, never raw paths, tenant or project ids.
    labels = {v for (_, pairs) in samples for _, v in pairs}
    assert not any(T in v.split("/") or P in v.split("/") for v in labels), labels
    assert {"vance_rag_rebuild_items", "vance_rag_rebuilds_running"} <= names
    assert {"vance_rag_indexer_runs", "vance_rag_autoinject_seconds"} <= names  # kept
