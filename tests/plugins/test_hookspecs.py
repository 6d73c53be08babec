"""Meta-tests of the pluggy host contract: every hook specified, typed, documented on
``docs/plugin-hooks.md`` (as datasette checks its plugin hooks page) and called by the app;
every default plugin implements only hooks that exist."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pluggy
import pytest

from vancetope_rag import hookspecs
from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins import DEFAULT_PLUGINS
from vancetope_rag.domain.records import ProjectStatus
from vancetope_rag.hookspecs import PROJECT_NAME, hookimpl
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams
from vancetope_rag.tools import TOOL_NAMES

AppFactory = Callable[..., RagApp]

TENANT, PROJECT = "t1", "p1"
ZEBRA = "Zebras graze on the savanna grass. Zebra stripes confuse biting flies."
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugin-hooks.md"

HOOKSPECS: dict[str, Callable[..., Any]] = {
    name: fn
    for name, fn in vars(hookspecs).items()
    if callable(fn) and hasattr(fn, f"{PROJECT_NAME}_spec")
}


def _spec_opts(fn: Callable[..., Any]) -> dict[str, Any]:
    opts: dict[str, Any] = getattr(fn, f"{PROJECT_NAME}_spec")
    return opts


# -- the specs themselves ----------------------------------------------------------------


def test_hookspecs_found() -> None:
    assert set(HOOKSPECS) == {
        "project_bring",
        "project_suspend",
        "project_close",
        "document_saved",
        "summary_saved",
        "document_deleted",
        "pre_turn",
        "register_tools",
        "register_embedding_providers",
        "register_rerankers",
        "register_extractors",
        "context_template",
    }


@pytest.mark.parametrize("name", sorted(HOOKSPECS))
def test_hookspec_is_documented_and_typed(name: str) -> None:
    fn = HOOKSPECS[name]
    doc = inspect.getdoc(fn)
    assert doc and len(doc) > 30, f"{name} needs a docstring saying what it is for"
    if _spec_opts(fn).get("firstresult"):
        assert "firstresult" in doc, f"{name} is firstresult: its docstring must say so"
    signature = inspect.signature(fn)
    for param in signature.parameters.values():
        assert param.annotation is not inspect.Parameter.empty, f"{name}({param.name})"
    assert signature.return_annotation is not inspect.Signature.empty, name


# -- the plugin hooks page ----------------------------------------------------------------

_HOOK_HEADING = re.compile(r"^### `(?P<name>\w+)\((?P<args>[^)]*)\)`\s*$", re.MULTILINE)
_ANY_HEADING = re.compile(r"^#{1,3} ", re.MULTILINE)


def _documented_hooks(text: str) -> list[tuple[str, list[str], str]]:
    """(hook name, argument names, section text) for every ``### `hook(args)``` heading."""
    found = []
    for match in _HOOK_HEADING.finditer(text):
        following = _ANY_HEADING.search(text, match.end())
        section = text[match.end() : following.start() if following else len(text)]
        args = [a.strip() for a in match.group("args").split(",") if a.strip()]
        found.append((match.group("name"), args, section))
    return found


DOCUMENTED = _documented_hooks(DOCS_PAGE.read_text(encoding="utf-8"))


def test_the_page_describes_every_hook_and_no_other() -> None:
    names = [name for name, _, _ in DOCUMENTED]
    assert len(names) == len(set(names)), f"a hook is described twice: {sorted(names)}"
    missing = sorted(set(HOOKSPECS) - set(names))
    unknown = sorted(set(names) - set(HOOKSPECS))
    assert not missing, f"docs/plugin-hooks.md does not describe {missing}"
    assert not unknown, f"docs/plugin-hooks.md describes hooks that do not exist: {unknown}"


