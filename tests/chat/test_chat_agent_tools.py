"""End to end: LlamaIndex agents driven by a scripted LLM call the ``rag_*`` tools (spec §9)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from chat_fakes import (
    RecordingLLM,
    Step,
    answer,
    index_docs,
    rag_context_index,
    tool_calls,
    tool_results,
)
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.workflow import WorkflowRuntimeError

from fakes import P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.integrations.llamaindex.llm import RagContextLLM
from vancetope_rag.tools import TOOL_NAMES

# LlamaIndex's workflow runtime inspects pydantic models and uses its own deprecated API.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
    pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning"),
]

QUESTION = "Make me a notes RAG about quokkas, then tidy up. Also: zebra stripes?"


@pytest.fixture
def agent_app(app: RagApp) -> RagApp:
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    return app


def _run(agent: FunctionAgent | ReActAgent, message: str) -> tuple[list[ToolCallResult], str]:
    async def go() -> tuple[list[ToolCallResult], str]:
        handler = agent.run(user_msg=message)
        results = [ev async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
        output = await handler
        return results, str(output)

    return asyncio.run(go())


def _out(result: ToolCallResult) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(result.tool_output.content)
    return parsed


def test_app_tools_are_the_spec_tools(agent_app: RagApp) -> None:
    tools = agent_app.tools(T, P)
    assert [t.metadata.name for t in tools] == list(TOOL_NAMES)
    assert all(t.metadata.description for t in tools)


def test_function_agent_runs_the_rag_tools(agent_app: RagApp) -> None:
    rag: dict[str, str] = {}

    def create(_: list[ChatMessage]) -> ChatMessage:
        return tool_calls(("rag_create", {"name": "notes", "title": "Field notes"}))

    def add(messages: list[ChatMessage]) -> ChatMessage:
        rag["id"] = tool_results(messages)[0]["ragId"]
        text = "Quokkas are small marsupials that seem to smile. Quokkas live on Rottnest."
        meta = {"path": "notes/quokka.md", "topic": "animals"}
        return tool_calls(
            (
                "rag_add_text",
                {"ragId": rag["id"], "text": text, "sourceRef": "q1", "metadata": meta},
            )
        )

    def query(_: list[ChatMessage]) -> ChatMessage:
        return tool_calls(("rag_query", {"ragId": rag["id"], "query": "quokkas smile", "topK": 3}))

    def listing(_: list[ChatMessage]) -> ChatMessage:
        return tool_calls(("rag_list", {}))

    def delete(_: list[ChatMessage]) -> ChatMessage:
        return tool_calls(("rag_delete", {"ragId": rag["id"]}))

    def relist(_: list[ChatMessage]) -> ChatMessage:
        return tool_calls(("rag_list", {"projectId": P}))

    steps: list[Step] = [create, add, query, listing, delete, relist, lambda m: answer("done")]
    inner = RecordingLLM(steps)
    agent = FunctionAgent(
        tools=agent_app.tools(T, P),
        llm=RagContextLLM(inner, agent_app, T, P),
        system_prompt="You manage RAGs.",
    )
    results, output = _run(agent, QUESTION)

    assert output == "done"
    assert [r.tool_name for r in results] == [
        "rag_create",
        "rag_add_text",
        "rag_query",
        "rag_list",
        "rag_delete",
        "rag_list",
    ]
    created, added, queried, listed, deleted, relisted = (_out(r) for r in results)
    assert all("error" not in out for out in (created, added, queried, listed, deleted))

    assert created["name"] == "notes" and created["title"] == "Field notes"
    assert len(created["ragId"]) == 32 and created["chunkCount"] == 0
    assert created["embeddingProvider"] == "hashing"

    assert added == {"ragId": rag["id"], "sourceRef": "q1", "chunksAdded": 1}

    assert queried["ragId"] == rag["id"]
    (hit,) = queried["hits"]
    assert hit["label"] == "S1" and hit["path"] == "notes/quokka.md"
    assert hit["sourceRef"] == "q1" and hit["kind"] == "content"
    assert 0 < hit["score"] <= 1 and "Quokkas are small marsupials" in hit["text"]

    by_name = {r["name"]: r for r in listed["rags"]}
    assert listed["projectId"] == P
    assert set(by_name) == {"_documents", "notes"}
    assert by_name["notes"]["chunkCount"] == 1 and by_name["_documents"]["chunkCount"] == 3

    assert deleted == {"deleted": rag["id"], "name": "notes", "chunksRemoved": 1}
    assert [r["name"] for r in relisted["rags"]] == ["_documents"]

    # every LLM call of the turn saw the block, after the agent's system prompt
    assert len(inner.calls) == len(steps)
    for sent in inner.calls:
        assert sent[0].content == "You manage RAGs." and rag_context_index(sent) == 1
        assert "documents/zebra.md" in (sent[1].content or "")


def test_reserved_names_through_the_agent(agent_app: RagApp) -> None:
    steps: list[Step] = [
        lambda m: tool_calls(("rag_create", {"name": "_x"})),
        lambda m: tool_calls(("rag_delete", {"ragId": "_documents"})),
        lambda m: tool_calls(("rag_query", {"ragId": "_documents", "query": "zebra stripes"})),
        lambda m: answer("checked"),
    ]
    agent = FunctionAgent(tools=agent_app.tools(T, P), llm=RecordingLLM(steps))
    results, output = _run(agent, "try the reserved names")
    assert output == "checked"
    create, delete, query = (_out(r) for r in results)
    assert create["code"] == "RESERVED_NAME" and "reserved" in create["error"]
    assert delete["code"] == "RESERVED_NAME" and "cannot be deleted" in delete["error"]
    assert query["hits"][0]["path"] == "documents/zebra.md"
    # errors are results, not raises, and flagged as errors
    assert [r.tool_output.is_error for r in results] == [True, True, False]
    rag = agent_app.project_rags.find_default_rag(T, P)
    assert rag is not None and agent_app.rags.chunk_count(rag) == 3


@pytest.mark.parametrize(
    ("tool", "kwargs", "code"),
    [
        ("rag_create", {"name": "_x"}, "RESERVED_NAME"),
        ("rag_create", {"name": "_documents"}, "RESERVED_NAME"),
        ("rag_create", {"name": ""}, "INVALID_INPUT"),
        ("rag_create", {"name": "x", "chunkSize": "big"}, "INVALID_ARGUMENT"),
        ("rag_delete", {"ragId": "_documents"}, "RESERVED_NAME"),
        ("rag_delete", {"ragId": "nope"}, "RAG_NOT_FOUND"),
        ("rag_query", {"ragId": "nope", "query": "x"}, "RAG_NOT_FOUND"),
        ("rag_query", {"ragId": "_documents", "query": "  "}, "INVALID_INPUT"),
        ("rag_query", {"ragId": "_documents", "query": "x", "topK": 0}, "INVALID_ARGUMENT"),
        ("rag_add_text", {"ragId": "_documents", "text": ""}, "INVALID_INPUT"),
        ("rag_list", {"projectId": "another-project"}, "INVALID_INPUT"),
    ],
)
def test_tool_errors_are_results(
    agent_app: RagApp, tool: str, kwargs: dict[str, Any], code: str
) -> None:
    result = call_tool(agent_app.tools(T, P), tool, **kwargs)
    assert result["code"] == code and result["error"]


def test_rag_query_and_add_on_documents_rag(agent_app: RagApp) -> None:
    tools = agent_app.tools(T, P)
    hits = call_tool(tools, "rag_query", ragId="_documents", query="cluster pods", topK=2)["hits"]
    assert hits[0]["path"] == "documents/cluster.md" and hits[0]["label"] == "S1"
    added = call_tool(tools, "rag_add_text", ragId="_documents", text="A manual test chunk.")
    assert added["chunksAdded"] == 1  # writing to the default RAG is allowed (spec §9)


def test_react_agent_keeps_the_users_question_for_the_block(agent_app: RagApp) -> None:
    steps: list[Step] = [
        lambda m: answer("Thought: I should list the RAGs.\nAction: rag_list\nAction Input: {}"),
        lambda m: answer("Thought: I can answer without using any more tools.\nAnswer: two"),
    ]
    inner = RecordingLLM(steps)
    agent = ReActAgent(
        tools=agent_app.tools(T, P),
        llm=RagContextLLM(inner, agent_app, T, P),
    )
    results, output = _run(agent, "Which RAGs exist? I care about zebra stripes.")
    assert output == "two"
    (listed,) = results
    assert [r["name"] for r in _out(listed)["rags"]] == ["_documents"]
    first, second = inner.calls
    assert rag_context_index(first) == rag_context_index(second) == 1
    # the observation in the second call did not replace the user's question
    assert second[-1].content is not None and second[-1].content.startswith("Observation:")
    assert first[1].content == second[1].content
    assert "documents/zebra.md" in (first[1].content or "")


def test_function_agent_needs_a_function_calling_llm(agent_app: RagApp) -> None:
    from llama_index.core.llms.mock import MockLLM

    agent = FunctionAgent(
        tools=agent_app.tools(T, P),
        llm=RagContextLLM(MockLLM(), agent_app, T, P),
    )
    with pytest.raises((ValueError, WorkflowRuntimeError), match="FunctionCallingLLM"):
        _run(agent, "hi")


def test_react_agent_queries_the_documents_and_gets_labels(agent_app: RagApp) -> None:
    steps: list[Step] = [
        lambda m: answer(
            "Thought: I should search the project's documents.\nAction: rag_query\n"
            'Action Input: {"ragId": "_documents", "query": "zebra stripes flies", "topK": 2}'
        ),
        lambda m: answer("Thought: I can answer without using any more tools.\nAnswer: [S1]"),
    ]
    inner = RecordingLLM(steps)
    agent = ReActAgent(tools=agent_app.tools(T, P), llm=inner)
    results, output = _run(agent, "Why do zebras have stripes?")
    assert output == "[S1]"
    (queried,) = results
    assert queried.tool_name == "rag_query"
    hits = _out(queried)["hits"]
    assert [h["label"] for h in hits] == ["S1", "S2"][: len(hits)] and hits
    assert hits[0]["source"] == "documents/zebra.md" and "stripes" in hits[0]["text"]
    # the ReAct prompt the model saw describes the tool's parameters
    prompt = inner.calls[0][0].content or ""
    assert "rag_query" in prompt and "How many excerpts to return at most" in prompt
