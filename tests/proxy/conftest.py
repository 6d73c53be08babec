"""Fixtures of the chat proxy tests: an app with two tenants that both have a project named
``handbook``, a key file, the recording upstream, and the proxy under uvicorn on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from proxy_support import SECRET, ProxyFactory, key_file, populate

from chat_upstream import ChatUpstream, running_upstream
from loopback import serving
from vancetope_rag.app import RagApp
from vancetope_rag.proxy import ProxyConfig, create_proxy

pytest.importorskip("uvicorn", reason="needs the 'server' extra")


@pytest.fixture
def rag(make_app: Callable[..., RagApp]) -> RagApp:
    """Tenants t1 (Acme) and t2 (Globex), each with a project ``handbook``, AutoInject ON."""
    return populate(make_app(config={"jwt_secret": SECRET}))


@pytest.fixture
def upstream() -> Iterator[ChatUpstream]:
    with running_upstream() as server:
        yield server


@pytest.fixture
def start_proxy(rag: RagApp, upstream: ChatUpstream, tmp_path: Path) -> Iterator[ProxyFactory]:
    """Start a proxy (its base URL, ``http://127.0.0.1:<port>``) with config overrides."""
    keys = key_file(tmp_path / "keys.yaml")
    with ExitStack() as stack:

        def factory(**overrides: Any) -> str:
            settings: dict[str, Any] = {
                "upstream": upstream.base_url,
                "upstream_api_key": upstream.key,
                "keys_file": str(keys),
                **overrides,
            }
            return stack.enter_context(serving(create_proxy(rag, ProxyConfig(**settings))))

        yield factory


@pytest.fixture
def proxy_url(start_proxy: ProxyFactory) -> str:
    return start_proxy()
