"""Status, reindex/rebuild, the documents list and the §8.1 override, on a real store."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from api_support import API_KEY, POISON, ApiAppFactory, bearer, make_token
from fastapi.testclient import TestClient

from fakes import POISON_MESSAGE, T
from vancetope_rag.api import create_api
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.store.port.types import RagScope

BASE = "/brain/t1/projects/p1"
ELIGIBLE = ["documents/a.md", "documents/b.md", "documents/sub/c.txt"]


def _seed(app: RagApp) -> dict[str, str]:
    """Three eligible documents, one outside documents/; indexed."""
    ids = {path: app.documents.create(T, "p1", path, f"text of {path}").id for path in ELIGIBLE}
    ids["_vance/notes.md"] = app.documents.create(T, "p1", "_vance/notes.md", "internal").id
    app.scheduler.run_until_idle(timeout_s=30)
    return ids


def _chunk_sources(app: RagApp) -> set[str]:
    rag = app.project_rags.find_default_rag(T, "p1")
    assert rag is not None
    return {c.source_ref for c in app.store.chunks.get_chunks(RagScope.of(rag))}


def test_status_shape_and_values(client: TestClient, api_app: RagApp) -> None:
    _seed(api_app)
    response = client.get(f"{BASE}/rag/status", headers=bearer())
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    data = response.json()
    assert set(data) == {
        "exists",
        "ragId",
        "embeddingProvider",
        "embeddingModel",
        "chunkCount",
        "createdAt",
        "documents",
        "truncatedDocuments",
        "indexer",
        "progress",
        "needsAttention",
        "needsAttentionCount",
        "configuredModel",
        "paused",
        "providerCircuit",
        "profileNote",
        "chunkCounting",
        "minScoreAuto",
        "noRagReason",
        "modelProfile",
    }
    # the model profile the RAG pinned (dimension, window, prefixes)
    assert data["modelProfile"]["dimension"] == 256
    assert set(data["modelProfile"]) == {"dimension", "window", "queryPrefix", "documentPrefix"}
    assert data["configuredModel"] == "hashing:hashing-256"  # what a rebuild builds onto
    assert data["truncatedDocuments"] == 0
    assert data["needsAttention"] == [] and data["needsAttentionCount"] == 0
    assert data["paused"] is None and data["providerCircuit"] is None  # hashing: in process
    assert data["progress"]["busy"] is False and data["progress"]["migration"] is None
    assert data["progress"]["indexing"] | {"rate": 0} == {
        "done": 3,
        "failed": 0,
        "skipped": 0,
        "pending": 0,
        "total": 3,
        "rate": 0,
        "etaSeconds": None,
        "paused": None,
    }
    rag = api_app.project_rags.find_default_rag(T, "p1")
    assert rag is not None
    assert data["exists"] is True and data["ragId"] == rag.id
    assert (data["embeddingProvider"], data["embeddingModel"]) == ("hashing", "hashing-256")
    assert data["chunkCount"] == 3
    assert datetime.fromisoformat(data["createdAt"]) == rag.created_at
    assert data["documents"] == {
        "none": 1,
        "pending": 0,
        "processing": 0,
        "indexed": 3,
        "failed": 0,
    }


def test_status_without_default_rag(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(provider="none")
    with TestClient(create_api(app)) as c:
        data = c.get(f"{BASE}/rag/status", headers=bearer()).json()
    assert data["exists"] is False and data["ragId"] is None and data["chunkCount"] == 0


def test_status_says_why_there_is_no_rag(make_app: Any) -> None:
    """openai without ai.embedding.apiKey: REST status (and the UI, which shows it) gives
    the reason and the fix, where it said only that the RAG is absent."""
    from api_support import SECRET

    app = make_app(provider="openai", config={"jwt_secret": SECRET})
    app.bring(T, "p1")
    with TestClient(create_api(app)) as c:
        data = c.get(f"{BASE}/rag/status", headers=bearer()).json()
    assert data["exists"] is False
    assert "ai.embedding.apiKey is required" in data["noRagReason"]
    assert "placeholder" in data["noRagReason"]


def test_reindex_queues_every_eligible_document(client: TestClient, api_app: RagApp) -> None:
    ids = _seed(api_app)
    rag_before = api_app.project_rags.find_default_rag(T, "p1")

    response = client.post(f"{BASE}/rag/reindex", params={"rebuild": "false"}, headers=bearer())

    assert response.status_code == 200
    assert response.json() == {"rebuild": False, "documentsQueued": 3, "migration": None}
    for path in ELIGIBLE:
        assert api_app.documents.get(T, "p1", ids[path]).rag_dirty
    assert not api_app.documents.get(T, "p1", ids["_vance/notes.md"]).rag_dirty
    # incremental: same RAG, chunks kept until the indexer replaces them
    assert api_app.project_rags.find_default_rag(T, "p1") == rag_before
    assert api_app.project_rags.status(T, "p1").chunk_count == 3


def test_rebuild_fills_a_new_generation_then_switches(client: TestClient, api_app: RagApp) -> None:
    _seed(api_app)
    old_id = client.get(f"{BASE}/rag/status", headers=bearer()).json()["ragId"]
    api_app.settings.set(T, None, "ai.embedding.model", "hashing-128")

    response = client.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())

    assert response.status_code == 200
    body = response.json()
    migration = body["migration"]
    assert body == {
        "rebuild": True,
        "documentsQueued": 3,
        "migration": {
            "id": migration["id"],
            "fromModel": "hashing:hashing-256",
            "toModel": "hashing:hashing-128",
        },
    }
    status = client.get(f"{BASE}/rag/status", headers=bearer()).json()
    # the live generation answers meanwhile, untouched
    assert (status["ragId"], status["chunkCount"], status["embeddingModel"]) == (
        old_id,
        3,
        "hashing-256",
    )
    assert status["progress"]["busy"] is True
    running = status["progress"]["migration"]
    assert (running["id"], running["state"], running["total"], running["done"]) == (
        migration["id"],
        "running",
        3,
        0,
    )
    again = client.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
    assert again.status_code == 409 and again.json()["code"] == "REBUILD_RUNNING"

    api_app.scheduler.run_until_idle(timeout_s=30)
    status = client.get(f"{BASE}/rag/status", headers=bearer()).json()
    assert status["ragId"] == running["toRagId"] != old_id
    assert (status["chunkCount"], status["embeddingModel"]) == (3, "hashing-128")
    done = status["progress"]["migration"]
    assert (done["state"], done["done"], done["pending"], status["progress"]["busy"]) == (
        "completed",
        3,
        0,
        False,
    )


def test_cancel_a_rebuild(client: TestClient, api_app: RagApp) -> None:
    _seed(api_app)
    old_id = client.get(f"{BASE}/rag/status", headers=bearer()).json()["ragId"]
    none = client.delete(f"{BASE}/rag/rebuild", headers=bearer())
    assert none.status_code == 404 and none.json()["code"] == "NO_REBUILD_RUNNING"
    started = client.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer()).json()

    response = client.delete(f"{BASE}/rag/rebuild", headers=bearer())

    assert response.status_code == 200
    body = response.json()
    assert body["cancelled"] is True
    assert (body["migration"]["id"], body["migration"]["state"]) == (
        started["migration"]["id"],
        "cancelled",
    )
    status = client.get(f"{BASE}/rag/status", headers=bearer()).json()
    assert (status["ragId"], status["chunkCount"]) == (old_id, 3)
    assert status["progress"]["busy"] is False
    shadow = body["migration"]["toRagId"]
    assert api_app.store.rebuilds.get_any_rag(T, "p1", shadow) is None  # disposed


def test_rebuild_with_embeddings_off_keeps_the_index(make_api_app: ApiAppFactory) -> None:
    app = make_api_app()
    _seed(app)
    app.settings.set(T, None, "ai.embedding.provider", "none")
    with TestClient(create_api(app)) as c:
        response = c.post(f"{BASE}/rag/reindex?rebuild=true", headers=bearer())
    assert response.status_code == 409
    assert response.json()["code"] == "EMBEDDING_DISABLED"
    assert "ai.embedding.provider" in response.json()["error"]
    assert app.project_rags.find_default_rag(T, "p1") is not None


def test_reindex_unknown_or_closed_project(client: TestClient, api_app: RagApp) -> None:
    star = bearer_all()
    unknown = client.post("/brain/t1/projects/ghost/rag/reindex", headers=star)
    assert unknown.status_code == 404 and unknown.json()["code"] == "PROJECT_NOT_FOUND"
    api_app.close_project(T, "p1")
    closed = client.post(f"{BASE}/rag/reindex", headers=star)
    assert closed.status_code == 409 and closed.json()["code"] == "PROJECT_CLOSED"
    assert api_app.project_rags.find_default_rag(T, "p1") is None  # not re-created


def bearer_all() -> dict[str, str]:
    return bearer(make_token(projects="*"))


@pytest.mark.parametrize(("value", "stored"), [("off", False), ("on", True), ("auto", None)])
def test_patch_sets_the_override_and_marks_dirty(
    client: TestClient, api_app: RagApp, value: str, stored: bool | None
) -> None:
    ids = _seed(api_app)
    doc_id = ids["documents/a.md"]
    if value == "auto":  # from a set override back to auto
        api_app.documents.set_rag_enabled_override(T, "p1", doc_id, "off")
        api_app.scheduler.run_until_idle(timeout_s=30)

    response = client.patch(
        f"{BASE}/documents/{doc_id}", json={"ragEnabled": value}, headers=bearer()
    )

    assert response.status_code == 200
    data = response.json()
    assert data["id"] == doc_id and data["ragEnabled"] == value and data["ragDirty"] is True
    assert "content" not in data
    doc = api_app.documents.get(T, "p1", doc_id)
    assert doc.rag_enabled is stored and doc.rag_dirty


def test_never_and_always_index_change_the_chunks(client: TestClient, api_app: RagApp) -> None:
    ids = _seed(api_app)
    a, internal = ids["documents/a.md"], ids["_vance/notes.md"]
    assert a in _chunk_sources(api_app) and internal not in _chunk_sources(api_app)

    client.patch(f"{BASE}/documents/{a}", json={"ragEnabled": "off"}, headers=bearer())
    client.patch(f"{BASE}/documents/{internal}", json={"ragEnabled": "on"}, headers=bearer())
    api_app.scheduler.run_until_idle(timeout_s=30)

    sources = _chunk_sources(api_app)
    assert a not in sources and internal in sources


def test_documents_list_and_failed_documents_say_why(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(provider="poison")
    app.settings.set(T, None, "ai.embedding.apiKey", API_KEY)
    ok = app.documents.create(T, "p1", "documents/ok.md", "fine text").id
    bad = app.documents.create(T, "p1", "documents/bad.md", f"holds {POISON} inside").id
    app.scheduler.run_until_idle(timeout_s=30)

    with TestClient(create_api(app)) as c:
        failed = c.get(f"{BASE}/rag/documents?state=failed", headers=bearer())
        everything = c.get(f"{BASE}/rag/documents", headers=bearer()).json()
        page = c.get(f"{BASE}/rag/documents?limit=1&offset=1", headers=bearer()).json()
        status = c.get(f"{BASE}/rag/status", headers=bearer()).json()

    assert failed.status_code == 200
    data = failed.json()
    assert data["total"] == 1
    [row] = data["documents"]
    assert (row["id"], row["path"], row["state"], row["attempts"]) == (
        bad,
        "documents/bad.md",
        "failed",
        1,
    )
    assert POISON_MESSAGE in row["lastError"]
    assert row["indexedAt"] is None
    # the provider echoed its key into the error; the API does not pass it on
    assert API_KEY not in failed.text and "***" in row["lastError"]
    assert status["documents"]["failed"] == 1

    assert everything["total"] == 2
    by_id = {d["id"]: d for d in everything["documents"]}
    assert by_id[ok]["state"] == IndexState.INDEXED.value and by_id[ok]["lastError"] is None
    assert by_id[ok]["indexedAt"] is not None and by_id[ok]["eligible"] is True
    assert page["total"] == 2 and len(page["documents"]) == 1


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "needle"),
    [
        ("POST", "/rag/reindex?rebuild=maybe", {}, "'rebuild': must be true or false"),
        ("GET", "/rag/documents?state=broken", {}, "'state': Input should be 'none'"),
        ("GET", "/rag/documents?limit=0", {}, "'limit'"),
        ("GET", "/rag/documents?limit=100000", {}, "'limit'"),
        ("PATCH", "/documents/{doc}", {"json": {"ragEnabled": "maybe"}}, "'auto', 'on' or 'off'"),
        ("PATCH", "/documents/{doc}", {"json": {"ragEnabled": True}}, "'ragEnabled'"),
        ("PATCH", "/documents/{doc}", {"json": {}}, "'ragEnabled': Field required"),
        (
            "PATCH",
            "/documents/{doc}",
            {"json": {"ragEnabled": "on", "content": "x"}},
            "'content': unknown field",
        ),
        (
            "PATCH",
            "/documents/{doc}",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
            "JSON",
        ),
    ],
)
def test_bad_input_gets_an_actionable_422(
    client: TestClient,
    api_app: RagApp,
    method: str,
    path: str,
    kwargs: dict[str, object],
    needle: str,
) -> None:
    doc_id = api_app.documents.create(T, "p1", "documents/a.md", "alpha").id
    extra = kwargs.pop("headers", {})
    assert isinstance(extra, dict)
    response = client.request(
        method, BASE + path.format(doc=doc_id), headers={**bearer(), **extra}, **kwargs
    )
    assert response.status_code == 422, response.text
    data = response.json()
    assert set(data) == {"error", "code"} and data["code"] == "INVALID_REQUEST"
    assert needle in data["error"], data["error"]
    assert not api_app.documents.get(T, "p1", doc_id).rag_enabled  # nothing changed


def test_unknown_document_is_404(client: TestClient) -> None:
    response = client.patch(
        f"{BASE}/documents/does-not-exist", json={"ragEnabled": "on"}, headers=bearer()
    )
    assert response.status_code == 404
    assert response.json() == {
        "error": "no document 'does-not-exist' in project 'p1'",
        "code": "DOCUMENT_NOT_FOUND",
    }


def test_unknown_route_and_method_use_the_error_shape(client: TestClient) -> None:
    missing = client.get("/brain/t1/projects/p1/nothing-here")
    assert missing.status_code == 404 and set(missing.json()) == {"error", "code"}
    wrong = client.delete(f"{BASE}/rag/status", headers=bearer())
    assert wrong.status_code == 405 and wrong.json()["code"] == "METHOD_NOT_ALLOWED"


def test_metrics_carry_no_tenant_data(make_api_app: ApiAppFactory) -> None:
    app = make_api_app(provider="poison")
    app.documents.create(T, "p1", "documents/secret-plans.md", f"{POISON} secret plans")
    app.documents.create(T, "p1", "documents/ok.md", "fine")
    app.scheduler.run_until_idle(timeout_s=30)
    with TestClient(create_api(app)) as c:
        text = c.get("/metrics").text
    assert 'vance_rag_indexer_runs_total{outcome="success"} 1.0' in text
    assert 'vance_rag_indexer_runs_total{outcome="failed"} 1.0' in text
    for private in ("t1", "p1", "secret-plans", "documents/", "tenant=", "project="):
        assert private not in text


def test_status_lists_documents_that_need_attention(
    make_api_app: ApiAppFactory, tmp_path: Path
) -> None:
    """A file replaced by a broken copy keeps its document indexed from the
    last good text; after a reindex the status still says why (``needsAttention``)."""
    import filemakers as fm

    app = make_api_app()
    app.settings.set(T, None, "ai.embedding.apiKey", API_KEY)
    (tmp_path / "report.pdf").write_bytes(fm.text_pdf(["Harbour dues rise in spring"]))
    app.importer.import_directory(T, "p1", tmp_path)
    app.scheduler.run_until_idle(timeout_s=30)
    (tmp_path / "report.pdf").write_bytes(fm.encrypted_pdf("Harbour dues rise in spring"))
    app.importer.import_directory(T, "p1", tmp_path)
    with TestClient(create_api(app)) as c:
        assert c.post(f"{BASE}/rag/reindex", headers=bearer()).status_code == 200
        app.scheduler.run_until_idle(timeout_s=30)
        status = c.get(f"{BASE}/rag/status", headers=bearer()).json()
    assert status["documents"]["indexed"] == 1 and status["documents"]["failed"] == 0
    assert status["needsAttentionCount"] == 1
    [item] = status["needsAttention"]
    assert item["path"] == "documents/report.pdf" and "encrypted" in item["error"]
