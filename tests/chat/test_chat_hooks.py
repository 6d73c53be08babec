"""Meta-tests of the pluggy host contract: every hook documented, typed and exercised."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import pluggy
import pytest
from chat_fakes import DOCS, PROJECT, TENANT, ProbeProvider, RecordingLLM, index_docs

from vancetope_rag import hookspecs
from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins import DEFAULT_PLUGINS
from vancetope_rag.domain.records import ProjectStatus
from vancetope_rag.extract import extract_text
from vancetope_rag.hookspecs import PROJECT_NAME, hookimpl
from vancetope_rag.integrations.llamaindex import RagContextLLM
from vancetope_rag.plugins import get_plugin_manager, plugin_names
from vancetope_rag.recipes import RagParams

AppFactory = Callable[..., RagApp]

HOOKSPECS: dict[str, Callable[..., Any]] = {
    name: fn
    for name, fn in vars(hookspecs).items()
    if callable(fn) and hasattr(fn, f"{PROJECT_NAME}_spec")
}


def _spec_opts(fn: Callable[..., Any]) -> dict[str, Any]:
    opts: dict[str, Any] = getattr(fn, f"{PROJECT_NAME}_spec")
    return opts


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
    def register_extractors(self, register: Callable[..., None]) -> None:
        self.calls.append("register_extractors")

    @hookimpl
    def context_template(self) -> None:
        self.calls.append("context_template")


class ThirdParty:
    """A plugin as another package would ship it: a pre-turn note, a provider, an extractor,
    and its own block template."""

    def __init__(self) -> None:
        self.provider = ProbeProvider()

    @hookimpl
    def pre_turn(self, user_messages: Sequence[str], recipe: RagParams | None) -> list[str]:
        return [f"<house-rules>{len(user_messages)} message(s)</house-rules>"]

    @hookimpl
    def register_embedding_providers(self, register: Callable[[Any], None]) -> None:
        register(self.provider)

    @hookimpl
    def register_extractors(self, register: Callable[..., None]) -> None:
        register(
            ("text/x-shout",), lambda data, path: data.decode().upper(), extensions=(".shout",)
        )


def _fresh(*plugins: object) -> pluggy.PluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


# -- the specs themselves ----------------------------------------------------------------


def test_hookspecs_found() -> None:
    assert set(HOOKSPECS) == {
        "project_bring",
        "project_suspend",
        "project_close",
        "document_saved",
        "document_deleted",
        "pre_turn",
        "register_tools",
        "register_embedding_providers",
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


def test_every_hook_is_called_through_the_app(make_app: AppFactory) -> None:
    spy = Spy()
    app = make_app(plugins=_fresh(spy))
    # RagApp.open asks the extension hooks
    opened = ["register_embedding_providers", "register_extractors", "context_template"]
    assert spy.calls == opened

    app.settings.set(TENANT, None, "rag.autoInject.enabled", "ON")
    app.bring(TENANT, PROJECT)
    project = app.store.control.get_project(TENANT, PROJECT)
    assert project is not None and project.status == ProjectStatus.RUNNING
    rag = app.project_rags.find_default_rag(TENANT, PROJECT)
    assert rag is not None

    doc = app.document_saved(TENANT, PROJECT, "documents/zebra.md", DOCS["documents/zebra.md"])
    assert doc is not None and doc.rag_dirty  # the default plugin's result came through
    app.scheduler.run_until_idle(timeout_s=30)
    assert app.rags.chunk_count(rag) == 1

    assert app.pre_turn(TENANT, PROJECT, ["zebra stripes"], RagParams(min_score=0.05))
    assert len(app.tools(TENANT, PROJECT)) == 8

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
        "pre_turn",
        "register_tools",
        "document_deleted",
        "project_suspend",
        "project_close",
    ]


# -- the plugin manager ------------------------------------------------------------------


def test_get_plugin_manager_is_fresh_each_call() -> None:
    first, second = get_plugin_manager(load_entrypoints=False), get_plugin_manager()
    assert first is not second
    assert set(DEFAULT_PLUGINS) <= set(plugin_names(first))
    assert set(DEFAULT_PLUGINS) <= set(plugin_names(second))
    spy = Spy()
    first.register(spy, name="spy")
    assert "spy" in plugin_names(first) and "spy" not in plugin_names(second)
    assert "spy" not in plugin_names(get_plugin_manager())


def test_entry_point_allow_list() -> None:
    assert "eml" not in plugin_names(get_plugin_manager(allowed=[]))
    assert "eml" in plugin_names(get_plugin_manager(allowed=["eml"]))


def test_misspelled_hookimpl_fails_loudly() -> None:
    class Misspelled:
        @hookimpl
        def pre_trun(self, user_messages: Sequence[str]) -> None:
            """Typo'd name: no such hook."""

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Misspelled())
    with pytest.raises(pluggy.PluginValidationError, match="pre_trun"):
        pm.check_pending()


def test_third_party_plugin_adds_message_and_provider(make_app: AppFactory) -> None:
    plugin = ThirdParty()
    app = make_app(plugins=_fresh(plugin), provider="probe")
    assert "probe" in app.embeddings.names()
    app.settings.set(TENANT, None, "rag.autoInject.enabled", "ON")
    app.settings.set(TENANT, None, "rag.minScore", 0.05)
    index_docs(app)
    rag = app.project_rags.find_default_rag(TENANT, PROJECT)
    assert rag is not None and rag.embedding_provider == "probe"

    block, note = app.pre_turn(TENANT, PROJECT, ["zebra", "stripes"])
    assert block.startswith("<rag-context>") and "documents/zebra.md" in block
    assert note == "<house-rules>2 message(s)</house-rules>"
    assert plugin.provider.queries == ["zebra\nstripes"]  # the plugin's model answered

    # with AutoInject off only the plugin's own message is left
    app.settings.set(TENANT, PROJECT, "rag.autoInject.enabled", "OFF")
    assert app.pre_turn(TENANT, PROJECT, ["zebra"]) == ["<house-rules>1 message(s)</house-rules>"]

    # and both reach the LLM in that order, after the host's system prompt
    app.settings.set(TENANT, PROJECT, "rag.autoInject.enabled", None)
    inner = RecordingLLM()
    llm = RagContextLLM(inner, app, TENANT, PROJECT)
    llm.chat_with_tools([], user_msg="zebra", chat_history=[])
    assert [(m.content or "")[:13] for m in inner.calls[0]] == [
        "<rag-context>",
        "<house-rules>",
        "zebra",
    ]


def test_third_party_extractor_is_used(make_app: AppFactory) -> None:
    app = make_app(plugins=_fresh(ThirdParty()))
    assert extract_text(b"quiet", path="a.shout", registry=app.extractors).text == "QUIET"


def test_plugin_context_template(make_app: AppFactory) -> None:
    class Template:
        @hookimpl
        def context_template(self) -> str:
            return "<rag-context>{% for h in hits %}[{{ h.label }}]{% endfor %}</rag-context>"

    app = make_app(plugins=_fresh(Template()))
    app.settings.set(TENANT, None, "rag.autoInject.enabled", "ON")
    index_docs(app)
    recipe = RagParams(min_score=0.05, top_k=1)
    assert app.pre_turn(TENANT, PROJECT, ["zebra stripes"], recipe) == [
        "<rag-context>[S1]</rag-context>"
    ]
    # a recipe's own template still wins over the plugin's
    own = RagParams(min_score=0.05, top_k=1, template="<rag-context>mine</rag-context>")
    assert app.pre_turn(TENANT, PROJECT, ["zebra stripes"], own) == [
        "<rag-context>mine</rag-context>"
    ]
