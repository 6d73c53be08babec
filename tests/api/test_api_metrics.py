"""/metrics says what an operator of the service watches, in families Prometheus parses.

Before, it had three families (indexer outcomes, rebuild outcomes, AutoInject latency): no
queue depth, no embedding calls or cache hits, no retrieval or HTTP latency, and a no-op
reindex looked exactly like re-embedding everything.
"""

from __future__ import annotations

from api_support import POISON, ApiAppFactory, bearer
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


def test_http_labels_stay_bounded_for_made_up_methods_and_count_refused_bodies(
    make_api_app: ApiAppFactory,
) -> None:
    """Before, the method label took whatever a client sent (``FOOBAR``, ``X1``, …: one new
    series each, without a token), and a body refused for its size was in no family."""
    app = make_api_app(max_text_chars=1000)
    reindex = f"/brain/{T}/projects/{P}/rag/reindex"
    with TestClient(create_api(app)) as client:
        for i in range(3):
            assert client.request(f"MADEUP{i}", "/metrics").status_code == 405
        client.request("MADEUP", "/no/such/route")
        too_big = b"{" + b" " * (4 * 1000 + 64 * 1024 + 1) + b"}"
        refused = client.post(reindex, content=too_big, headers=bearer())
        assert refused.status_code == 413
        _, samples = scrape(client)

    methods = {dict(pairs).get("method") for (name, pairs) in samples if "http_request" in name}
    assert methods - {None} == {"POST", "other"}, methods  # the scrape counts after it
    assert (
        value(
            samples, "vance_rag_http_requests_total", method="other", route="/metrics", status="405"
        )
        == 3
    )
    assert (
        value(
            samples,
            "vance_rag_http_requests_total",
            method="other",
            route="<unmatched>",
            status="404",
        )
        == 1
    )
    # refused before any route took it, so by status alone
    assert (
        value(
            samples,
            "vance_rag_http_requests_total",
            method="POST",
            route="<unmatched>",
            status="413",
        )
        == 1
    )


def test_embedding_errors_are_counted_by_provider(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(provider="poison", metrics_state_ttl_s=0)
    app.document_saved(T, P, "documents/good.md", "an ordinary note")
    app.document_saved(T, P, "documents/bad.md", f"a note holding {POISON}")
    app.scheduler.run_until_idle()
    with TestClient(create_api(app)) as client:
        _, samples = scrape(client)

    calls = {
        outcome: value(
            samples,
            "vance_rag_embedding_requests_total",
            provider="poison",
            kind="text",
            outcome=outcome,
        )
        for outcome in ("ok", "error")
    }
    assert calls["ok"] >= 1 and calls["error"] >= 1, calls
    timed = value(
        samples, "vance_rag_embedding_request_seconds_count", provider="poison", kind="text"
    )
    assert timed == calls["ok"] + calls["error"]
    assert value(samples, "vance_rag_indexed_documents_total", result="failed") == 1
    assert value(samples, "vance_rag_indexed_documents_total", result="written") == 1
    assert value(samples, "vance_rag_documents", state="failed") == 1


def test_a_copied_file_is_written_from_the_cache_without_a_model_call(
    make_api_app: ApiAppFactory,
) -> None:
    """What operations.md promises: copied or renamed text shows as written documents with
    cache hits, and neither a miss nor a call to the model."""
    app = make_api_app()
    text = "a note about apples and pears, long enough to be worth a chunk"
    app.document_saved(T, P, "documents/a.md", text)
    app.scheduler.run_until_idle()
    with TestClient(create_api(app)) as client:
        _, before = scrape(client)
        app.document_saved(T, P, "documents/copy-of-a.md", text)
        app.scheduler.run_until_idle()
        _, after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("vance_rag_indexed_documents_total", result="written") == 1
    assert moved("vance_rag_embedding_cache_total", result="hit") >= 1
    assert moved("vance_rag_embedding_cache_total", result="miss") == 0
    text_calls = {"provider": "hashing", "kind": "text", "outcome": "ok"}
    assert moved("vance_rag_embedding_requests_total", **text_calls) == 0


def test_rebuild_progress_moves_with_the_rebuild(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(metrics_state_ttl_s=0, indexer_batch_size=1)
    for i in range(3):
        app.document_saved(T, P, f"documents/n{i}.md", f"note {i} about plums {i}")
    app.scheduler.run_until_idle()
    app.settings.set(T, None, "ai.embedding.model", "hashing-128")
    with TestClient(create_api(app)) as client:
        _, idle = scrape(client)
        started = client.post(f"/brain/{T}/projects/{P}/rag/reindex?rebuild=true", headers=bearer())
        assert started.status_code == 200, started.text
        app.scheduler.tick()
        _, running = scrape(client)
        app.scheduler.run_until_idle()
        _, done = scrape(client)

    assert value(idle, "vance_rag_rebuilds_running") == 0
    assert value(running, "vance_rag_rebuilds_running") == 1
    items = {s: value(running, "vance_rag_rebuild_items", state=s) for s in ("pending", "done")}
    assert items == {"pending": 2, "done": 1}, items
    assert value(done, "vance_rag_rebuilds_running") == 0
    assert value(done, "vance_rag_rebuilds_total", outcome="completed") == 1
    # the rebuild embeds with the new model: its texts are cache misses, sent to the model
    assert value(done, "vance_rag_embedding_cache_total", result="miss") > value(
        idle, "vance_rag_embedding_cache_total", result="miss"
    )


def test_the_openapi_document_and_static_files_carry_their_route(
    make_api_app: ApiAppFactory,
) -> None:
    """Before, both were counted as ``<unmatched>`` (as if no route had them) with status 200."""
    app = make_api_app()
    with TestClient(create_api(app)) as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/static/rag.css").status_code == 200
        assert client.get("/static/no-such.css").status_code == 404
        assert client.get("/no/such/route").status_code == 404
        _, samples = scrape(client)

    def count(route: str, status: str) -> float:
        labels = {"method": "GET", "route": route, "status": status}
        return value(samples, "vance_rag_http_requests_total", **labels)

    assert count("/openapi.json", "200") == 1
    assert count("/static", "200") == 1
    assert count("/static", "404") == 1
    assert count("<unmatched>", "404") == 1
    assert count("<unmatched>", "200") == 0
