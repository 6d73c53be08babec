"""`vancetope-rag index` on a store that stays full gives up like `worker` does.

Before: with the disk full (SQLite answering SQLITE_FULL on every write that needs a new
page) plain `index` exited 0 saying "indexed 0 ..., failed 0" while every document still
waited, and `index --until-idle` ticked forever. Now both exit 1 with the store's own message
(what is wrong and what to do) once the store failed the run, `--until-idle` after the same
number of consecutive failing ticks as the worker (VANCETOPE_RAG_MAX_STORE_FAILURES).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from vancetope_rag.cli import cli
from vancetope_rag.services.indexing.scheduler import ProjectRagIndexScheduler, TickResult
from vancetope_rag.store.sqlite.db import SqliteDatabase

DOCS = 12


@pytest.fixture
def pending_store(tmp_path: Path) -> tuple[CliRunner, list[str]]:
    """A store whose documents were imported and wait for the indexer."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(DOCS):
        (docs / f"n{i}.md").write_text(f"note {i} " + "lorem ipsum dolor " * 200)
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]
    settings = ["settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
    assert runner.invoke(cli, [*base, *settings]).exit_code == 0
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0
    return runner, base


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every connection opened from now on cannot add a page to the file (a full disk:
    SQLITE_FULL); rewriting pages in place still works. Counts the indexer ticks."""
    real_open = SqliteDatabase._open
    seen = {"ticks": 0}

    def full_open(self: SqliteDatabase) -> Any:
        conn = real_open(self)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(SqliteDatabase, "_open", full_open)
    real_tick = ProjectRagIndexScheduler.tick

    def counting_tick(self: ProjectRagIndexScheduler) -> TickResult:
        seen["ticks"] += 1
        return real_tick(self)

    monkeypatch.setattr(ProjectRagIndexScheduler, "tick", counting_tick)
    return seen


def _pending(runner: CliRunner, base: list[str]) -> int:
    status = json.loads(runner.invoke(cli, [*base, "status", "--json"]).stdout)
    return int(status["documents"]["pending"])


@pytest.mark.timeout(60)
def test_index_on_a_full_store_exits_non_zero_with_the_store_message(
    pending_store: tuple[CliRunner, list[str]], full_disk: dict[str, int]
) -> None:
    runner, base = pending_store
    result = runner.invoke(cli, [*base, "index"], env={"VANCETOPE_RAG_MAX_STORE_FAILURES": "3"})
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # not an uncaught error
    assert "indexed 0" not in result.stdout  # no success summary while documents wait
    assert result.stderr.startswith("error: ")
    assert "is full" in result.stderr and "free space" in result.stderr
    assert "Traceback" not in result.output
    assert full_disk["ticks"] <= 3


@pytest.mark.timeout(60)
def test_index_until_idle_on_a_full_store_stops_after_the_worker_bound(
    pending_store: tuple[CliRunner, list[str]], full_disk: dict[str, int]
) -> None:
    runner, base = pending_store
    result = runner.invoke(
        cli,
        [*base, "index", "--until-idle", "--json"],
        env={"VANCETOPE_RAG_MAX_STORE_FAILURES": "3"},
    )
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""  # no JSON summary claiming success
    assert "the store failed 3 indexer ticks in a row" in result.stderr
    assert "is full" in result.stderr and "free space" in result.stderr
    assert full_disk["ticks"] == 3  # exactly the worker's bound of consecutive failures
    assert "Traceback" not in result.output


@pytest.mark.timeout(60)
def test_index_indexes_again_once_the_store_has_room(
    pending_store: tuple[CliRunner, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is lost by the failed runs: the documents kept waiting (no attempt spent)."""
    runner, base = pending_store
    real_open = SqliteDatabase._open

    def full_open(self: SqliteDatabase) -> Any:
        conn = real_open(self)
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
        return conn

    with monkeypatch.context() as m:
        m.setattr(SqliteDatabase, "_open", full_open)
        assert runner.invoke(cli, [*base, "index", "--until-idle"]).exit_code == 1
    assert _pending(runner, base) == DOCS
    result = runner.invoke(cli, [*base, "index", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["indexed"] == DOCS
    assert _pending(runner, base) == 0
