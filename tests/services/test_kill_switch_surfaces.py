"""The tenant kill switch (spec §6.1) is decided in one function and obeyed by every surface:
the indexer, AutoInject, the agent tools, the CLI and the REST API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from fakes import DOCS, P, T, call_tool
from vancetope_rag.api import create_api, issue_token
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.services.settings import SettingsSnapshot

SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"
QUESTION = "zebra stripes and savanna grass"


@pytest.fixture
def indexed(make_app: Callable[..., RagApp]) -> RagApp:
    """Tenant t1 on the hashing provider, its documents indexed, AutoInject ON."""
    app = make_app(config={"jwt_secret": SECRET})
    app.bring(T, P)
    for path, text in DOCS.items():
        app.document_saved(T, P, path, text)
    assert app.scheduler.run_until_idle(timeout_s=30).indexed == len(DOCS)
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.05)
    assert app.autoinject.context_block(T, P, [QUESTION])  # on before the switch
    return app


def _every_surface(app: RagApp, store_uri: str) -> dict[str, Any]:
    """What each surface does now; nothing here may embed, drop or index anything."""
    out: dict[str, Any] = {}
    app.documents.create(T, P, "documents/new.md", "a document written after the switch")
    before = app.metrics.runs("tenant_disabled")
    tick = app.scheduler.tick()
    out["indexer"] = (tick.claimed, app.metrics.runs("tenant_disabled") - before)

    decision = app.autoinject.decide(T, P, [QUESTION])
    out["autoinject"] = (decision.block, decision.reason)

    tools = app.tools(T, P)
    out["tools"] = (
        call_tool(tools, "rag_query", ragId="_documents", query=QUESTION).get("code"),
        call_tool(tools, "rag_create", name="notes").get("code"),
    )

    base = ["--store", store_uri, "--tenant", T, "--project", P]
    index = CliRunner().invoke(cli, [*base, "index"])
    rebuild = CliRunner().invoke(cli, [*base, "reindex", "--rebuild"])
    out["cli"] = (index.exit_code, rebuild.exit_code)
    out["cli_says"] = index.stderr + rebuild.stderr

    token = issue_token(SECRET, subject="tester", tenant=T, projects=[P])
    with TestClient(create_api(app)) as client:
        response = client.post(
            f"/brain/{T}/projects/{P}/rag/reindex?rebuild=true",
            headers={"Authorization": f"Bearer {token}"},
        )
    out["rest"] = (response.status_code, response.json()["code"])
    return out


def _assert_all_refused(app: RagApp, out: dict[str, Any], rag_id: str, chunks: int) -> None:
    assert out["indexer"] == (0, 1)  # claims nothing, counted as tenant_disabled
    block, reason = out["autoinject"]
    assert block is None and "ai.embedding.provider=none" in reason
    assert out["tools"] == ("EMBEDDING_DISABLED", "EMBEDDING_DISABLED")
    assert out["cli"] == (1, 1)
    assert out["cli_says"].count("ai.embedding.provider=none") == 2
    assert out["rest"] == (409, "EMBEDDING_DISABLED")
    # Nothing was dropped, re-created or indexed on the way.
    status = app.project_rags.status(T, P)
    assert (status.rag_id, status.chunk_count) == (rag_id, chunks)
    assert status.documents["pending"] == 1
    assert [r.name for r in app.rags.list_rags(T, P)] == ["_documents"]


def test_provider_none_is_obeyed_by_every_surface(indexed: RagApp, store_uri: str) -> None:
    before = indexed.project_rags.status(T, P)
    indexed.settings.set(T, None, "ai.embedding.provider", "none")
    out = _every_surface(indexed, store_uri)
    _assert_all_refused(indexed, out, before.rag_id or "", before.chunk_count or 0)


def test_every_surface_decides_through_the_one_predicate(
    indexed: RagApp, store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider setting stays `hashing`; only the predicate says "off". Every surface
    refusing proves none of them decides the kill switch on its own."""
    before = indexed.project_rags.status(T, P)
    asked: list[str] = []

    def switched_off(self: SettingsSnapshot) -> bool:
        asked.append(str(self.effective["ai.embedding.provider"]))
        return False

    monkeypatch.setattr(SettingsSnapshot, "embeddings_enabled", switched_off)
    out = _every_surface(indexed, store_uri)

    assert indexed.settings.get(T, P, "ai.embedding.provider") == "hashing"
    assert not indexed.rags.is_embedding_enabled(T, P)  # the spec's RagService name, too
    assert asked and set(asked) == {"hashing"}
    _assert_all_refused(indexed, out, before.rag_id or "", before.chunk_count or 0)
