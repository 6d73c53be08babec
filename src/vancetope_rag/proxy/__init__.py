"""An OpenAI-compatible chat proxy that gives any ``/v1/chat/completions`` client project RAG.

``vancetope-rag proxy --upstream URL`` serves ``/p/{project}/v1/chat/completions`` and
``/p/{project}/v1/models``: each chat request gets the block ``pre_turn`` gives for its
trailing user turn, after the caller's system messages, and goes on to the upstream with the
upstream's own key; the answer (streamed or not) comes back unchanged. Needs the ``server``
extra: ``pip install 'vancetope-rag[server]'``. See docs/proxy.md.
"""

from __future__ import annotations

from vancetope_rag.errors import MissingDependencyError

try:
    import httpx as _httpx  # noqa: F401
    import starlette as _starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError("the chat proxy", "server") from exc

from vancetope_rag.proxy.config import ProxyConfig
from vancetope_rag.proxy.keys import ApiKey, hash_key, new_key
from vancetope_rag.proxy.server import ProxyError, create_proxy

__all__ = ["ApiKey", "ProxyConfig", "ProxyError", "create_proxy", "hash_key", "new_key"]
