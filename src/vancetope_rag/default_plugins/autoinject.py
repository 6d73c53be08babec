"""The pre-turn hook → RagAutoInjectService (spec §5)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vancetope_rag.hookspecs import hookimpl

if TYPE_CHECKING:
    from vancetope_rag.hookspecs import HostApp
    from vancetope_rag.recipes import RagParams


@hookimpl
def pre_turn(
    app: HostApp,
    tenant_id: str,
    project_id: str,
    user_messages: Sequence[str],
    recipe: RagParams | None,
    tools: Sequence[Any] | None,
) -> list[str] | None:
    block = app.autoinject.context_block(tenant_id, project_id, user_messages, recipe, tools)
    return [block] if block else None
