"""Third-party plugins on the chat path: a pre-turn message, a provider, an extractor and a
block template, registered beside the default plugins. The hookspec meta-tests and the plugin
manager's are in tests/plugins/."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pluggy
from chat_fakes import RecordingLLM, index_docs

from fakes import P, ProbeProvider, T
from vancetope_rag.app import RagApp
from vancetope_rag.extraction.registry import extract_text
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.integrations.llamaindex.llm import RagContextLLM
from vancetope_rag.plugins import get_plugin_manager
from vancetope_rag.recipes import RagParams

AppFactory = Callable[..., RagApp]


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


def test_third_party_plugin_adds_message_and_provider(make_app: AppFactory) -> None:
    plugin = ThirdParty()
    app = make_app(plugins=_fresh(plugin), provider="probe")
    assert "probe" in app.embeddings.names()
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.05)
    index_docs(app)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_provider == "probe"

    block, note = app.pre_turn(T, P, ["zebra", "stripes"])
    assert block.startswith("<rag-context>") and "documents/zebra.md" in block
    assert note == "<house-rules>2 message(s)</house-rules>"
    assert plugin.provider.queries == ["zebra\nstripes"]  # the plugin's model answered

    # with AutoInject off only the plugin's own message is left
    app.settings.set(T, P, "rag.autoInject.enabled", "OFF")
    assert app.pre_turn(T, P, ["zebra"]) == ["<house-rules>1 message(s)</house-rules>"]

    # and both reach the LLM in that order, after the host's system prompt
    app.settings.set(T, P, "rag.autoInject.enabled", None)
    inner = RecordingLLM()
    llm = RagContextLLM(inner, app, T, P)
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
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    index_docs(app)
    recipe = RagParams(min_score=0.05, top_k=1)
    assert app.pre_turn(T, P, ["zebra stripes"], recipe) == ["<rag-context>[S1]</rag-context>"]
    # a recipe's own template still wins over the plugin's
    own = RagParams(min_score=0.05, top_k=1, template="<rag-context>mine</rag-context>")
    assert app.pre_turn(T, P, ["zebra stripes"], own) == ["<rag-context>mine</rag-context>"]
