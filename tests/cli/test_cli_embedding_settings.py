"""Settings that cannot trap: a misspelt provider or a model its provider does not make is
refused by ``settings set`` (exit status 2-ish, names suggested); provider, model, key and
URL resolve as one group, so a project that sets another provider gets that provider's
defaults, never the tenant's values for a different provider; and a pinned RAG's dimension
is not probed again by every process start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fakes import P, T
from vancetope_rag.cli import cli

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()

    def invoke(*args: str) -> Result:
        return runner.invoke(cli, ["--store", store, "--tenant", T, "--project", P, *args])

    return invoke


def test_a_misspelt_provider_is_refused_with_suggestions(run: Run) -> None:
    result = run("settings", "set", "ai.embedding.provider", "openia", "--scope", "tenant")
    assert result.exit_code != 0
    text = result.output + result.stderr
    assert "unknown embedding provider 'openia'" in text and "did you mean openai" in text
    shown = run("settings", "get", "ai.embedding.provider", "--scope", "tenant")
    assert "openia" not in shown.output  # nothing was stored


def test_a_model_the_provider_does_not_make_is_refused(run: Run) -> None:
    assert (
        run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant").exit_code
        == 0
    )
    bad = run("settings", "set", "ai.embedding.model", "multilingual-e5-small")
    assert bad.exit_code != 0
    assert "unknown hashing model 'multilingual-e5-small'" in bad.output + bad.stderr
    assert run("settings", "set", "ai.embedding.model", "hashing-64").exit_code == 0


def test_a_project_that_sets_another_provider_gets_its_defaults_not_the_tenants_values(
    make_app: Any,
) -> None:
    app = make_app(provider="openai")
    app.settings.set(T, None, "ai.embedding.model", "multilingual-e5-small")
    app.settings.set(T, None, "ai.embedding.apiKey", "tenant-openai-key-1")
    app.settings.set(T, None, "ai.embedding.baseUrl", "http://127.0.0.1:9/v1")
    app.settings.set(T, P, "ai.embedding.provider", "hashing")
    settings = app.settings.snapshot(T, P).embedding()
    assert (settings.provider, settings.model, settings.api_key, settings.base_url) == (
        "hashing",
        None,
        None,
        None,
    )
    assert app.settings.get_public_with_source(T, P, "ai.embedding.model") == (None, "default")
    # the trap of the issue: the project's index and rebuild now work with hashing's default
    app.bring(T, P)
    app.documents.create(T, P, "documents/a.md", "apples and pears")
    app.scheduler.run_until_idle(timeout_s=10)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and (rag.embedding_provider, rag.embedding_model) == (
        "hashing",
        "hashing-256",
    )
    # a project that names the tenant's own provider still inherits the rest of its group
    app.settings.set(T, "p2", "ai.embedding.provider", "openai")
    other = app.settings.snapshot(T, "p2").embedding()
    assert (other.model, other.api_key) == ("multilingual-e5-small", "tenant-openai-key-1")


def test_status_says_why_there_is_no_rag_and_how_to_fix_it(run: Run, tmp_path: Path) -> None:
    """An openai provider without ai.embedding.apiKey: the import warned once, and status
    said only "no _documents RAG in this project"; it gives the reason and the fix."""
    import json

    run("settings", "set", "ai.embedding.provider", "openai", "--scope", "tenant")
    run("settings", "set", "ai.embedding.baseUrl", "http://127.0.0.1:9/v1", "--scope", "tenant")
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("alpha")
    run("import", str(folder))
    shown = run("status")
    assert shown.exit_code == 0, shown.output
    [line] = [x for x in shown.output.splitlines() if x.startswith("no _documents RAG")]
    assert "ai.embedding.apiKey is required" in line and "placeholder" in line
    data = json.loads(run("status", "--json").output)
    assert data["exists"] is False
    assert "ai.embedding.apiKey" in data["noRagReason"] and "placeholder" in data["noRagReason"]
    run("settings", "set", "ai.embedding.apiKey", "placeholder", "--scope", "tenant")
    assert json.loads(run("status", "--json").output)["noRagReason"] is None


def test_the_legacy_rag_embedding_model_is_the_final_fallback(tmp_path: Path) -> None:
    """Second specification: RAG_EMBEDDING_MODEL "is only used as a final fallback when no
    native provider selection exists yet": the model of a provider that needs one when
    ai.embedding.model is set at no scope, shown with that source."""
    import json

    store = f"sqlite:///{tmp_path / 'rag.db'}"
    env = {"RAG_EMBEDDING_MODEL": "legacy-embed"}

    def run(*args: str) -> Result:
        result = CliRunner().invoke(
            cli, ["--store", store, "--tenant", T, "--project", P, *args], env=env
        )
        assert result.exit_code == 0, result.output + result.stderr
        return result

    shown = run("settings", "get", "ai.embedding.model").output
    assert "null (default)" in shown  # the embedded provider makes one model: not its model
    run("settings", "set", "ai.embedding.provider", "openai", "--scope", "tenant")
    run("settings", "set", "ai.embedding.apiKey", "placeholder", "--scope", "tenant")
    shown = run("settings", "get", "ai.embedding.model").output
    assert shown.strip() == 'ai.embedding.model = "legacy-embed" (RAG_EMBEDDING_MODEL)'
    data = json.loads(run("settings", "get", "ai.embedding.model", "--json").output)
    assert data["ai.embedding.model"] == {"value": "legacy-embed", "source": "RAG_EMBEDDING_MODEL"}
    status = json.loads(run("status", "--json").output)
    assert status["configuredModel"] == "openai:legacy-embed"
    run("settings", "set", "ai.embedding.model", "native-embed", "--scope", "tenant")
    assert "native-embed" in run("settings", "get", "ai.embedding.model").output
    status = json.loads(run("status", "--json").output)
    assert status["configuredModel"] == "openai:native-embed"  # a native selection wins
