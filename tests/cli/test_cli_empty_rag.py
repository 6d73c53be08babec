"""`vancetope-rag query` on a RAG that has no chunks yet answers with no hits, in both modes
(it used to fail with "internal error" in hybrid mode: the lexical statistics of an empty
index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vancetope_rag.cli import cli


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_query_on_a_rag_without_chunks_has_no_hits(tmp_path: Path, mode: str) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["--store", store, "--tenant", "t", "--project", "p", *args])
        assert result.exit_code == 0, result.output + result.stderr
        return result.stdout

    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cats.md").write_text("Cats purr when they are content.")
    run("import", str(docs), "--json")  # the RAG exists; nothing is indexed yet
    assert json.loads(run("query", "do cats purr", "--mode", mode, "--json")) == []
