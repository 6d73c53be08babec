"""Issue 20 item 8: a tool call with a missing, unknown or mistyped argument answers a
validation error naming the parameter, flagged ``is_error=True`` so the model can retry; every
other tool error is flagged too. Through the real tools ``app.tools(...)`` hands out, sync and
async (the agent runtime calls ``acall``)."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest
from llama_index.core.tools import FunctionTool, ToolOutput

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.tools import TOOL_NAMES, RagTools


def _tool(app: RagApp, name: str) -> FunctionTool:
    tool = next(t for t in app.tools(T, P) if t.metadata.name == name)
    assert isinstance(tool, FunctionTool)
    return tool


def _required(name: str) -> list[str]:
    params = inspect.signature(getattr(RagTools, name)).parameters
    return [n for n, p in params.items() if n != "self" and p.default is inspect.Parameter.empty]


def _error(output: ToolOutput) -> dict[str, Any]:
    assert output.is_error is True
    parsed: dict[str, Any] = json.loads(output.content)
    assert "internal error" not in parsed["error"]
    return parsed


@pytest.mark.parametrize("name", [n for n in TOOL_NAMES if _required(n)])
def test_missing_required_argument_names_it(app: RagApp, name: str) -> None:
    for missing in _required(name):
        given = {p: "x" for p in _required(name) if p != missing}
        for output in (
            _tool(app, name).call(**given),
            asyncio.run(_tool(app, name).acall(**given)),
        ):
            out = _error(output)
            assert out["code"] == "INVALID_ARGUMENT" and out["parameter"] == missing
            assert f"'{missing}'" in out["error"] and "missing" in out["error"]


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_unknown_argument_names_it(app: RagApp, name: str) -> None:
    given: dict[str, Any] = {p: "x" for p in _required(name)}
    out = _error(_tool(app, name).call(**given, bogus=1))
    assert out["code"] == "INVALID_ARGUMENT" and out["parameter"] == "bogus"
    assert "'bogus'" in out["error"]
    for param in inspect.signature(getattr(RagTools, name)).parameters:
        if param != "self":
            assert param in out["error"]  # says which parameters exist


@pytest.mark.parametrize(
    ("name", "kwargs", "parameter"),
    [
        ("rag_query", {"ragId": "_documents", "query": 42}, "query"),
        ("rag_query", {"ragId": "_documents", "query": "x", "topK": "five"}, "topK"),
        ("rag_query", {"ragId": ["_documents"], "query": "x"}, "ragId"),
        ("rag_add_text", {"ragId": "_documents", "text": "t", "metadata": "k=v"}, "metadata"),
        ("rag_create", {"name": None}, "name"),
    ],
)
def test_wrong_type_names_the_parameter(
    app: RagApp, name: str, kwargs: dict[str, Any], parameter: str
) -> None:
    out = _error(_tool(app, name).call(**kwargs))
    assert out["code"] == "INVALID_ARGUMENT" and out["parameter"] == parameter
    assert f"'{parameter}'" in out["error"]


def test_every_failure_is_flagged_and_success_is_not(app: RagApp) -> None:
    missing = _tool(app, "rag_query").call(ragId="nope", query="x")
    assert missing.is_error is True and json.loads(missing.content)["code"] == "RAG_NOT_FOUND"
    listed = _tool(app, "rag_list").call()
    assert listed.is_error is False and "rags" in json.loads(listed.content)
