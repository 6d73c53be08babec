"""API keys never reach logs, stored errors, status or tool results — even when a provider's
exception quotes them."""

from __future__ import annotations

import json
import logging

import pytest

from fakes import ProbeProvider, Refuse, registry
from vancetope_rag.secrets import MASK, redact

KEY = "tenant-key-7f3a9c2e11"


def leaky() -> ProbeProvider:
    """Fails like some HTTP clients do: quoting the credential it was given."""
    return ProbeProvider("leaky", Refuse("401 Unauthorized: invalid api key"), 8, echo_key=True)


def test_key_quoted_by_a_failing_provider_is_redacted_everywhere(
    make_app, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(provider="leaky", embeddings=registry(leaky()), config={"max_attempts": 1})
    app.settings.set("t1", None, "ai.embedding.apiKey", KEY)
    app.bring("t1", "p1")
    app.documents.create("t1", "p1", "documents/a.md", "some text")
    app.settings.set("t1", "p1", "rag.autoInject.enabled", "ON")
    with caplog.at_level(logging.DEBUG):
        app.scheduler.run_until_idle(timeout_s=10)
        assert app.pre_turn("t1", "p1", ["some text"]) == []
        tools = {t.metadata.name: t for t in app.tools("t1", "p1")}
        out = str(tools["rag_query"].call(ragId="_documents", query="some text"))
    doc = app.documents.list_documents("t1", "p1")[0]
    assert doc.index_state.value == "failed"
    assert doc.index_last_error and "401 Unauthorized" in doc.index_last_error
    everything = (
        caplog.text
        + doc.index_last_error
        + out
        + json.dumps(app.project_rags.status("t1", "p1").to_json())
    )
    assert KEY not in everything
    assert MASK in doc.index_last_error


def test_redact_hides_key_shapes_not_registered() -> None:
    assert redact("bad key sk-abcdefghijklmnop1234 given") == f"bad key {MASK} given"
    assert "AIza" not in redact("key=AIzaSyA1234567890abcdefghijkl")
