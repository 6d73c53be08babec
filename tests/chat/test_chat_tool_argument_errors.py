"""A tool call with a missing, unknown or mistyped argument answers a
validation error naming the parameter, flagged ``is_error=True`` so the model can retry; every
other tool error is flagged too. Through the real tools ``app.tools(...)`` hands out, sync and
async (the agent runtime calls ``acall``)."""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest
from chat_fakes import RecordingLLM, Step, answer, index_docs, tool_calls, tool_results
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import FunctionTool, ToolOutput
from llama_index.core.tools.calling import acall_tool, call_tool, call_tool_with_selection

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


# LlamaIndex's workflow runtime inspects pydantic models and uses its own deprecated API.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")
@pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning")
def test_a_function_agent_sees_the_parameter_and_retries(app: RagApp) -> None:
    """Through LlamaIndex's agent runtime: the model leaves ``query`` out, reads which
    parameter is missing from the tool message, and calls again with it."""
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    seen: list[dict[str, Any]] = []

    def retry(messages: list[ChatMessage]) -> ChatMessage:
        (failed,) = tool_results(messages)
        seen.append(failed)
        return tool_calls(
            ("rag_query", {"ragId": "_documents", failed["parameter"]: "zebra stripes"})
        )

    steps: list[Step] = [
        lambda m: tool_calls(("rag_query", {"ragId": "_documents"})),
        retry,
        lambda m: answer("done"),
    ]
    agent = FunctionAgent(tools=app.tools(T, P), llm=RecordingLLM(steps))

    async def run() -> list[ToolCallResult]:
        handler = agent.run(user_msg="why stripes?")
        results = [ev async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
        assert str(await handler) == "done"
        return results

    first, second = asyncio.run(run())
    assert (first.tool_output.is_error, second.tool_output.is_error) == (True, False)
    assert seen[0]["code"] == "INVALID_ARGUMENT" and seen[0]["parameter"] == "query"
    assert "'query'" in seen[0]["error"] and "missing" in seen[0]["error"]
    assert json.loads(second.tool_output.content)["hits"][0]["path"] == "documents/zebra.md"


def test_predict_and_call_path_flags_the_error(app: RagApp) -> None:
    """``call_tool_with_selection`` (what ``llm.predict_and_call`` runs) calls the tool the
    same way: the error names the parameter and is flagged."""
    selection = ToolSelection(tool_id="1", tool_name="rag_add_text", tool_kwargs={"text": "t"})
    output = call_tool_with_selection(selection, app.tools(T, P))
    out = _error(output)
    assert out["code"] == "INVALID_ARGUMENT" and out["parameter"] == "ragId"


def test_a_misnamed_argument_of_a_one_parameter_tool_is_named(app: RagApp) -> None:
    """LlamaIndex's ``call_tool`` passes the one argument of a one-parameter tool positionally
    when the tool's signature cannot take its name: ``{"name": "notes"}`` for ``rag_list``
    must not become ``projectId="notes"``."""
    for output in (
        call_tool(_tool(app, "rag_list"), {"name": "notes"}),
        asyncio.run(acall_tool(_tool(app, "rag_list"), {"name": "notes"})),
    ):
        out = _error(output)
        assert out["code"] == "INVALID_ARGUMENT" and out["parameter"] == "name"
        assert "projectId" in out["error"]
    assert call_tool(_tool(app, "rag_list"), {"projectId": P}).is_error is False
