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


class _Wrapper:
    """What the four wrappers share: the wrapped model and its traits. ``execute`` passes
    llm's arguments (stream, response, conversation and, for keyed models, the key) on as
    llm gave them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        _copy_traits(self, inner)


class _SyncWrapper(_Wrapper):
    def execute(self, prompt: llm.Prompt, *args: Any, **kwargs: Any) -> Iterator[Any]:
        inner_prompt = _with_block(prompt, self.inner, _block(prompt))
        yield from self.inner.execute(inner_prompt, *args, **kwargs)


class _AsyncWrapper(_Wrapper):
    async def execute(
        self, prompt: llm.Prompt, *args: Any, **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        # pre_turn embeds the query and reads the store: off the event loop
        block = await asyncio.to_thread(_block, prompt)
        async for chunk in self.inner.execute(
            _with_block(prompt, self.inner, block), *args, **kwargs
        ):
            yield chunk


class RagModel(_SyncWrapper, llm.Model):
    """A sync model that needs no key (or reads its own)."""


class RagKeyModel(_SyncWrapper, llm.KeyModel):
    """A sync model that takes llm's key (``--key``, ``llm keys set``, its env var)."""


class RagAsyncModel(_AsyncWrapper, llm.AsyncModel):
    """The async twin of :class:`RagModel`."""


class RagAsyncKeyModel(_AsyncWrapper, llm.AsyncKeyModel):
    """The async twin of :class:`RagKeyModel`."""


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
