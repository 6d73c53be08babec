"""Registers the ``rag_*`` tools (spec §9) for every project."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.tools import build_tools

if TYPE_CHECKING:
    from vancetope_rag.hookspecs import HostApp


@hookimpl
def register_tools(
    register: Callable[[Any], None], app: HostApp, tenant_id: str, project_id: str
) -> None:
    for tool in build_tools(
        app, tenant_id, project_id, workspace_root=app.workspace_root(tenant_id, project_id)
    ):
        register(tool)
