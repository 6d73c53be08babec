"""The test query (``POST …/rag/query``: what a turn would get for a question), the write
rate limit, and the documents list's search and failure filters."""

from __future__ import annotations

from api_support import POISON, SECRET, ApiAppFactory, bearer, make_token
from fastapi.testclient import TestClient

from fakes import DOCS, P, T
from vancetope_rag.api import create_api, issue_token
from vancetope_rag.app import RagApp

BASE = f"/brain/{T}/projects/{P}"


def _indexed(make_api_app: ApiAppFactory, **config: object) -> RagApp:
    app = make_api_app(**config)
    for path, text in DOCS.items():
        app.document_saved(T, P, path, text)
    assert app.scheduler.run_until_idle(timeout_s=30).failed == 0
    return app


def test_the_test_query_answers_what_a_turn_would_get(make_api_app: ApiAppFactory) -> None:
    app = _indexed(make_api_app)
    app.settings.set(T, P, "rag.topK", 2)
    question = "what do zebras eat on the savanna"
    with TestClient(create_api(app)) as client:
        answer = client.post(f"{BASE}/rag/query", json={"query": question}, headers=bearer())
        assert answer.status_code == 200, answer.text
        data = answer.json()
        # the retriever a turn uses, with the project's cascade (topK 2 here)
        turn = app.as_retriever(T, P).retrieve_hits(question)
        assert [h["path"] for h in data["hits"]] == [h.path for h in turn]
        assert [h["score"] for h in data["hits"]] == [round(h.score, 4) for h in turn]
        assert data["hits"][0]["path"] == "documents/zebra.md"
        assert data["hits"][0]["label"] == "S1" and data["hits"][0]["source"]
        assert "Zebras graze" in data["hits"][0]["text"]
        assert data["params"]["topK"] == 2 and len(data["hits"]) <= 2
        assert data["reason"] is None and data["ragId"] == turn[0].rag_id

        one = client.post(
            f"{BASE}/rag/query", json={"query": question, "topK": 1}, headers=bearer()
        )
        assert len(one.json()["hits"]) == 1 and one.json()["params"]["topK"] == 1

        app.settings.set(T, P, "rag.project.enabled", False)
        off = client.post(f"{BASE}/rag/query", json={"query": question}, headers=bearer()).json()
        assert off["hits"] == [] and "rag.project.enabled" in off["reason"]

        empty = client.post(f"{BASE}/rag/query", json={"query": ""}, headers=bearer())
        assert empty.status_code == 422 and "query" in empty.json()["error"]
        extra = client.post(f"{BASE}/rag/query", json={"query": "x", "k": 1}, headers=bearer())
        assert extra.status_code == 422
        anonymous = client.post(f"{BASE}/rag/query", json={"query": question})
        assert anonymous.status_code == 401
        foreign = make_token(projects=["other"])
        refused = client.post(f"{BASE}/rag/query", json={"query": "x"}, headers=bearer(foreign))
        assert refused.status_code == 403


def test_write_routes_are_rate_limited_per_subject(make_api_app: ApiAppFactory) -> None:
    app = _indexed(make_api_app, api_writes_per_minute=3)
    with TestClient(create_api(app)) as client:
        writes = [
            client.post(f"{BASE}/rag/query", json={"query": "zebra"}, headers=bearer()),
            client.post(f"{BASE}/rag/reindex", headers=bearer()),
            client.post(f"{BASE}/rag/query", json={"query": "zebra"}, headers=bearer()),
        ]
        assert [w.status_code for w in writes] == [200, 200, 200]
        limited = client.post(f"{BASE}/rag/query", json={"query": "zebra"}, headers=bearer())
        assert limited.status_code == 429
        assert limited.json()["code"] == "RATE_LIMITED"
        assert "VANCETOPE_RAG_API_WRITES_PER_MINUTE" in limited.json()["error"]
        assert int(limited.headers["Retry-After"]) >= 1
        assert client.post(f"{BASE}/rag/reindex", headers=bearer()).status_code == 429
        # reads are not limited, nor is another subject
        assert client.get(f"{BASE}/rag/status", headers=bearer()).status_code == 200
        other = issue_other_subject()
        again = client.post(f"{BASE}/rag/query", json={"query": "zebra"}, headers=bearer(other))
        assert again.status_code == 200


def issue_other_subject() -> str:
    return issue_token(SECRET, subject="someone-else", tenant=T, projects=[P], perms=("WRITE",))


