"""The REST test query (``POST …/rag/query``) says what its hits were cut by: the reranker's
calibrated rule in the reranker's scale, the cosine gap this query used (narrowed by the
RAG's noise floor when that binds), or nothing; and it lists the hits the cut dropped, each
with the reason the cut gave, the same ones a turn's cut drops (``context --explain``).
``params.relevanceCut`` stays the RAG's gap for the mode, whatever cut the query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from test_rerank_cut import PREFERRED, QUESTION, SHUNNED, calibrated, documents

from rerank_server import KEY, RerankServer
from vancetope_rag.api import create_api, issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.domain.retrieval.relevance import FLOOR_GAP_SHARE, RELEVANCE_AUTO
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.recipes import RagParams

T, P = "t1", "p1"
SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"
BASE = f"/brain/{T}/projects/{P}"

#: A question whose best cosine stands barely over the RAG's noise floor (the hashing
#: provider on the handbook pages): the floor narrows the RAG's gap for it.
LOW_QUESTION = "what is the notice period"


@pytest.fixture
def api_app(make_app: Any) -> RagApp:
    return make_app(config={"jwt_secret": SECRET})


@pytest.fixture(params=["tei", "cohere"])
def srv(request: pytest.FixtureRequest) -> Iterator[RerankServer]:
    """The loopback reranker, in each wire format, as tests/services/test_rerank_cut.py's."""
    server = RerankServer(request.param, key=KEY)
    server.prefer, server.shun = PREFERRED, SHUNNED
    yield server
    server.down()


def ask(app: RagApp, query: str, **body: object) -> dict[str, Any]:
    """The REST test query's answer for ``query``."""
    token = issue_token(
        SECRET, subject="tester", tenant=T, projects=[P], perms=("WRITE",), ttl_s=600
    )
    with TestClient(create_api(app)) as client:
        answer = client.post(
            f"{BASE}/rag/query",
            json={"query": query, **body},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def turn_dropped(app: RagApp, query: str) -> list[tuple[str | None, str]]:
    """What a turn's ``relevanceCut: auto`` drops for ``query``, with the reasons (the token
    budget's left out)."""
    recipe = RagParams(auto_inject=AutoInject.ON, relevance_cut=RELEVANCE_AUTO)
    decision = app.autoinject.decide(T, P, [query], recipe)
    return [(d.hit.path, d.reason) for d in decision.dropped if not d.reason.startswith("over ")]


def test_a_reranked_query_says_it_was_cut_by_the_rerankers_rule(
    api_app: RagApp, srv: RerankServer
) -> None:
    rag, rule = calibrated(api_app, srv)
    assert rag.calibration is not None

    data = ask(api_app, QUESTION, relevanceCut="auto")

    cut = data["cut"]
    assert cut["by"] == "rerank"
    assert (cut["rule"], cut["value"], cut["reranker"]) == (rule.rule, rule.value, rule.reranker)
    assert cut["keeps"] == rule.describe()
    assert cut["narrowed"] is False and cut["floor"] is None
    # the parameter keeps meaning the RAG's cosine gap; cut says what this query used
    assert data["params"]["relevanceCut"] == rag.calibration.gap
    dropped = data["dropped"]
    assert dropped and all(d["reason"].startswith("rerank ") for d in dropped)
    (shunned,) = [d for d in dropped if SHUNNED in d["text"]]
    assert shunned["path"] == "documents/garden-a.md" and shunned["rerankScore"] is not None
    # the same candidates, for the same reasons, as a turn's cut
    assert [(d["path"], d["reason"]) for d in dropped] == turn_dropped(api_app, QUESTION)


def test_a_query_whose_floor_binds_says_the_narrowed_gap(api_app: RagApp) -> None:
    api_app.settings.set(T, P, "rag.minScore", -1)  # every page a candidate
    rag = documents(api_app)
    assert rag.calibration is not None and rag.calibration.gap is not None
    floor = rag.calibration.min_score

    data = ask(api_app, LOW_QUESTION, relevanceCut="auto")

    cut, dropped = data["cut"], data["dropped"]
    best = max(h["score"] for h in [*data["hits"], *dropped])
    assert cut["by"] == "gap" and cut["rule"] is None and cut["reranker"] is None
    assert cut["narrowed"] is True and cut["floor"] == floor
    assert cut["value"] == pytest.approx(FLOOR_GAP_SHARE * (best - floor), abs=1e-3)
    assert cut["value"] < data["params"]["relevanceCut"] == rag.calibration.gap
    assert "over the floor" in cut["keeps"]
    assert dropped and all(d["reason"].startswith(("gap ", "fused ")) for d in dropped)
    assert any(d["reason"].endswith(f"over the floor {floor:.4f})") for d in dropped)
    assert [(d["path"], d["reason"]) for d in dropped] == turn_dropped(api_app, LOW_QUESTION)

    # a question whose best stands high over the floor: the RAG's own gap, not narrowed
    wide = ask(api_app, QUESTION, relevanceCut="auto")["cut"]
    assert (wide["by"], wide["value"], wide["narrowed"]) == ("gap", rag.calibration.gap, False)
    # no cut asked: none, nothing dropped
    plain = ask(api_app, QUESTION)
    assert plain["cut"]["by"] == "none" and plain["cut"]["value"] is None
    assert plain["dropped"] == []


def test_a_turn_and_the_test_query_judge_their_hits_by_the_turn_words(api_app: RagApp) -> None:
    """Both paths hand the turn's text to the cut: with every page within a wide fixed gap
    (dense: no fused score), the pages that carry none of the question's words go."""
    api_app.settings.set(T, P, "rag.minScore", -1)  # every page a candidate
    api_app.settings.set(T, P, "rag.retrieval.mode", "dense")
    documents(api_app)

    data = ask(api_app, QUESTION, relevanceCut=2.0)

    worded = [d for d in data["dropped"] if d["reason"].startswith("words ")]
    assert worded, data["dropped"]
    assert "best-worded hit's share of the turn's words" in data["cut"]["keeps"]
    recipe = RagParams(auto_inject=AutoInject.ON, relevance_cut=2.0)
    decision = api_app.autoinject.decide(T, P, [QUESTION], recipe)
    assert [(d.hit.path, d.reason) for d in decision.dropped if d.reason.startswith("words ")] == [
        (d["path"], d["reason"]) for d in worded
    ]
