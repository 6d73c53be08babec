"""Built-in behaviour, registered like any third-party plugin.

Each module implements hooks of :mod:`vancetope_rag.hookspecs`; :func:`~vancetope_rag.plugins.
get_plugin_manager` registers them all, in this order, before the installed plugins. Nothing
else in the package knows the built-in providers or extractors: they reach the app only through
the hooks, as a third party's do.
"""

DEFAULT_PLUGINS: tuple[str, ...] = (
    # project lifecycle and documents → the project and document services
    "vancetope_rag.default_plugins.lifecycle",
    # the pre-turn <rag-context> block
    "vancetope_rag.default_plugins.autoinject",
    # the rag_* agent tools
    "vancetope_rag.default_plugins.tools",
    # embedding providers, one module each
    "vancetope_rag.default_plugins.embedded",
    "vancetope_rag.default_plugins.openai",
    "vancetope_rag.default_plugins.gemini",
    "vancetope_rag.default_plugins.hashing",
    # rerankers: TEI's and the Cohere-style /rerank APIs
    "vancetope_rag.default_plugins.rerankers",
    # text extractors: plain text and code, HTML, notebooks, DOCX, PDF
    "vancetope_rag.default_plugins.extractors",
)
