"""The CLI says where each value comes from, and ``--json`` everywhere a
script needs it (``settings get``, ``context``, ``token``; ``query --json`` carries the label
and source the ``rag_query`` tool returns)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fakes import DOCS, P, T, call_tool
from vancetope_rag.api import TokenVerifier
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.config import EngineConfig

SECRET = "sk-live-DO-NOT-PRINT-4b1d9e"
JWT_SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"
QUESTION = "zebra stripes and savanna grass"


@pytest.fixture
def run(tmp_path: Path) -> Any:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        base = ["--store", store, "--tenant", T, "--project", P]
        env = {"VANCETOPE_RAG_JWT_SECRET": JWT_SECRET}
        result = runner.invoke(cli, [*base, *args], env=env, catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, (args, result.output)
        return result

    invoke.store = store  # type: ignore[attr-defined]
    return invoke


def test_unset_at_project_scope_says_the_value_is_inherited(run: Any) -> None:
    run("settings", "set", "rag.topK", "7", "--scope", "tenant")
    run("settings", "set", "rag.topK", "3")
    out = run("settings", "set", "rag.topK", "--unset").stdout
    assert "(project)" not in out
    assert out == "rag.topK unset at project scope; now 7 (from tenant)\n"
    assert run("settings", "get", "rag.topK").stdout == "rag.topK = 7 (tenant)\n"
    run("settings", "set", "rag.topK", "--unset", "--scope", "tenant")
    # effective: the value turns use, not null
    assert run("settings", "get", "rag.topK").stdout == "rag.topK = 5 (default)\n"


def test_get_tenant_scope_does_not_show_defaults_as_set(run: Any) -> None:
    out = run("settings", "get", "rag.retrieval.mode", "--scope", "tenant").stdout
    assert out == 'rag.retrieval.mode = "hybrid" (default; not set at tenant scope)\n'
    run("settings", "set", "rag.retrieval.mode", "dense", "--scope", "tenant")
    out = run("settings", "get", "rag.retrieval.mode", "--scope", "tenant").stdout
    assert out == 'rag.retrieval.mode = "dense" (tenant)\n'
    out = run("settings", "get", "rag.retrieval.mode", "--scope", "project").stdout
    assert out == 'rag.retrieval.mode = "dense" (tenant; not set at project scope)\n'


def test_settings_get_json_names_the_source_and_masks_secrets(run: Any) -> None:
    run("settings", "set", "ai.embedding.apiKey", SECRET, "--scope", "tenant")
    run("settings", "set", "rag.topK", "4")
    result = run("settings", "get", "--json")
    assert SECRET not in result.output
    shown = json.loads(result.stdout)
    # effective: with the value turns apply beside the one set
    assert shown["rag.topK"] == {
        "value": 4,
        "source": "project",
        "applied": 4,
        "appliedFrom": "project",
    }
    assert shown["ai.embedding.apiKey"] == {"value": "********", "source": "tenant"}
    assert shown["rag.retrieval.mode"] == {"value": "hybrid", "source": "default"}
    tenant = json.loads(run("settings", "get", "rag.topK", "--scope", "tenant", "--json").stdout)
    assert tenant == {"rag.topK": {"value": None, "source": "default"}}


def _indexed(run: Any, tmp_path: Path) -> RagApp:
    docs = tmp_path / "docs"
    docs.mkdir()
    for path, text in DOCS.items():
        (docs / Path(path).name).write_text(text)
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("settings", "set", "rag.minScore", "0.05", "--scope", "tenant")
    run("import", str(docs))
    run("index")
    return RagApp.open(EngineConfig(store=run.store, indexer_initial_delay_s=3600.0))


def test_query_json_carries_the_tools_label_and_source(run: Any, tmp_path: Path) -> None:
    app = _indexed(run, tmp_path)
    try:
        tool = call_tool(app.tools(T, P), "rag_query", ragId="_documents", query=QUESTION)
    finally:
        app.close()
    hits = json.loads(run("query", QUESTION, "--json").stdout)
    assert [(h["label"], h["source"]) for h in hits] == [
        (h["label"], h["source"]) for h in tool["hits"]
    ]
    assert hits[0]["label"] == "S1" and hits[0]["source"] == "documents/zebra.md"


def test_context_json(run: Any, tmp_path: Path) -> None:
    _indexed(run, tmp_path).close()
    off = json.loads(run("context", QUESTION, "--json").stdout)
    assert off["enabled"] is False and off["block"] is None
    assert off["decidedBy"] and off["reason"] and off["hits"] == []
    run("settings", "set", "rag.autoInject.enabled", "ON")
    on = json.loads(run("context", QUESTION, "--json").stdout)
    assert on["enabled"] is True and on["block"].startswith("<rag-context>")
    assert on["hits"][0]["label"] == "S1" and on["hits"][0]["path"] == "documents/zebra.md"


def test_token_json(run: Any) -> None:
    result = run("token", "--json", "--ttl", "120")
    out = json.loads(result.stdout)
    assert set(out) == {"token", "tenant", "projects", "subject", "expiresInS"}
    assert (out["tenant"], out["projects"], out["expiresInS"]) == (T, [P], 120)
    principal = TokenVerifier(JWT_SECRET).principal(f"Bearer {out['token']}")
    assert principal.tenant == T and JWT_SECRET not in result.output


def test_set_at_tenant_scope_says_when_the_project_overrides_it(run: Any) -> None:
    run("settings", "set", "rag.topK", "3")
    out = run("settings", "set", "rag.topK", "7", "--scope", "tenant").stdout
    assert out == "rag.topK = 7 (tenant); project 'p1' overrides it with 3\n"
    out = run("settings", "set", "rag.topK", "--unset", "--scope", "tenant").stdout
    overridden = "; project 'p1' overrides it with 3\n"
    assert out == "rag.topK unset at tenant scope; now null (from default)" + overridden
    run("settings", "set", "rag.topK", "--unset")
    out = run("settings", "set", "rag.topK", "8", "--scope", "tenant").stdout
    assert out == "rag.topK = 8 (tenant)\n"
