"""``rag/<model>``: any llm model, with the project's ``<rag-context>`` block in each turn.

The wrapper runs ``pre_turn`` on the text of every prompt (in ``llm chat``: every turn) and
hands the wrapped model the same prompt with the block added to its system prompt. Only the
turn being answered carries a block: the conversation's earlier turns are passed on as llm
recorded them, so old blocks never pile up in the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import llm

from llm_vancetope_rag.host import describe_error, turn_messages

PREFIX = "rag/"


def _block(prompt: llm.Prompt) -> list[str]:
    text = prompt.prompt
    if not text.strip():  # a chain's tool-results step: no new user text to retrieve for
        return []
    try:
        return turn_messages(text)
    except Exception as exc:  # a bad tenant id, an unopenable store: say so, answer nothing
        raise llm.ModelError(f"vancetope-rag: {describe_error(exc)}") from exc


def _with_block(prompt: llm.Prompt, inner: Any, block: list[str]) -> llm.Prompt:
    """``prompt`` for ``inner``, the block after the system prompt (both in ``system`` and in
    the message list, whichever the wrapped model reads)."""
    messages = list(prompt.messages)
    if block:
        last_user = max(
            (i for i, m in enumerate(messages) if m.role == "user"), default=len(messages)
        )
        messages[last_user:last_user] = [llm.system(text) for text in block]
    # llm's Prompt has no annotations on __init__
    return llm.Prompt(  # type: ignore[no-untyped-call]
        prompt.prompt,
        inner,
        attachments=prompt.attachments,
        system=_combined_system(prompt.system, block) or None,
        prompt_json=prompt.prompt_json,
        options=prompt.options,
        schema=prompt.schema,
        tools=prompt.tools,
        tool_results=prompt.tool_results,
        messages=messages,
        hide_reasoning=prompt.hide_reasoning,
    )


def _copy_traits(wrapper: Any, inner: Any) -> None:
    wrapper.model_id = PREFIX + inner.model_id
    for trait in ("can_stream", "attachment_types", "supports_schema", "supports_tools"):
        setattr(wrapper, trait, getattr(inner, trait))
    # Options are validated against the wrapper's class: take the wrapped model's.
    wrapper.Options = inner.Options
    wrapper.needs_key = getattr(inner, "needs_key", None)
    wrapper.key_env_var = getattr(inner, "key_env_var", None)


def _combined_system(system: str | None, block: list[str]) -> str:
    # The block after the user's system prompt, as pre_turn's message follows the host's.
    return "\n\n".join(b.strip() for b in [system or "", *block] if b.strip())


class RagModel(llm.Model):
    """A sync model that needs no key (or reads its own)."""

    def __init__(self, inner: llm.Model) -> None:
        self.inner = inner
        _copy_traits(self, inner)

    def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.Response,
        conversation: llm.Conversation | None,
    ) -> Iterator[Any]:
        inner_prompt = _with_block(prompt, self.inner, _block(prompt))
        yield from self.inner.execute(inner_prompt, stream, response, conversation)


class RagKeyModel(llm.KeyModel):
    """A sync model that takes llm's key (``--key``, ``llm keys set``, its env var)."""

    def __init__(self, inner: llm.KeyModel) -> None:
        self.inner = inner
        _copy_traits(self, inner)

    def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.Response,
        conversation: llm.Conversation | None,
        key: str | None,
    ) -> Iterator[Any]:
        inner_prompt = _with_block(prompt, self.inner, _block(prompt))
        yield from self.inner.execute(inner_prompt, stream, response, conversation, key)


async def _ablock(prompt: llm.Prompt) -> list[str]:
    # pre_turn embeds the query and reads the store: off the event loop
    return await asyncio.to_thread(_block, prompt)


class RagAsyncModel(llm.AsyncModel):
    """The async twin of :class:`RagModel`."""

    def __init__(self, inner: llm.AsyncModel) -> None:
        self.inner = inner
        _copy_traits(self, inner)

    async def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.AsyncResponse,
        conversation: llm.AsyncConversation | None,
    ) -> AsyncGenerator[Any, None]:
        inner_prompt = _with_block(prompt, self.inner, await _ablock(prompt))
        async for chunk in self.inner.execute(inner_prompt, stream, response, conversation):
            yield chunk


class RagAsyncKeyModel(llm.AsyncKeyModel):
    """The async twin of :class:`RagKeyModel`."""

    def __init__(self, inner: llm.AsyncKeyModel) -> None:
        self.inner = inner
        _copy_traits(self, inner)

    async def execute(
        self,
        prompt: llm.Prompt,
        stream: bool,
        response: llm.AsyncResponse,
        conversation: llm.AsyncConversation | None,
        key: str | None,
    ) -> AsyncGenerator[Any, None]:
        inner_prompt = _with_block(prompt, self.inner, await _ablock(prompt))
        async for chunk in self.inner.execute(inner_prompt, stream, response, conversation, key):
            yield chunk


def wrap(model: Any) -> Any:
    """The ``rag/`` wrapper of an llm model (sync or async, with or without a key)."""
    if isinstance(model, llm.KeyModel):
        return RagKeyModel(model)
    if isinstance(model, llm.Model):
        return RagModel(model)
    if isinstance(model, llm.AsyncKeyModel):
        return RagAsyncKeyModel(model)
    if isinstance(model, llm.AsyncModel):
        return RagAsyncModel(model)
    raise TypeError(f"cannot wrap {model!r}: not an llm model")
