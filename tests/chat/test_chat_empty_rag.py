"""A RAG with no chunks yet (of its dimension: none at all, or only other dimensions') answers
every query with no hits: the ``rag_query`` tool in both modes, and ``pre_turn`` without a
warning. Both used to fail on the lexical statistics of an empty index."""

from __future__ import annotations

import logging

import pytest

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_rag_query_on_a_fresh_rag_has_no_hits(app: RagApp, mode: str) -> None:
    app.bring(T, P)
    app.settings.set(T, None, "rag.retrieval.mode", mode)
    tools = app.tools(T, P)
    rag_id = call_tool(tools, "rag_create", name="notes")["ragId"]
    result = call_tool(tools, "rag_query", ragId=rag_id, query="do cats purr")
    assert "code" not in result, result
    assert result["hits"] == []


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_pre_turn_on_a_project_without_chunks_is_silent(
    app: RagApp, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    app.bring(T, P)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.retrieval.mode", mode)
    call_tool(app.tools(T, P), "rag_create", name="notes")
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            assert app.pre_turn(T, P, ["do cats purr"]) == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
