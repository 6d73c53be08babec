"""Plugin manager factory: hookspecs, default plugins, third-party entry points."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import pluggy

from vancetope_rag import hookspecs
from vancetope_rag.default_plugins import DEFAULT_PLUGINS
from vancetope_rag.hookspecs import PROJECT_NAME

#: Entry-point group third-party plugins declare in their pyproject.toml.
ENTRYPOINT_GROUP = "vancetope_rag"


def get_plugin_manager(
    *, load_entrypoints: bool = True, allowed: Iterable[str] | None = None
) -> pluggy.PluginManager:
    """A fresh plugin manager with the default plugins and (optionally) installed plugins.

    Args:
        load_entrypoints: Load plugins from the ``vancetope_rag`` entry-point group.
        allowed: Entry-point names to load (None = all installed; empty = none). The CLI and
            the app take it from ``VANCETOPE_RAG_PLUGINS`` (comma-separated).
    """
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for module_name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(module_name), name=module_name)
    if load_entrypoints:
        if allowed is None:
            pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP)
        else:
            for name in allowed:
                if name.strip():
                    pm.load_setuptools_entrypoints(ENTRYPOINT_GROUP, name=name.strip())
    pm.check_pending()  # a misspelled hookimpl fails loudly here
    return pm


def plugin_names(pm: pluggy.PluginManager) -> list[str]:
    """Names of the registered plugins, for diagnostics."""
    return sorted(name for name, _ in pm.list_name_plugin())
