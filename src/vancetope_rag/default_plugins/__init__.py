"""Built-in behaviour, registered like any third-party plugin."""

DEFAULT_PLUGINS: tuple[str, ...] = (
    "vancetope_rag.default_plugins.lifecycle",
    "vancetope_rag.default_plugins.autoinject",
    "vancetope_rag.default_plugins.tools",
    "vancetope_rag.default_plugins.builtins",
)
