"""The REST API's share of the one text limit (``VANCETOPE_RAG_MAX_TEXT_CHARS``): oversized
bodies are refused before any route reads them; documents indexed up to the limit say so."""

from __future__ import annotations

from collections.abc import Iterator

from api_support import ApiAppFactory, bearer
from fastapi.testclient import TestClient

from fakes import P, T
from vancetope_rag.api import create_api
from vancetope_rag.api.limits import max_body_bytes

BASE = f"/brain/{T}/projects/{P}"
LIMIT = 1000


def _chunks(total: int, size: int = 8192) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


def test_oversized_bodies_are_refused_with_the_limit_named(
    make_api_app: ApiAppFactory,
) -> None:
    app = make_api_app(max_text_chars=LIMIT)
    doc = app.documents.create(T, P, "documents/a.md", "alpha")
    too_big = max_body_bytes(LIMIT) + 1
    with TestClient(create_api(app)) as client:
        url = f"{BASE}/documents/{doc.id}"
        for body in (b'{"ragEnabled": "on"' + b" " * too_big + b"}", _chunks(too_big)):
            response = client.patch(url, content=body, headers=bearer())
            assert response.status_code == 413, response.text
            assert response.json()["code"] == "TEXT_TOO_LONG"
            assert "1,000 characters" in response.json()["error"]
            assert "VANCETOPE_RAG_MAX_TEXT_CHARS" in response.json()["error"]
            assert response.headers["x-content-type-options"] == "nosniff"
        assert app.documents.get(T, P, doc.id).rag_enabled is None  # nothing changed
        # a body within the limit, chunked or not, goes through
        ok = client.patch(url, json={"ragEnabled": "on"}, headers=bearer())
        assert ok.status_code == 200 and ok.json()["ragEnabled"] == "on"
        framed = (b'{"ragEnabled": "off"', *_chunks(1000), b"}")
        headers = {**bearer(), "Content-Type": "application/json"}
        ok = client.patch(url, content=iter(framed), headers=headers)
        assert ok.status_code == 200 and ok.json()["ragEnabled"] == "off"


def test_documents_indexed_up_to_the_limit_are_marked(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(max_text_chars=LIMIT)
    long_doc = app.documents.create(T, P, "documents/long.md", "word " * LIMIT)
    app.documents.create(T, P, "documents/short.md", "short")
    app.scheduler.run_until_idle(timeout_s=30)
    with TestClient(create_api(app)) as client:
        docs = client.get(f"{BASE}/rag/documents", headers=bearer()).json()["documents"]
        status = client.get(f"{BASE}/rag/status", headers=bearer()).json()
    marks = {d["path"]: d["truncated"] for d in docs}
    assert marks == {"documents/long.md": True, "documents/short.md": False}
    assert status["truncatedDocuments"] == 1
    assert app.documents.get(T, P, long_doc.id).truncated
