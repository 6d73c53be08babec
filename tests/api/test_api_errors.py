"""Error bodies: mapped statuses, ``{"error", "code"}``, no traceback, no secret, ever."""

from __future__ import annotations

import logging

import pytest
from api_support import API_KEY, SECRET, ApiAppFactory, bearer, make_token
from fastapi.testclient import TestClient

from fakes import T
from vancetope_rag.api import create_api
from vancetope_rag.api.errors import redact, status_for
from vancetope_rag.errors import (
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbeddingConfigError,
    EmbeddingDisabledError,
    EmbeddingError,
    InvalidInputError,
    MissingDependencyError,
    ProjectNotFoundError,
    RagError,
    SettingError,
    StoreError,
)

BASE = "/brain/t1/projects/p1"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ProjectNotFoundError("x"), 404),
        (DocumentNotFoundError("x"), 404),
        (InvalidInputError("x"), 400),
        (SettingError("x"), 400),
        (EmbeddingDisabledError("x"), 409),
        (EmbeddingConfigError("x"), 409),
        (DimensionMismatchError("x"), 409),
        (MissingDependencyError("x", "openai"), 409),
        (EmbeddingError("x"), 502),
        (StoreError("x"), 503),
        (RagError("x"), 500),
    ],
)
def test_status_mapping(error: RagError, status: int) -> None:
    assert status_for(error) == status


def test_redact_replaces_every_occurrence_and_skips_trivial_values() -> None:
    assert redact("a KEYS b KEYS", ["KEYS", None, ""]) == "a ******** b ********"
    assert redact("abc", ["ab"]) == "abc"  # too short to be a secret; would mangle text


def _leaky_app(make_api_app: ApiAppFactory, provider: str) -> TestClient:
    app = make_api_app()
    app.settings.set(T, None, "ai.embedding.provider", provider)
    app.settings.set(T, None, "ai.embedding.apiKey", API_KEY)
    return TestClient(create_api(app))


def test_config_error_is_409_and_hides_the_api_key(make_api_app: ApiAppFactory) -> None:
    with _leaky_app(make_api_app, "leaky-config") as c:
        response = c.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
    assert response.status_code == 409
    data = response.json()
    assert data["code"] == "EMBEDDING_CONFIG"
    assert "the server refused key ***" in data["error"]
    assert API_KEY not in response.text and SECRET not in response.text


def test_unexpected_error_is_500_without_traceback_or_key(
    make_api_app: ApiAppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with _leaky_app(make_api_app, "leaky-crash") as c:
        response = c.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
    assert response.status_code == 500
    assert response.json() == {
        "error": "internal error; the server log has the details",
        "code": "INTERNAL_ERROR",
    }
    # the log has the traceback for the operator, with the key scrubbed
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("vancetope_rag"))
    assert "RuntimeError" in ours and "Traceback" in ours and "refused key ***" in ours
    assert API_KEY not in caplog.text and SECRET not in caplog.text


def test_no_error_body_or_log_line_contains_a_secret(
    make_api_app: ApiAppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    app = make_api_app()
    app.settings.set(T, None, "ai.embedding.apiKey", API_KEY)
    doc = app.documents.create(T, "p1", "documents/a.md", "alpha").id
    auth = bearer()
    calls = [
        ("GET", f"{BASE}/rag/status", {}),
        ("GET", f"{BASE}/rag/status", {"headers": {"Authorization": f"Bearer {SECRET}"}}),
        ("GET", f"{BASE}/rag/status", {"headers": bearer(make_token(secret=SECRET[::-1]))}),
        ("GET", f"{BASE}/rag/status", {"headers": bearer(make_token(tenant="t2"))}),
        ("POST", f"{BASE}/rag/reindex?rebuild={SECRET}", {"headers": bearer()}),
        ("GET", f"{BASE}/rag/documents?state={API_KEY}", {"headers": bearer()}),
        ("PATCH", f"{BASE}/documents/{doc}", {"headers": auth, "json": {"ragEnabled": API_KEY}}),
        ("GET", f"/ui/{T}/p1?token={SECRET}", {}),
    ]
    with TestClient(create_api(app)) as c:
        for method, url, kwargs in calls:
            response = c.request(method, url, **kwargs)  # type: ignore[arg-type]
            assert SECRET not in response.text, url
            assert API_KEY not in response.text, url
            assert "Traceback" not in response.text
            if response.status_code >= 400:
                assert set(response.json()) == {"error", "code"}
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("vancetope_rag"))
    assert SECRET not in ours and API_KEY not in ours
    assert "?token" not in ours  # the access log leaves query strings out
    assert "GET /ui/{tenant}/{project} 200" in ours  # the route template, not the raw path
