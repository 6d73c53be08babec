"""Offline stand-ins for a chat LLM and helpers shared by the chat tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM

from fakes import DOCS, P, T
from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig

#: A scripted step: the messages the LLM received → the assistant message to answer with.
Step = Callable[[list[ChatMessage]], ChatMessage]


class RecordingLLM(MockFunctionCallingLLM):
    """A function-calling chat LLM that records every input and answers from a script.

    Without a script it answers ``"ok"``; with one, each chat call runs the next step (the last
    step repeats when the script is exhausted).
    """

    def __init__(self, steps: Sequence[Step] = (), **kwargs: Any) -> None:
        super().__init__(is_chat_model=True, **kwargs)
        self._calls: list[list[ChatMessage]] = []
        self._steps = list(steps)
        self.response_generator = self._respond

    @classmethod
    def class_name(cls) -> str:
        return "RecordingLLM"

    @property
    def calls(self) -> list[list[ChatMessage]]:
        """The message lists of every chat call, in order."""
        return self._calls

    def _respond(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self._calls.append(list(messages))
        if not self._steps:
            return ChatMessage(role=MessageRole.ASSISTANT, content="ok")
        step = self._steps[min(len(self._calls), len(self._steps)) - 1]
        return step(list(messages))


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> ChatMessage:
    """An assistant message that calls tools (name, kwargs), in order."""
    blocks = [
        ToolCallBlock(tool_call_id=f"call-{i}-{name}", tool_name=name, tool_kwargs=kwargs)
        for i, (name, kwargs) in enumerate(calls)
    ]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)


def answer(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def tool_results(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The JSON results of the tool messages after the last assistant tool call."""
    out: list[dict[str, Any]] = []
    for m in reversed(messages):
        if m.role != MessageRole.TOOL:
            break
        out.append(json.loads(m.content or "{}"))
    return list(reversed(out))


def system_texts(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.role == MessageRole.SYSTEM]


def rag_context_index(messages: Sequence[ChatMessage]) -> int | None:
    """Index of the ``<rag-context>`` system message, or None."""
    for i, m in enumerate(messages):
        if m.role == MessageRole.SYSTEM and "<rag-context>" in (m.content or ""):
            return i
    return None


def open_app(tmp_path: Path, **config: Any) -> RagApp:
    """An app on its own store (for module-scoped fixtures the shared factory cannot serve)."""
    base: dict[str, Any] = {
        "store": f"sqlite:///{tmp_path / 'rag.db'}",
        "node_id": "test-node",
        "indexer_initial_delay_s": 0.0,
        "retry_backoff_s": 0.0,
    }
    return RagApp.open(EngineConfig(**{**base, **config}))


def index_docs(
    app: RagApp,
    docs: dict[str, str] | None = None,
    *,
    tenant: str = T,
    project: str = P,
) -> None:
    """Bring the project, save the documents and run the indexer until it is idle."""
    app.bring(tenant, project)
    for path, text in (DOCS if docs is None else docs).items():
        app.document_saved(tenant, project, path, text)
    result = app.scheduler.run_until_idle(timeout_s=30)
    assert result.failed == 0
