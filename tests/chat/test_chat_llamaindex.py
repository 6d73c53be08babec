"""RagContextLLM: the <rag-context> block reaches the LLM input in the right place, every turn."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from chat_fakes import RecordingLLM, answer, index_docs, rag_context_index, system_texts
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import ContextChatEngine, SimpleChatEngine
from llama_index.core.llms.mock import MockLLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.integrations import RagContextLLM as ReExported
from vancetope_rag.integrations.llamaindex.llm import (
    INJECTED_KEY,
    RagContextLLM,
    inject_system_messages,
    last_user_turn,
)
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams, parse_recipe

SYSTEM = "You are the handbook assistant."
QUESTION = "How many vacation days per year do employees get?"


def _msg(role: MessageRole, text: str, **extra: Any) -> ChatMessage:
    return ChatMessage(role=role, content=text, additional_kwargs=extra)


def _roles(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.role.value for m in messages]


@pytest.fixture
def chat_app(app: RagApp) -> RagApp:
    """Documents indexed with the hashing provider, AutoInject ON for the tenant."""
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.1)
    index_docs(app)
    return app


# -- inject_system_messages (pure) -------------------------------------------------------


def test_inject_goes_after_leading_system_messages() -> None:
    messages = [
        _msg(MessageRole.SYSTEM, "host prompt"),
        _msg(MessageRole.SYSTEM, "memory block"),
        _msg(MessageRole.USER, "earlier question"),
        _msg(MessageRole.ASSISTANT, "earlier answer"),
        _msg(MessageRole.USER, "now"),
    ]
    out = inject_system_messages(messages, ["<rag-context>A</rag-context>", "extra"])
    assert [m.content for m in out] == [
        "host prompt",
        "memory block",
        "<rag-context>A</rag-context>",
        "extra",
        "earlier question",
        "earlier answer",
        "now",
    ]
    assert out[2].role == out[3].role == MessageRole.SYSTEM
    assert out[2].additional_kwargs == {INJECTED_KEY: True}
    assert len(messages) == 5  # input untouched


@pytest.mark.parametrize(
    ("roles", "expected_at"),
    [
        ([], 0),
        ([MessageRole.USER], 0),
        ([MessageRole.SYSTEM], 1),
        ([MessageRole.DEVELOPER, MessageRole.SYSTEM, MessageRole.USER], 2),
        # only the *leading* system part counts: a later system message stays where it is
        ([MessageRole.SYSTEM, MessageRole.USER, MessageRole.SYSTEM, MessageRole.USER], 1),
        ([MessageRole.ASSISTANT, MessageRole.USER], 0),
    ],
)
def test_inject_position(roles: list[MessageRole], expected_at: int) -> None:
    messages = [_msg(r, f"m{i}") for i, r in enumerate(roles)]
    out = inject_system_messages(messages, ["BLOCK"])
    assert [m.content for m in out].index("BLOCK") == expected_at
    assert [m for m in out if m.content != "BLOCK"] == messages


def test_inject_without_blocks_and_blank_blocks_is_identity() -> None:
    messages = [_msg(MessageRole.SYSTEM, "s"), _msg(MessageRole.USER, "u")]
    assert inject_system_messages(messages, []) == messages
    assert inject_system_messages(messages, ["", "  \n"]) == messages


def test_inject_replaces_earlier_injected_messages() -> None:
    first = inject_system_messages(
        [_msg(MessageRole.SYSTEM, "s"), _msg(MessageRole.USER, "u")], ["OLD"]
    )
    again = inject_system_messages(first, ["NEW"])
    assert [m.content for m in again] == ["s", "NEW", "u"]
    assert [m.content for m in inject_system_messages(first, [])] == ["s", "u"]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([], []),
        ([(MessageRole.SYSTEM, "s")], []),
        ([(MessageRole.USER, "a")], ["a"]),
        ([(MessageRole.USER, "a"), (MessageRole.USER, "b")], ["a", "b"]),
        # an earlier turn is not part of this one
        (
            [
                (MessageRole.USER, "old"),
                (MessageRole.ASSISTANT, "reply"),
                (MessageRole.USER, "new1"),
                (MessageRole.USER, "new2"),
            ],
            ["new1", "new2"],
        ),
        # an agent's tool round trip inside the turn does not end it
        (
            [
                (MessageRole.USER, "q"),
                (MessageRole.ASSISTANT, ""),
                (MessageRole.TOOL, "{}"),
            ],
            ["q"],
        ),
        ([(MessageRole.USER, " "), (MessageRole.USER, "x")], ["x"]),
    ],
)
def test_last_user_turn(messages: list[tuple[MessageRole, str]], expected: list[str]) -> None:
    assert last_user_turn([_msg(r, t) for r, t in messages]) == expected


def test_reexported_from_package() -> None:
    assert ReExported is RagContextLLM


# -- RagContextLLM -----------------------------------------------------------------------


def test_chat_puts_block_after_system_and_before_user(chat_app: RagApp) -> None:
    inner = RecordingLLM()
    llm = RagContextLLM(inner, chat_app, T, P)
    response = llm.chat([_msg(MessageRole.SYSTEM, SYSTEM), _msg(MessageRole.USER, QUESTION)])
    assert response.message.content == "ok"
    (sent,) = inner.calls
    assert _roles(sent) == ["system", "system", "user"]
    assert sent[0].content == SYSTEM
    assert rag_context_index(sent) == 1
    assert "documents/holiday.md" in (sent[1].content or "")
    assert sent[2].content == QUESTION


def test_autoinject_off_adds_nothing(chat_app: RagApp) -> None:
    chat_app.settings.set(T, P, "rag.autoInject.enabled", "OFF")
    inner = RecordingLLM()
    llm = RagContextLLM(inner, chat_app, T, P)
    llm.chat([_msg(MessageRole.SYSTEM, SYSTEM), _msg(MessageRole.USER, QUESTION)])
    assert _roles(inner.calls[0]) == ["system", "user"]
    assert rag_context_index(inner.calls[0]) is None


def test_recipe_off_wins_over_setting_on(chat_app: RagApp) -> None:
    recipe = parse_recipe({"name": "discuss", "params": {"rag": {"autoInject": "OFF"}}}).rag
    inner = RecordingLLM()
    RagContextLLM(inner, chat_app, T, P, recipe=recipe).chat([_msg(MessageRole.USER, QUESTION)])
    assert rag_context_index(inner.calls[0]) is None


def test_simple_chat_engine_every_turn(chat_app: RagApp) -> None:
    inner = RecordingLLM()
    llm = RagContextLLM(inner, chat_app, T, P)
    engine = SimpleChatEngine.from_defaults(llm=llm, system_prompt=SYSTEM)
    assert str(engine.chat(QUESTION)) == "ok"
    assert str(engine.chat("And what about zebra stripes?")) == "ok"
    first, second = inner.calls
    assert _roles(first) == ["system", "system", "user"]
    assert first[0].content == SYSTEM and rag_context_index(first) == 1
    # turn 2: system prompt, fresh block, then the history and the new question
    assert _roles(second) == ["system", "system", "user", "assistant", "user"]
    assert rag_context_index(second) == 1
    assert "documents/zebra.md" in (second[1].content or "")
    assert second[-1].content == "And what about zebra stripes?"
    # the block is LLM input only: it is not written into the engine's memory
    assert all("<rag-context>" not in (m.content or "") for m in engine.chat_history)


def test_simple_chat_engine_stream_and_async(chat_app: RagApp) -> None:
    inner = RecordingLLM()
    engine = SimpleChatEngine.from_defaults(
        llm=RagContextLLM(inner, chat_app, T, P), system_prompt=SYSTEM
    )
    streamed = engine.stream_chat(QUESTION)
    assert "".join(streamed.response_gen) == "ok"

    async def turns() -> None:
        await engine.achat(QUESTION)
        response = await engine.astream_chat(QUESTION)
        assert "".join([d async for d in response.async_response_gen()]) == "ok"

    asyncio.run(turns())
    assert len(inner.calls) == 3
    for sent in inner.calls:
        assert sent[0].content == SYSTEM
        assert rag_context_index(sent) == 1
        assert sent[-1].role == MessageRole.USER


def test_direct_stream_and_async_calls(chat_app: RagApp) -> None:
    inner = RecordingLLM()
    llm = RagContextLLM(inner, chat_app, T, P)
    messages = [_msg(MessageRole.USER, QUESTION)]
    assert [r.delta for r in llm.stream_chat(messages)] == ["ok"]

    async def calls() -> None:
        assert (await llm.achat(messages)).message.content == "ok"
        assert [r.delta async for r in await llm.astream_chat(messages)] == ["ok"]

    asyncio.run(calls())
    assert len(inner.calls) == 3
    assert all(rag_context_index(sent) == 0 for sent in inner.calls)


class _Retriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text="retrieved by the host"), score=1.0)]


def test_context_chat_engine_keeps_its_context_first(chat_app: RagApp) -> None:
    inner = RecordingLLM()
    engine = ContextChatEngine.from_defaults(
        retriever=_Retriever(),
        llm=RagContextLLM(inner, chat_app, T, P),
        system_prompt=SYSTEM,
    )
    engine.chat(QUESTION)
    (sent,) = inner.calls
    assert _roles(sent) == ["system", "system", "user"]
    assert SYSTEM in (sent[0].content or "") and "retrieved by the host" in (sent[0].content or "")
    assert rag_context_index(sent) == 1


def test_complete_passes_through(chat_app: RagApp, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def spy(*args: object, **kwargs: object) -> list[str]:
        seen.append(args)
        return []

    monkeypatch.setattr(chat_app, "pre_turn", spy)
    llm = RagContextLLM(RecordingLLM(), chat_app, T, P)
    assert llm.complete("plain prompt").text == "plain prompt"
    assert "".join(r.delta or "" for r in llm.stream_complete("x")) == "x"
    assert asyncio.run(llm.acomplete("y")).text == "y"
    assert seen == []


def test_predict_uses_chat_for_chat_models(chat_app: RagApp) -> None:
    from llama_index.core.prompts import PromptTemplate

    inner = RecordingLLM()
    llm = RagContextLLM(inner, chat_app, T, P)
    assert llm.predict(PromptTemplate("{q}"), q=QUESTION) == "ok"
    assert rag_context_index(inner.calls[0]) == 0


def test_metadata_and_prompts_come_from_the_inner_llm(chat_app: RagApp) -> None:
    inner = RecordingLLM(system_prompt="inner system")
    llm = RagContextLLM(inner, chat_app, T, P)
    assert llm.metadata == inner.metadata
    assert llm.metadata.is_function_calling_model
    assert llm.system_prompt == "inner system"
    assert llm.callback_manager is inner.callback_manager
    assert llm.app is chat_app and llm.recipe is None
    plain = RagContextLLM(MockLLM(), chat_app, T, P)
    assert not plain.metadata.is_function_calling_model
    with pytest.raises(TypeError, match="does not support function calling"):
        plain.chat_with_tools([], user_msg="hi")


def test_chat_with_tools_injects_into_history(chat_app: RagApp) -> None:
    inner = RecordingLLM(steps=[lambda m: answer("fine")])
    llm = RagContextLLM(inner, chat_app, T, P)
    response = llm.chat_with_tools(
        [], user_msg=QUESTION, chat_history=[_msg(MessageRole.SYSTEM, SYSTEM)]
    )
    assert response.message.content == "fine"
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    (sent,) = inner.calls
    assert _roles(sent) == ["system", "system", "user"]
    assert rag_context_index(sent) == 1
    # no history at all: the block still precedes the user message
    llm.chat_with_tools([], user_msg=QUESTION)
    assert _roles(inner.calls[1]) == ["system", "user"]
    # the prepare-then-chat path of the base class injects exactly once
    kwargs = llm._prepare_chat_with_tools([], user_msg=QUESTION)
    llm.chat(**kwargs)
    assert _roles(inner.calls[2]) == ["system", "user"]


class _Boom:
    @hookimpl
    def pre_turn(self, **kwargs: Any) -> list[str] | None:
        raise RuntimeError("plugin bug")


def test_pre_turn_failure_never_breaks_the_turn(
    make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(_Boom())
    app = make_app(plugins=pm)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    index_docs(app)
    inner = RecordingLLM()
    llm = RagContextLLM(inner, app, T, P)
    with caplog.at_level(logging.WARNING, logger="vancetope_rag.integrations.llamaindex.llm"):
        assert llm.chat([_msg(MessageRole.USER, QUESTION)]).message.content == "ok"
        assert asyncio.run(llm.achat([_msg(MessageRole.USER, QUESTION)])).message.content == "ok"
    assert [_roles(c) for c in inner.calls] == [["user"], ["user"]]
    assert "pre_turn failed" in caplog.text and "plugin bug" in caplog.text


def test_recipe_params_reach_pre_turn(chat_app: RagApp) -> None:
    recipe = RagParams(template="{% for h in hits %}<rag-context>{{ h.label }}{% endfor %}")
    inner = RecordingLLM()
    RagContextLLM(inner, chat_app, T, P, recipe=recipe).chat([_msg(MessageRole.USER, QUESTION)])
    assert system_texts(inner.calls[0])[0].startswith("<rag-context>S1")


def test_semantic_turn_with_the_embedded_model(embedded_app: RagApp) -> None:
    """Real all-MiniLM-L6-v2: a paraphrase with no shared words still finds the document."""
    embedded_app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    index_docs(embedded_app)
    inner = RecordingLLM()
    engine = SimpleChatEngine.from_defaults(
        llm=RagContextLLM(inner, embedded_app, T, P), system_prompt=SYSTEM
    )
    engine.chat("How much paid leave do staff members receive annually?")
    (sent,) = inner.calls
    at = rag_context_index(sent)
    assert at == 1
    block = sent[1].content or ""
    assert "documents/holiday.md" in block
    assert "documents/cluster.md" not in block
