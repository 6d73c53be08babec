"""The REST test query goes through the rerank stage: the reranker's order, each hit's
``rerankScore`` beside its cosine ``score``, and the reranker's key nowhere in the answer."""

from __future__ import annotations

from api_support import ApiAppFactory, bearer
from fastapi.testclient import TestClient

from fakes import DOCS, P, T
from rerank_server import KEY, RerankServer, score
from vancetope_rag.api import create_api

BASE = f"/brain/{T}/projects/{P}"
QUESTION = "what do zebras eat on the savanna"


def test_the_test_query_shows_the_rerankers_order_and_scores(
    make_api_app: ApiAppFactory,
) -> None:
    app = make_api_app()
    for path, text in DOCS.items():
        app.document_saved(T, P, path, text)
    assert app.scheduler.run_until_idle(timeout_s=30).failed == 0
    app.settings.set(T, P, "rag.minScore", -1.0)
    srv = RerankServer("tei", key=KEY)
    try:
        srv.prefer = "vacation"
        app.settings.set(T, None, "ai.rerank.provider", "tei")
        app.settings.set(T, None, "ai.rerank.baseUrl", srv.base_url)
        app.settings.set(T, None, "ai.rerank.apiKey", KEY)
        with TestClient(create_api(app)) as client:
            answer = client.post(f"{BASE}/rag/query", json={"query": QUESTION}, headers=bearer())
        assert answer.status_code == 200, answer.text
        hits = answer.json()["hits"]
        assert hits[0]["path"] == "documents/holiday.md"  # the reranker's pick, not the cosine's
        assert hits[0]["rerankScore"] == score(QUESTION, DOCS["documents/holiday.md"], "vacation")
        assert [h["rerankScore"] for h in hits] == sorted(
            (h["rerankScore"] for h in hits), reverse=True
        )
        assert all(-1.0 <= h["score"] <= 1.0 for h in hits)  # the cosine, as before
        assert srv.requests[0].authorization == f"Bearer {KEY}"
        assert KEY not in answer.text
    finally:
        srv.down()
