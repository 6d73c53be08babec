"""The JWT gate (spec §7: WRITE on the project for status read and reindex alike)."""

from __future__ import annotations

import time

import jwt
import pytest
from api_support import SECRET, bearer, make_token
from fastapi.testclient import TestClient

from fakes import T
from vancetope_rag.api import ApiConfigError, create_api
from vancetope_rag.app import RagApp

# (method, path template, JSON body); {doc} is filled with a real document id.
ENDPOINTS = [
    ("GET", "/brain/t1/projects/p1/rag/status", None),
    ("POST", "/brain/t1/projects/p1/rag/reindex?rebuild=false", None),
    ("GET", "/brain/t1/projects/p1/rag/documents?state=failed", None),
    ("PATCH", "/brain/t1/projects/p1/documents/{doc}", {"ragEnabled": "off"}),
]

NOW = time.time()

# name -> (headers, expected status, expected code)
CASES: dict[str, tuple[dict[str, str], int, str]] = {
    "no token": ({}, 401, "UNAUTHENTICATED"),
    "not bearer": ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "UNAUTHENTICATED"),
    "empty bearer": ({"Authorization": "Bearer "}, 401, "UNAUTHENTICATED"),
    "garbage": ({"Authorization": "Bearer not.a.jwt"}, 401, "INVALID_TOKEN"),
    "bad signature": (
        bearer(make_token(secret="another-secret-that-is-long-enough-0123456789")),
        401,
        "INVALID_TOKEN",
    ),
    "alg none": (
        bearer(
            jwt.encode(
                {"sub": "x", "tenant": T, "projects": "*", "perm": ["WRITE"], "exp": NOW + 600},
                key=None,
                algorithm="none",
            )
        ),
        401,
        "INVALID_TOKEN",
    ),
    "no exp": (
        bearer(jwt.encode({"sub": "x", "tenant": T, "projects": "*", "perm": ["WRITE"]}, SECRET)),
        401,
        "INVALID_TOKEN",
    ),
    "expired": (bearer(make_token(now=NOW - 7200, ttl_s=3600)), 401, "TOKEN_EXPIRED"),
    "projects not a list": (
        bearer(
            jwt.encode(
                {"sub": "x", "tenant": T, "projects": "p1", "perm": ["WRITE"], "exp": NOW + 600},
                SECRET,
            )
        ),
        401,
        "INVALID_TOKEN",
    ),
    "other tenant": (bearer(make_token(tenant="t2")), 403, "FORBIDDEN"),
    "other project": (bearer(make_token(projects=["p2"])), 403, "FORBIDDEN"),
    "no WRITE": (bearer(make_token(perms=("READ",))), 403, "FORBIDDEN"),
    "no perm claim": (
        bearer(jwt.encode({"sub": "x", "tenant": T, "projects": ["p1"], "exp": NOW + 600}, SECRET)),
        403,
        "FORBIDDEN",
    ),
}


@pytest.fixture
def doc_id(api_app: RagApp) -> str:
    return api_app.documents.create(T, "p1", "documents/a.md", "alpha text").id


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_denied(
    client: TestClient,
    api_app: RagApp,
    doc_id: str,
    case: str,
    method: str,
    path: str,
    body: dict[str, str] | None,
) -> None:
    headers, status, code = CASES[case]
    before = api_app.documents.get(T, "p1", doc_id)
    response = client.request(method, path.format(doc=doc_id), headers=headers, json=body)
    assert response.status_code == status, response.text
    data = response.json()
    assert set(data) == {"error", "code"} and data["code"] == code and data["error"]
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer ")
    # a refused call changes nothing
    after = api_app.documents.get(T, "p1", doc_id)
    assert (after.rag_enabled, after.rag_version) == (before.rag_enabled, before.rag_version)


@pytest.mark.parametrize("projects", [["p1"], ["p0", "p1"], "*"])
@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_allowed(
    client: TestClient,
    doc_id: str,
    projects: list[str] | str,
    method: str,
    path: str,
    body: dict[str, str] | None,
) -> None:
    response = client.request(
        method, path.format(doc=doc_id), headers=bearer(make_token(projects=projects)), json=body
    )
    assert response.status_code == 200, response.text


def test_small_clock_skew_is_tolerated(client: TestClient) -> None:
    token = make_token(now=time.time() - 610, ttl_s=600)  # expired 10 s ago
    response = client.get("/brain/t1/projects/p1/rag/status", headers=bearer(token))
    assert response.status_code == 200


def test_unknown_project_is_not_revealed_to_an_unauthorised_caller(client: TestClient) -> None:
    response = client.post("/brain/t1/projects/nope/rag/reindex")
    assert response.status_code == 401


def test_error_messages_say_what_is_wrong(client: TestClient) -> None:
    expired = client.get(
        "/brain/t1/projects/p1/rag/status",
        headers=bearer(make_token(now=NOW - 7200, ttl_s=3600)),
    ).json()
    assert "expired" in expired["error"]
    other = client.get(
        "/brain/t1/projects/p1/rag/status", headers=bearer(make_token(projects=["p2"]))
    ).json()
    assert "p1" in other["error"]


@pytest.mark.parametrize("secret", [None, "", "too-short"])
def test_api_refuses_to_start_without_a_usable_secret(make_app, secret: str | None) -> None:
    app = make_app(config={"jwt_secret": secret})
    with pytest.raises(ApiConfigError) as info:
        create_api(app)
    assert "VANCETOPE_RAG_JWT_SECRET" in info.value.message
    assert info.value.code == "API_CONFIG"


def test_metrics_need_no_token(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert "vance_rag_indexer_runs_total" in response.text
