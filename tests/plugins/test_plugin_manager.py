"""The plugin manager: fresh per call, default plugins first, entry points on demand, and the
built-in providers and extractors reaching the app only through the hooks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pluggy
import pytest

from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins import DEFAULT_PLUGINS
from vancetope_rag.default_plugins.hashing import HashingProvider
from vancetope_rag.embeddings import EmbeddingProvider, EmbeddingSettings, LoadedModel
from vancetope_rag.extraction.registry import RegisterExtractor, UnsupportedTypeError, extract_text
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.plugins import get_plugin_manager, plugin_names

AppFactory = Callable[..., RagApp]

BUILT_IN_PROVIDERS = ["embedded", "gemini", "hashing", "none", "openai"]


def test_get_plugin_manager_is_fresh_each_call() -> None:
    first, second = get_plugin_manager(load_entrypoints=False), get_plugin_manager()
    assert first is not second
    assert set(DEFAULT_PLUGINS) <= set(plugin_names(first))
    assert set(DEFAULT_PLUGINS) <= set(plugin_names(second))

    class Nothing:
        @hookimpl
        def pre_turn(self) -> None:
            """Registered in one manager only."""

    first.register(Nothing(), name="spy")
    assert "spy" in plugin_names(first) and "spy" not in plugin_names(second)
    assert "spy" not in plugin_names(get_plugin_manager())


def test_entry_point_allow_list() -> None:
    assert "eml" not in plugin_names(get_plugin_manager(allowed=[]))
    assert "eml" in plugin_names(get_plugin_manager(allowed=["eml"]))
    # the allow-list names installed plugins; it never removes the default ones
    assert set(DEFAULT_PLUGINS) <= set(plugin_names(get_plugin_manager(allowed=[])))


def test_misspelled_hookimpl_fails_loudly() -> None:
    class Misspelled:
        @hookimpl
        def pre_trun(self, user_messages: Sequence[str]) -> None:
            """Typo'd name: no such hook."""

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Misspelled())
    with pytest.raises(pluggy.PluginValidationError, match="pre_trun"):
        pm.check_pending()


# -- built-ins are plugins, with no second path ------------------------------------------


def test_the_app_gets_the_built_ins_from_the_default_plugins(make_app: AppFactory) -> None:
    app = make_app(plugins=get_plugin_manager(load_entrypoints=False))
    assert app.embeddings.names() == BUILT_IN_PROVIDERS
    assert extract_text(b"<p>hi</p>", path="a.html", registry=app.extractors).text == "hi"


def test_without_their_default_plugins_the_built_ins_are_gone(make_app: AppFactory) -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    pm.unregister(name="vancetope_rag.default_plugins.hashing")
    pm.unregister(name="vancetope_rag.default_plugins.extractors")
    app = make_app(plugins=pm, provider=None)
    assert "hashing" not in app.embeddings.names()
    assert app.extractors.supported() == []
    with pytest.raises(UnsupportedTypeError):
        extract_text(b"plain words", path="a.txt", registry=app.extractors)


class Replacement:
    """A plugin that replaces a built-in extractor and a built-in provider by name."""

    class Provider(HashingProvider):
        def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
            loaded = super().load(settings, model)
            return LoadedModel(
                provider=loaded.provider,
                model=f"replaced-{model}",
                dimension=loaded.dimension,
                embed_model=loaded.embed_model,
                max_input_tokens=loaded.max_input_tokens,
                tokenizer=loaded.tokenizer,
            )

    @hookimpl
    def register_extractors(self, register: RegisterExtractor) -> None:
        register(("text/html",), lambda data, path: "PLUGIN HTML", extensions=(".html",))

    @hookimpl
    def register_embedding_providers(self, register: Callable[[EmbeddingProvider], None]) -> None:
        register(self.Provider())


def test_a_plugin_replaces_a_built_in_of_the_same_name(make_app: AppFactory) -> None:
    # pluggy calls the first-registered plugin last: without tryfirst on the default plugins
    # the built-ins would silently win over every plugin's registration.
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Replacement())
    pm.check_pending()
    app = make_app(plugins=pm)
    html = extract_text(b"<p>hi</p>", path="a.html", registry=app.extractors)
    assert html.text == "PLUGIN HTML"
    loaded = app.embeddings.load(EmbeddingSettings(provider="hashing"))
    assert loaded.model == "replaced-hashing-256"
    # the other built-ins are untouched
    assert extract_text(b"plain", path="a.txt", registry=app.extractors).text == "plain"
    assert app.embeddings.names() == BUILT_IN_PROVIDERS
