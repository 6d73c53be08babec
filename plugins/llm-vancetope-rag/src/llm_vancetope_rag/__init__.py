"""llm plugin: a vancetope-rag project's documents in llm prompts, chats, tools and embeddings.

- ``--sf rag:QUESTION`` adds the ``<rag-context>`` block a turn asking QUESTION would get;
- ``rag/<model>`` wraps every model: each prompt (each ``llm chat`` turn) gets its block;
- ``llm rag status | import | index | query``; the ``rag_*`` tools; ``vancetope-rag-embedded``.

Only llm and click are imported at load (llm imports every plugin on every command); the
store, LlamaIndex and the model load when a hook's result is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import llm

from llm_vancetope_rag.commands import rag
from llm_vancetope_rag.embeddings import EmbeddedModel
from llm_vancetope_rag.host import describe_error, turn_messages
from llm_vancetope_rag.models import PREFIX, wrap

__all__ = ["load_rag_fragment"]

FRAGMENT_PREFIX = "rag"


def load_rag_fragment(question: str) -> list[llm.Fragment]:
    """``rag:QUESTION``: exactly the system messages ``pre_turn`` gives a turn asking
    QUESTION, one fragment each (none when AutoInject is off or nothing matches)."""
    if not question.strip():
        raise ValueError("say what to retrieve for: rag:QUESTION")
    try:
        messages = turn_messages(question)
    except Exception as exc:  # llm shows it as "Could not load fragment rag:…: <message>"
        raise ValueError(describe_error(exc)) from exc
    source = f"{FRAGMENT_PREFIX}:{question}"
    return [llm.Fragment(m, source) for m in messages]  # type: ignore[no-untyped-call]


@llm.hookimpl
def register_fragment_loaders(register: Callable[[str, Any], None]) -> None:
    register(FRAGMENT_PREFIX, load_rag_fragment)


# trylast: runs after every other plugin registered its models, so each one gets a wrapper.
@llm.hookimpl(trylast=True)
def register_models(register: Callable[..., None], model_aliases: list[Any]) -> None:
    for entry in list(model_aliases):
        model, async_model = entry.model, entry.async_model
        if model is None or model.model_id.startswith(PREFIX):
            continue
        register(
            wrap(model),
            wrap(async_model) if async_model is not None else None,
            aliases=[PREFIX + alias for alias in entry.aliases],
        )


@llm.hookimpl
def register_commands(cli: click.Group) -> None:
    cli.add_command(rag)


@llm.hookimpl
def register_tools(register: Callable[[Any], None]) -> None:
    from llm_vancetope_rag.tools import rag_tools

    for tool in rag_tools():
        register(tool)


@llm.hookimpl
def register_embedding_models(register: Callable[[Any], None]) -> None:
    register(EmbeddedModel())
