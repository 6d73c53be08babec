"""`vancetope-rag reindex` / `status` on a real SQLite store: the rules come from the services."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from vancetope_rag.cli import cli


@pytest.fixture
def run(tmp_path: Path):
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(cli, ["--store", store, "--tenant", "t", "--project", "p", *args])
        if ok:
            assert result.exit_code == 0, result.output + result.stderr
        return result

    return invoke


@pytest.fixture
def indexed(run, tmp_path: Path):
    """Two documents imported and indexed with the hashing provider."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cats.md").write_text("Cats purr when they are content and sleep a lot.")
    (docs / "dogs.md").write_text("Dogs bark at strangers and love long walks.")
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("import", str(docs))
    run("index")
    return run


def test_rebuild_with_embeddings_off_refuses_and_keeps_the_index(indexed) -> None:
    """Regression (issue 7, bug 1): the CLI dropped `_documents`, said it had rebuilt the RAG
    and exited 0; afterwards `status` said `exists: false`."""
    run = indexed
    before = json.loads(run("status", "--json").stdout)
    assert before["exists"] is True and before["chunkCount"] == 2
    run("settings", "set", "ai.embedding.provider", "none", "--scope", "tenant")

    result = run("reindex", "--rebuild", ok=False)

    assert result.exit_code == 1
    assert "ai.embedding.provider" in result.stderr
    assert "rebuilt" not in result.stdout
    after = json.loads(run("status", "--json").stdout)
    assert after["exists"] is True
    assert (after["ragId"], after["chunkCount"]) == (before["ragId"], 2)
    assert after["documents"]["indexed"] == 2  # nothing queued for a rebuild that did not happen
