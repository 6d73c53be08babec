"""The ``rag_*`` tools as llm tools: our names, descriptions and argument schemas.

Each call runs our own tool, bound to the project of ``VANCETOPE_RAG_*`` at call time, and
returns its JSON result as the model sees it from any host (an error is an ``{"error": …}``
result the model can act on, never a crash of the chain).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import llm

from llm_vancetope_rag.host import app_for, target_from_env


def _runner(name: str) -> Callable[..., str]:
    def run(**arguments: Any) -> str:
        target = target_from_env()
        tools = app_for(target.store).tools(target.tenant, target.project)
        tool = next(t for t in tools if t.metadata.name == name)
        return str(tool.call(**arguments).content)

    run.__name__ = name
    return run


def rag_tools() -> list[llm.Tool]:
    """One llm tool per ``rag_*`` tool (imports LlamaIndex: only when llm asks for tools)."""
    from vancetope_rag.tools import TOOL_NAMES
    from vancetope_rag.tools.schemas import TOOL_SPECS

    tools = []
    for name in TOOL_NAMES:
        schema, description = TOOL_SPECS[name]
        tools.append(
            llm.Tool(
                name=name,
                description=description,
                input_schema=schema.model_json_schema(),
                implementation=_runner(name),
            )
        )
    return tools
