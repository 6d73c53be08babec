"""The ``rag_query`` tool and CLI ``query`` honour the settings cascade
(``rag.topK``, ``rag.minScore``, ``rag.maxPerDocument``, ``rag.project.enabled``) unless the
caller passes a value; they answer what the project's retriever answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from chat_fakes import index_docs
from click.testing import CliRunner

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli

#: Nine documents that all share words with the question, so a query has many hits.
DOCS = {
    f"documents/cats-{i}.md": f"Cats purr and sleep a lot. Note {i}: " + " ".join(["fur"] * i)
    for i in range(1, 10)
}
QUESTION = "do cats purr and sleep a lot"


@pytest.fixture
def cats(app: RagApp) -> RagApp:
    index_docs(app, DOCS)
    app.settings.set(T, None, "rag.minScore", -1.0)  # tenant: keep every hit
    return app


def _tool_hits(app: RagApp, **kwargs: Any) -> list[dict[str, Any]]:
    out = call_tool(app.tools(T, P), "rag_query", ragId="_documents", query=QUESTION, **kwargs)
    assert "error" not in out, out
    hits: list[dict[str, Any]] = out["hits"]
    return hits


def _retriever_paths(app: RagApp) -> list[str | None]:
    return [h.path for h in app.as_retriever(T, P).retrieve_hits(QUESTION)]


def test_rag_query_tool_follows_the_projects_top_k_and_min_score(cats: RagApp) -> None:
    assert len(_tool_hits(cats)) == 5  # the engine's default topK
    cats.settings.set(T, P, "rag.topK", 2)
    hits = _tool_hits(cats)
    assert [h["path"] for h in hits] == _retriever_paths(cats) and len(hits) == 2
    assert len(_tool_hits(cats, topK=4)) == 4  # the caller's value wins

    scores = [h["score"] for h in _tool_hits(cats, topK=9)]
    threshold = (scores[2] + scores[3]) / 2
    cats.settings.set(T, P, "rag.minScore", threshold)
    kept = _tool_hits(cats, topK=9)
    assert len(kept) == 3 and all(h["score"] >= threshold for h in kept)


def test_rag_query_tool_follows_max_per_document(cats: RagApp) -> None:
    cats.settings.set(T, P, "rag.topK", 9)
    cats.settings.set(T, P, "rag.maxPerDocument", 1)
    hits = _tool_hits(cats)
    assert len({h["path"] for h in hits}) == len(hits)
    assert [h["path"] for h in hits] == _retriever_paths(cats)


def test_rag_query_tool_refuses_a_disabled_project_rag(cats: RagApp) -> None:
    cats.settings.set(T, P, "rag.project.enabled", False)
    assert _retriever_paths(cats) == []
    output = next(t for t in cats.tools(T, P) if t.metadata.name == "rag_query").call(
        ragId="_documents", query=QUESTION
    )
    out = json.loads(output.content)
    assert output.is_error and out["code"] == "PROJECT_RAG_DISABLED"
    assert "rag.project.enabled" in out["error"]


def test_cli_query_follows_the_cascade(cats: RagApp, store_uri: str, tmp_path: Path) -> None:
    cats.settings.set(T, P, "rag.topK", 2)
    runner = CliRunner()

    def query(*args: str, ok: bool = True) -> Any:
        result = runner.invoke(
            cli, ["--store", store_uri, "--tenant", T, "--project", P, "query", QUESTION, *args]
        )
        assert (result.exit_code == 0) == ok, result.output
        return json.loads(result.stdout) if ok else result

    hits = query("--json")
    assert [h["path"] for h in hits] == _retriever_paths(cats) and len(hits) == 2
    assert len(query("--json", "--top-k", "4")) == 4

    cats.settings.set(T, P, "rag.minScore", 0.999)
    assert all(h["score"] >= 0.999 for h in query("--json"))
    assert len(query("--json", "--min-score", "-1")) == 2

    cats.settings.set(T, P, "rag.project.enabled", False)
    refused = query(ok=False)
    assert "rag.project.enabled" in refused.output


def test_project_top_k_2_and_min_score_half_bound_the_query(cats: RagApp, store_uri: str) -> None:
    """Project ``rag.topK 2`` and ``rag.minScore 0.5``; ``query``
    returned the engine's 5 hits down to a score far below 0.5."""
    runner = CliRunner()
    base = ["--store", store_uri, "--tenant", T, "--project", P, "query", QUESTION, "--json"]

    def scores(*args: str) -> list[float]:
        result = runner.invoke(cli, [*base, *args])
        assert result.exit_code == 0, result.output
        return [h["score"] for h in json.loads(result.stdout)]

    before = scores()
    assert len(before) == 5 and min(before) < 0.5  # the tenant keeps every hit
    cats.settings.set(T, P, "rag.topK", 2)
    cats.settings.set(T, P, "rag.minScore", 0.5)
    after = scores()
    assert 1 <= len(after) <= 2 and all(s >= 0.5 for s in after)
    assert [h["score"] for h in _tool_hits(cats)] == after  # the tool answers the same
    wide = scores("--top-k", "9")  # the caller's topK, the project's minScore
    assert len(wide) > 2 and all(s >= 0.5 for s in wide)
    assert len(scores("--top-k", "9")) < len(scores("--top-k", "9", "--min-score", "-1"))
