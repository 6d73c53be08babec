"""/openapi.json describes the whole API: response schemas for every route, the bearer scheme,
the declared errors with their body, and nothing a client could not rely on."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import SECRET, bearer
from fastapi.testclient import TestClient

from fakes import P, T
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp

PREFIX = f"/brain/{T}/projects/{P}"


@pytest.fixture
def spec(client: TestClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in spec["paths"].items() for m, op in ops.items()]


def test_every_route_has_a_response_schema(spec: dict[str, Any]) -> None:
    ops = _operations(spec)
    assert len(ops) == 9  # 7 + the two probes, /healthz and /readyz
    for method, path, op in ops:
        ok = op["responses"]["200"]["content"]
        (media,) = ok
        schema = ok[media]["schema"]
        assert schema, (method, path)
        if path != "/metrics":
            assert media == "application/json" and "$ref" in schema, (method, path)
    assert not any(name.startswith("HTTPValidationError") for name in spec["components"]["schemas"])


def test_bearer_scheme_on_every_project_route(spec: dict[str, Any]) -> None:
    scheme = spec["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    assert "tenant" in scheme["description"] and "WRITE" in scheme["description"]
    for _, path, op in _operations(spec):
        if path.startswith("/brain/"):
            assert op["security"] == [{"bearerAuth": []}]
            # the token is the scheme, not an ordinary header parameter
            assert "authorization" not in [p["name"].lower() for p in op["parameters"]]


def test_declared_errors_use_the_error_body(spec: dict[str, Any]) -> None:
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    assert spec["components"]["schemas"]["ErrorResponse"]["required"] == ["error", "code"]
    for method, path, op in _operations(spec):
        if not path.startswith("/brain/"):
            continue
        codes = set(op["responses"]) - {"200"}
        assert {"400", "401", "403", "422", "503"} <= codes, (method, path)
        for code in codes:
            assert op["responses"][code]["content"]["application/json"]["schema"] == error
            assert op["responses"][code]["description"]
    by_route = {(m, p): set(op["responses"]) for m, p, op in _operations(spec)}
    assert {"404", "409", "502"} <= by_route[
        ("POST", "/brain/{tenant}/projects/{project}/rag/reindex")
    ]
    patch = by_route[("PATCH", "/brain/{tenant}/projects/{project}/documents/{documentId}")]
    assert {"404", "413"} <= patch
    # the write routes declare their rate limit; the test query also the provider's failure
    query = by_route[("POST", "/brain/{tenant}/projects/{project}/rag/query")]
    assert {"429", "502"} <= query and "429" in patch
    assert "429" in by_route[("POST", "/brain/{tenant}/projects/{project}/rag/reindex")]
    assert "429" not in by_route[("GET", "/brain/{tenant}/projects/{project}/rag/status")]


def test_metrics_scheme_only_when_configured(make_api_app: Any) -> None:
    def spec_of(app: RagApp) -> dict[str, Any]:
        with TestClient(create_api(app)) as c:
            body: dict[str, Any] = c.get("/openapi.json").json()
            return body

    open_metrics = spec_of(make_api_app())["paths"]["/metrics"]["get"]
    assert "security" not in open_metrics and set(open_metrics["responses"]) == {"200"}
    guarded = spec_of(make_api_app(metrics_token="m" * 8 + "0123456789abcdef"))
    op = guarded["paths"]["/metrics"]["get"]
    assert op["security"] == [{"metricsToken": []}] and "401" in op["responses"]
    assert guarded["components"]["securitySchemes"]["metricsToken"]["scheme"] == "bearer"


def test_responses_validate_against_their_models(client: TestClient, api_app: RagApp) -> None:
    api_app.document_saved(T, P, "documents/a.md", "Alpha text.")
    status = client.get(f"{PREFIX}/rag/status", headers=bearer()).json()
    assert set(status) >= {"exists", "chunkCount", "documents", "progress"}
    listing = client.get(f"{PREFIX}/rag/documents", headers=bearer()).json()
    assert listing["total"] == 1 and listing["documents"][0]["state"] == "pending"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/rag/reindex?rebiuld=true"),
        ("GET", "/rag/status?verbose=1"),
        ("GET", "/rag/documents?state=failed&page=2"),
    ],
)
def test_unknown_query_parameters_are_refused(
    client: TestClient, api_app: RagApp, method: str, path: str
) -> None:
    response = client.request(method, PREFIX + path, headers=bearer())
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "INVALID_REQUEST" and "unknown parameter" in body["error"]
    assert "query parameter" in body["error"]
    assert api_app.documents.list_documents(T, P) == []  # a misspelt rebuild did nothing


def test_secret_never_in_the_schema(spec: dict[str, Any]) -> None:
    assert SECRET not in str(spec)
