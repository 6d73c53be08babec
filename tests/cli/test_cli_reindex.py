"""`vancetope-rag reindex` / `status` on a real SQLite store: the rules come from the services."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli


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
    """Regression (a rebuild with embeddings off): the CLI dropped `_documents`, said it had
    rebuilt the RAG and exited 0; afterwards `status` said `exists: false`."""
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


def _seed(app: RagApp) -> None:
    """Four eligible documents (one with a summary) and two that are not, indexed."""
    app.bring(T, P)
    for w in ("apple", "banana", "cherry"):
        app.documents.create(T, P, f"documents/{w}.md", f"{w} notes")
    app.documents.create(T, P, "documents/d.md", "damson notes", summary="plum")
    app.documents.create(T, P, "notes/private.md", "private")
    app.documents.create(T, P, "documents/img.png", "bytes", mime_type="image/png")
    assert app.scheduler.run_until_idle(timeout_s=10).failed == 0


def _cli(store_uri: str, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(
        cli, ["--store", store_uri, "--tenant", T, "--project", P, *args], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_cli_reindex_index_status(make_app: Callable[..., RagApp], store_uri: str) -> None:
    app = make_app()
    _seed(app)
    app.documents.create(T, P, "documents/new.md", "elderberry notes")

    status = _cli(store_uri, "status", "--json")
    assert status["exists"] is True
    assert status["documents"] == {
        "none": 2,
        "pending": 1,
        "processing": 0,
        "indexed": 4,
        "failed": 0,
    }

    queued = _cli(store_uri, "reindex", "--json")
    assert queued == {"rebuild": False, "documentsQueued": 5, "migration": None}

    indexed = _cli(store_uri, "index", "--until-idle", "--json")
    assert indexed["indexed"] == 5
    assert indexed["failed"] == 0
    assert indexed["failures"] == []

    status = _cli(store_uri, "status", "--json")
    assert status["documents"] == {
        "none": 2,
        "pending": 0,
        "processing": 0,
        "indexed": 5,
        "failed": 0,
    }
    assert status["chunkCount"] == 6

    live = status["ragId"]
    rebuilt = _cli(store_uri, "reindex", "--rebuild", "--json")
    migration = rebuilt["migration"]
    assert isinstance(migration, dict)
    assert rebuilt == {
        "rebuild": True,
        "documentsQueued": 5,
        "migration": {
            "id": migration["id"],
            "fromModel": "hashing:hashing-256",
            "toModel": "hashing:hashing-256",
        },
    }
    status = _cli(store_uri, "status", "--json")
    assert (status["ragId"], status["chunkCount"]) == (live, 6)  # still answering
    assert status["progress"]["migration"]["state"] == "running"  # type: ignore[index]
    indexed = _cli(store_uri, "index", "--json")
    # the same model: every text comes from the embedding cache
    assert (indexed["indexed"], indexed["embeddedTexts"], indexed["cacheHits"]) == (5, 0, 6)
    status = _cli(store_uri, "status", "--json")
    assert status["ragId"] == status["progress"]["migration"]["toRagId"] != live  # type: ignore[index]
    assert (status["chunkCount"], status["documents"]["indexed"]) == (6, 5)  # type: ignore[index]
    assert status["progress"]["migration"]["state"] == "completed"  # type: ignore[index]


def test_cli_rebuild_wait_cancel_and_refusals(
    make_app: Callable[..., RagApp], store_uri: str
) -> None:
    app = make_app()
    _seed(app)
    base = ["--store", store_uri, "--tenant", T, "--project", P]
    runner = CliRunner()
    none = runner.invoke(cli, [*base, "reindex", "--cancel"])
    assert none.exit_code == 1 and "no rebuild is running" in none.stderr
    bad = runner.invoke(cli, [*base, "reindex", "--wait"])
    assert bad.exit_code == 1 and "--wait goes with --rebuild" in bad.stderr

    first = _cli(store_uri, "reindex", "--rebuild", "--json")
    second = runner.invoke(cli, [*base, "reindex", "--rebuild"])
    assert second.exit_code == 1 and "already running" in second.stderr
    cancelled = _cli(store_uri, "reindex", "--cancel", "--json")
    assert cancelled == {"cancelled": True, "migration": first["migration"]}
    status = _cli(store_uri, "status", "--json")
    assert status["progress"]["migration"]["state"] == "cancelled"  # type: ignore[index]

    app.settings.set(T, None, "ai.embedding.model", "hashing-64")
    waited = runner.invoke(cli, [*base, "reindex", "--rebuild", "--wait"])
    assert waited.exit_code == 0, waited.output
    assert (
        "rebuild" in waited.stdout and ": completed, 4 done, 0 failed, 0 waiting" in waited.stdout
    )
    status = _cli(store_uri, "status", "--json")
    assert (status["embeddingModel"], status["chunkCount"]) == ("hashing-64", 5)
    text = runner.invoke(cli, [*base, "status"])
    assert (
        "indexing: 4 done, 0 failed, 0 waiting" in text.stdout
        and "-> hashing:hashing-64): completed" in (text.stdout)
    )


@pytest.mark.parametrize("before", ["closed", "suspended", "unknown"])
def test_reindex_brings_a_project_that_is_not_running_up_with_a_notice(
    make_app: Callable[..., RagApp], store_uri: str, before: str
) -> None:
    """The CLI's documented choice (REST answers 409/404 instead): the service says the
    project is not running, the CLI brings it up and says so on stderr."""
    app = make_app()
    if before != "unknown":
        _seed(app)
        if before == "closed":
            app.close_project(T, P)
        else:
            app.suspend(T, P)
    base = ["--store", store_uri, "--tenant", T, "--project", P]
    result = CliRunner().invoke(cli, [*base, "reindex", "--json"])
    assert result.exit_code == 0, result.output
    shown = "not known yet" if before == "unknown" else before
    assert f"notice: project {P!r} of tenant {T!r} was {shown}; brought it up" in result.stderr
    assert app.lifecycle.get_project(T, P).status.value == "RUNNING"  # type: ignore[union-attr]
    assert app.project_rags.find_default_rag(T, P) is not None
    # Running now: no notice the second time.
    again = CliRunner().invoke(cli, [*base, "reindex"])
    assert again.exit_code == 0 and again.stderr == ""


def test_progress_bars_on_a_terminal(
    make_app: Callable[..., RagApp],
    store_uri: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``import``, ``index`` and ``reindex --rebuild --wait`` draw bars on a terminal only
    (here stderr is not one: click prints each bar's label once)."""
    from vancetope_rag.cli import progress

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"{i}.md").write_text(f"note {i}")
    app = make_app()
    app.bring(T, P)
    base = ["--store", store_uri, "--tenant", T, "--project", P]
    runner = CliRunner()
    quiet = runner.invoke(cli, [*base, "import", str(docs)])
    assert quiet.exit_code == 0 and "importing" not in quiet.stderr
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    (docs / "3.md").write_text("note 3")
    imported = runner.invoke(cli, [*base, "import", str(docs)])
    assert imported.exit_code == 0 and "importing" in imported.stderr
    indexed = runner.invoke(cli, [*base, "index"])
    assert indexed.exit_code == 0 and "indexing" in indexed.stderr
    app.settings.set(T, None, "ai.embedding.model", "hashing-32")
    rebuilt = runner.invoke(cli, [*base, "reindex", "--rebuild", "--wait"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuild hashing:hashing-256 -> hashing:hashing-32" in rebuilt.stderr
    as_json = runner.invoke(cli, [*base, "reindex", "--rebuild", "--wait", "--json"])
    assert as_json.exit_code == 0 and "rebuild hashing" not in as_json.stderr
    outcome = json.loads(as_json.stdout)["outcome"]
    assert outcome["migration"]["state"] == "completed" and outcome["busy"] is False


def test_rebuild_wait_exits_1_when_the_rebuild_fails(
    make_app: Callable[..., RagApp], store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fakes import ProbeProvider, Refuse, registry

    app = make_app(
        embeddings=registry(ProbeProvider("refuse", Refuse("401 bad key"))),
        config={"max_attempts": 1},
    )
    _seed(app)
    app.settings.set(T, None, "ai.embedding.provider", "refuse")
    base = ["--store", store_uri, "--tenant", T, "--project", P]
    monkeypatch.setattr(RagApp, "open", staticmethod(lambda *a, **k: app))  # its registry
    result = CliRunner().invoke(cli, [*base, "reindex", "--rebuild", "--wait"])
    assert result.exit_code == 1
    assert (
        ": failed, 0 done, 4 failed, 0 waiting" in result.stdout and "401 bad key" in result.stdout
    )
    status = app.project_rags.status(T, P)
    assert status.chunk_count == 5  # the live generation is untouched