def test_failed_documents_keep_their_reason_after_a_reindex(make_api_app: ApiAppFactory) -> None:
    """Before, a reindex erased the reason: the failed documents showed as plain pending and
    the UI's failed list said "None"."""
    app = make_api_app(provider="poison")
    for path, text in DOCS.items():
        app.document_saved(T, P, path, text)
    app.document_saved(T, P, "documents/broken.md", f"this holds {POISON}")
    app.scheduler.run_until_idle(timeout_s=30)
    with TestClient(create_api(app)) as client:
        app.project_rags.reindex(T, P)
        listed = client.get(f"{BASE}/rag/documents?withError=true", headers=bearer()).json()
        assert listed["total"] == 1
        (doc,) = listed["documents"]
        assert doc["path"] == "documents/broken.md" and doc["state"] == "pending"
        assert "provider rejected the input" in doc["lastError"]
        status = client.get(f"{BASE}/rag/status", headers=bearer()).json()["progress"]
        assert (status["indexing"]["failed"], status["indexing"]["pending"]) == (0, 4)


def test_the_documents_list_searches_paths_and_pages(make_api_app: ApiAppFactory) -> None:
    app = make_api_app()
    for i in range(30):
        app.documents.create(T, P, f"documents/notes/n{i:02}.md", f"note {i}")
    app.documents.create(T, P, "documents/Zebra Facts.md", "zebras")
    with TestClient(create_api(app)) as client:
        found = client.get(f"{BASE}/rag/documents?q=zebra", headers=bearer()).json()
        assert found["total"] == 1 and found["documents"][0]["path"] == "documents/Zebra Facts.md"
        page = client.get(f"{BASE}/rag/documents?q=notes/&limit=10&offset=20", headers=bearer())
        body = page.json()
        assert body["total"] == 30
        assert [d["path"] for d in body["documents"]] == [
            f"documents/notes/n{i:02}.md" for i in range(20, 30)
        ]
        assert client.get(f"{BASE}/rag/documents?q=", headers=bearer()).json()["total"] == 31


def test_the_test_query_takes_a_relevance_cut_off_by_default(make_api_app: ApiAppFactory) -> None:
    from vancetope_rag.domain.retrieval.relevance import cut_by_relevance

    app = _indexed(make_api_app)
    app.settings.set(T, P, "rag.minScore", -1)  # every document is a candidate
    app.settings.set(T, P, "rag.autoInject.relevanceCut", "0")  # AutoInject's: never here
    question = "what do zebras eat on the savanna"
    with TestClient(create_api(app)) as client:
        plain = client.post(f"{BASE}/rag/query", json={"query": question}, headers=bearer())
        data = plain.json()
        assert data["params"]["relevanceCut"] is None
        turn = app.as_retriever(T, P).retrieve_hits(question)
        assert len(data["hits"]) == len(turn) > 1

        cut = client.post(
            f"{BASE}/rag/query", json={"query": question, "relevanceCut": 0}, headers=bearer()
        ).json()
        assert cut["params"]["relevanceCut"] == 0.0
        kept = cut_by_relevance(turn, 0.0).kept
        assert [h["path"] for h in cut["hits"]] == [h.path for h in kept]
        assert len(kept) < len(turn)

        bad = client.post(
            f"{BASE}/rag/query", json={"query": question, "relevanceCut": "x"}, headers=bearer()
        )
        assert bad.status_code == 422 and "relevanceCut" in bad.json()["error"]


def test_the_test_query_names_its_order_and_each_number(make_api_app: ApiAppFactory) -> None:
    """Before, the answer gave the cosine alone beside hits in fused order: nothing said
    what ordered them."""
    app = _indexed(make_api_app)
    app.settings.set(T, P, "rag.minScore", -1)  # every document a hit
    question = "what do zebras eat on the savanna"
    with TestClient(create_api(app)) as client:
        data = client.post(f"{BASE}/rag/query", json={"query": question}, headers=bearer()).json()
        turn = app.as_retriever(T, P).retrieve_hits(question)
        assert data["order"] == "fused" and len(data["hits"]) == len(turn) >= 2
        for rank, (hit, want) in enumerate(zip(data["hits"], turn, strict=True), 1):
            assert hit["rank"] == rank
            assert hit["fusedScore"] == round(want.fused_score or 0, 6)
            assert (hit["denseRank"], hit["lexicalRank"]) == (want.dense_rank, want.lexical_rank)
        fused = [h["fusedScore"] for h in data["hits"]]
        assert fused == sorted(fused, reverse=True)
        app.settings.set(T, P, "rag.retrieval.mode", "dense")
        dense = client.post(f"{BASE}/rag/query", json={"query": question}, headers=bearer())
        body = dense.json()
        assert body["order"] == "cosine" and body["hits"][0]["fusedScore"] is None
        scores = [h["score"] for h in body["hits"]]
        assert scores == sorted(scores, reverse=True)
