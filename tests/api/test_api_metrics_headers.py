"""/metrics behind an optional bearer token, and nosniff on every answer."""

from __future__ import annotations

from api_support import ApiAppFactory, bearer
from fastapi.testclient import TestClient

from fakes import P, T
from vancetope_rag.api import create_api

TOKEN = "metrics-token-5f1c2e9a7b"


def test_metrics_need_the_token_when_one_is_set(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(metrics_token=TOKEN)
    with TestClient(create_api(app)) as client:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
            bearer(),
        ):
            response = client.get("/metrics", headers=headers)
            assert response.status_code == 401, headers
            assert response.json()["code"] == "UNAUTHENTICATED"
            assert "VANCETOPE_RAG_METRICS_TOKEN" in response.json()["error"]
            assert TOKEN not in response.text
            assert response.headers["www-authenticate"].startswith("Bearer")
        ok = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and "vance_rag_indexer_runs_total" in ok.text


def test_metrics_stay_open_without_a_token(make_api_app: ApiAppFactory) -> None:
    with TestClient(create_api(make_api_app())) as client:
        assert client.get("/metrics").status_code == 200


def test_every_answer_carries_nosniff(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(metrics_token=TOKEN)
    with TestClient(create_api(app)) as client:
        answers = [
            client.get(f"/brain/{T}/projects/{P}/rag/status", headers=bearer()),  # JSON
            client.get(f"/brain/{T}/projects/{P}/rag/status"),  # 401 JSON
            client.get("/static/rag.js"),  # static
            client.get("/static/rag.css"),
            client.get("/no/such/route"),  # 404 JSON
            client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}),
            client.get(f"/ui/{T}/{P}"),  # the page
        ]
    for response in answers:
        assert response.headers.get("x-content-type-options") == "nosniff", response.url
