"""Which project llm talks to, and the one app per store this process opens for it.

Tenant, project and store come from the environment our CLI reads
(``VANCETOPE_RAG_TENANT`` / ``_PROJECT`` / ``_STORE``), read at each call: llm imports the
plugin on every command, and nothing here may open a store or load a model until a prompt,
fragment, tool or command needs it.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vancetope_rag import RagApp

ENV_STORE = "VANCETOPE_RAG_STORE"
ENV_TENANT = "VANCETOPE_RAG_TENANT"
ENV_PROJECT = "VANCETOPE_RAG_PROJECT"
DEFAULT_ID = "default"  # the CLI's default tenant and project

_LOCK = threading.Lock()
_APPS: dict[str | None, RagApp] = {}


@dataclass(frozen=True)
class Target:
    """The store, tenant and project a call works on."""

    store: str | None
    tenant: str
    project: str


def target_from_env(environ: Mapping[str, str] | None = None) -> Target:
    """The target as ``vancetope-rag`` reads it: an unset or empty variable means the default
    (click's rule for ``envvar``); ids are checked before any store is opened.

    Raises:
        InvalidInputError: The tenant or project id breaks the id rule; the message names it.
    """
    env = os.environ if environ is None else environ
    from vancetope_rag import RagApp

    target = Target(
        store=env.get(ENV_STORE) or None,
        tenant=env.get(ENV_TENANT) or DEFAULT_ID,
        project=env.get(ENV_PROJECT) or DEFAULT_ID,
    )
    RagApp.check_ids(target.tenant, target.project)
    return target


def app_for(store: str | None) -> RagApp:
    """The app of ``store`` (None: the engine configuration's default), opened once."""
    from vancetope_rag import EngineConfig, RagApp

    with _LOCK:
        app = _APPS.get(store)
        if app is None:
            app = RagApp.open(EngineConfig(store=store) if store else EngineConfig())
            if not _APPS:
                atexit.register(close_apps)
            _APPS[store] = app
        return app


def close_apps() -> None:
    """Close every app this process opened (at exit; tests between stores)."""
    with _LOCK:
        apps = list(_APPS.values())
        _APPS.clear()
    for app in apps:
        app.close()


def turn_messages(user_text: str) -> list[str]:
    """The system messages ``pre_turn`` gives a turn whose user message is ``user_text``
    (ON/OFF/AUTO resolved by the project's settings, as for any turn): usually the one
    ``<rag-context>`` block, or nothing.

    Raises:
        ProjectNotFoundError: The environment names a project the store does not know
            (the message suggests the close ones).
    """
    target = target_from_env()
    app = app_for(target.store)
    # a mistyped project would give every turn an empty block, without a word: name it
    app.lifecycle.require_project(target.tenant, target.project, named_by=ENV_PROJECT)
    return app.pre_turn(target.tenant, target.project, [user_text])


def describe_error(exc: Exception) -> str:
    """A RagError's message with registered secrets masked, as our CLI shows it."""
    from vancetope_rag import RagError
    from vancetope_rag.secrets import redact

    return redact(exc.message if isinstance(exc, RagError) else str(exc))