@pytest.mark.parametrize(("name", "args", "section"), DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_the_page_matches_the_hookspec(name: str, args: list[str], section: str) -> None:
    if name not in HOOKSPECS:
        pytest.fail(f"docs/plugin-hooks.md describes {name}, which is not a hook")
    fn = HOOKSPECS[name]
    assert args == list(inspect.signature(fn).parameters), f"arguments of {name} on the page"
    for field in ("Phase", "Called", "Arguments", "Returns", "firstresult", "Default plugin"):
        assert f"- **{field}:**" in section, f"the section of {name} lacks '{field}'"
    firstresult = "yes" if _spec_opts(fn).get("firstresult") else "no"
    assert f"- **firstresult:** {firstresult}" in section, f"firstresult of {name} on the page"


def test_the_page_names_every_default_plugin() -> None:
    text = DOCS_PAGE.read_text(encoding="utf-8")
    for module in DEFAULT_PLUGINS:
        short = module.removeprefix("vancetope_rag.")
        assert f"`{short}`" in text, f"docs/plugin-hooks.md does not list {short}"


# -- the default plugins -------------------------------------------------------------------


@pytest.mark.parametrize("module_name", DEFAULT_PLUGINS)
def test_default_plugin_implements_only_known_hooks(module_name: str) -> None:
    module = importlib.import_module(module_name)
    pm = pluggy.PluginManager(PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    pm.register(module, name=module_name)
    pm.check_pending()  # raises for an implementation of a hook that does not exist
    implemented = {
        name for name, value in vars(module).items() if hasattr(value, f"{PROJECT_NAME}_impl")
    }
    assert implemented, f"{module_name} implements no hook"
    assert implemented <= set(HOOKSPECS)


def test_every_hook_has_a_default_or_is_an_extension_point() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    without_default = {name for name in HOOKSPECS if not getattr(pm.hook, name).get_hookimpls()}
    # context_template is for plugins only: without one the package's template is used.
    assert without_default == {"context_template"}


# -- the app calls every hook --------------------------------------------------------------


class Spy:
    """Implements every hook, records the calls and changes nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def project_bring(self, tenant_id: str, project_id: str) -> None:
        self.calls.append("project_bring")

    @hookimpl
    def project_suspend(self, tenant_id: str, project_id: str) -> None:
        self.calls.append("project_suspend")

    @hookimpl
    def project_close(self, tenant_id: str, project_id: str) -> None:
        self.calls.append("project_close")

    @hookimpl
    def document_saved(self, path: str) -> None:
        self.calls.append("document_saved")

    @hookimpl
    def summary_saved(self, path: str) -> None:
        self.calls.append("summary_saved")

    @hookimpl
    def document_deleted(self, path: str) -> None:
        self.calls.append("document_deleted")

    @hookimpl
    def pre_turn(self, user_messages: Sequence[str]) -> None:
        self.calls.append("pre_turn")

    @hookimpl
    def register_tools(self, register: Callable[[Any], None]) -> None:
        self.calls.append("register_tools")

    @hookimpl
    def register_embedding_providers(self, register: Callable[[Any], None]) -> None:
        self.calls.append("register_embedding_providers")

    @hookimpl
    def register_rerankers(self, register: Callable[[Any], None]) -> None:
        self.calls.append("register_rerankers")

    @hookimpl
    def register_extractors(self, register: Callable[..., None]) -> None:
        self.calls.append("register_extractors")

    @hookimpl
    def context_template(self) -> None:
        self.calls.append("context_template")


def test_every_hook_is_called_through_the_app(make_app: AppFactory) -> None:
    spy = Spy()
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(spy)
    pm.check_pending()
    app = make_app(plugins=pm)
    # RagApp.open asks the extension hooks
    opened = [
        "register_embedding_providers",
        "register_rerankers",
        "register_extractors",
        "context_template",
    ]
    assert spy.calls == opened

    app.settings.set(TENANT, None, "rag.autoInject.enabled", "ON")
    app.bring(TENANT, PROJECT)
    project = app.store.control.get_project(TENANT, PROJECT)
    assert project is not None and project.status == ProjectStatus.RUNNING
    rag = app.project_rags.find_default_rag(TENANT, PROJECT)
    assert rag is not None

    doc = app.document_saved(TENANT, PROJECT, "documents/zebra.md", ZEBRA)
    assert doc is not None and doc.rag_dirty  # the default plugin's result came through
    doc = app.summary_saved(TENANT, PROJECT, "documents/zebra.md", "Zebras, in short.")
    assert doc is not None and doc.summary == "Zebras, in short."
    app.scheduler.run_until_idle(timeout_s=30)
    assert app.rags.chunk_count(rag) == 2  # the content chunk and the summary chunk

    assert app.pre_turn(TENANT, PROJECT, ["zebra stripes"], RagParams(min_score=0.05))
    assert len(app.tools(TENANT, PROJECT)) == len(TOOL_NAMES)  # the rag_* tools and files_visualize

    app.document_deleted(TENANT, PROJECT, "documents/zebra.md")
    assert app.documents.get_by_path(TENANT, PROJECT, "documents/zebra.md") is None
    assert app.rags.chunk_count(rag) == 0

    app.suspend(TENANT, PROJECT)
    assert app.project_rags.find_default_rag(TENANT, PROJECT) == rag  # kept on suspend
    app.close_project(TENANT, PROJECT)
    assert app.project_rags.find_default_rag(TENANT, PROJECT) is None  # disposed on close

    assert set(spy.calls) == set(HOOKSPECS)
    assert spy.calls[len(opened) :] == [
        "project_bring",
        "document_saved",
        "summary_saved",
        "pre_turn",
        "register_tools",
        "document_deleted",
        "project_suspend",
        "project_close",
    ]
