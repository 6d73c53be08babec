"""``ai.rerank.baseUrl`` as the rerankers take it: an http(s) URL or a clear refusal that names
the setting (the settings check does not see a ``RerankSettings`` built by hand, and lets a
port that is no number through), an IPv6 loopback server reached and shown as ``[::1]``.

Before, the reranker's endpoint took any text as its base URL (``ftp://…``, ``host:8080``),
a port that is no number raised a bare ``ValueError`` from the URL parser, and an IPv6 host
was shown without its brackets."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from loopback import ipv6_loopback
from rerank_server import RerankServer
from vancetope_rag.app import RagApp
from vancetope_rag.errors import RerankError
from vancetope_rag.rerankers import RerankSettings

TENANT, PROJECT = "t1", "p1"


@pytest.mark.parametrize("provider", ["tei", "cohere"])
@pytest.mark.parametrize("base_url", ["ftp://reranker.example/v1", "localhost:8080", "reranker"])
def test_a_base_url_that_is_not_http_is_refused_naming_the_setting(
    app: RagApp, provider: str, base_url: str
) -> None:
    settings = RerankSettings(provider=provider, base_url=base_url, api_key="k")
    with pytest.raises(RerankError, match=r"ai\.rerank\.baseUrl") as refused:
        app.rerankers.load(settings)
    assert "http" in str(refused.value)


@pytest.mark.parametrize(
    "base_url", ["http://127.0.0.1:http", "http://127.0.0.1:99999", "http://127.0.0.1:0"]
)
def test_a_bad_port_is_a_clear_refusal(app: RagApp, base_url: str) -> None:
    with pytest.raises(RerankError, match=r"port") as refused:
        app.rerankers.load(RerankSettings(provider="tei", base_url=base_url))
    assert "ai.rerank.baseUrl" in str(refused.value)


def test_a_bad_port_set_as_a_setting_skips_the_rerank_with_a_clear_warning(
    app: RagApp, caplog: pytest.LogCaptureFixture
) -> None:
    rag = app.rags.create(TENANT, PROJECT, "notes")
    app.rags.add_text(rag, "a", "cats sleep on the warm mat")
    app.settings.set(TENANT, None, "ai.rerank.provider", "tei")
    app.settings.set(TENANT, None, "ai.rerank.baseUrl", "http://127.0.0.1:port")
    with caplog.at_level(logging.WARNING, logger="vancetope_rag"):
        hits = app.as_retriever(TENANT, PROJECT, rag="notes", min_score=-1.0).retrieve_hits("cat")
    assert hits and all(h.rerank_score is None for h in hits)
    assert "ai.rerank.baseUrl" in caplog.text and "port" in caplog.text


@pytest.fixture
def tei6() -> Iterator[RerankServer]:
    if not ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback (::1)")
    srv = RerankServer("tei", host="::1")
    yield srv
    srv.down()


def test_an_ipv6_base_url_reaches_the_reranker_and_is_shown_bracketed(
    app: RagApp, tei6: RerankServer, caplog: pytest.LogCaptureFixture
) -> None:
    rag = app.rags.create(TENANT, PROJECT, "notes")
    for ref, text in {"a": "cats sleep on the mat", "b": "a zebra by the river"}.items():
        app.rags.add_text(rag, ref, text)
    tei6.prefer = "zebra"
    assert tei6.base_url.startswith("http://[::1]:")
    app.settings.set(TENANT, None, "ai.rerank.provider", "tei")
    app.settings.set(TENANT, None, "ai.rerank.baseUrl", tei6.base_url)

    def ask() -> list[str]:
        retriever = app.as_retriever(TENANT, PROJECT, rag="notes", top_k=2, min_score=-1.0)
        return [h.text for h in retriever.retrieve_hits("cat mat")]

    assert "zebra" in ask()[0]  # the reranker's order
    assert len(tei6.requests) == 1
    tei6.down()
    with caplog.at_level(logging.WARNING, logger="vancetope_rag"):
        ask()
    assert f"http://[::1]:{tei6.port}/rerank" in caplog.text
