"""``vancetope-rag copy`` end to end on real SQLite stores (hashing provider: fast): the copy
answers queries as the source does and indexes nothing again; dry runs, re-runs, progress
and summary lines, and bad input (same store, missing or foreign source, credentials)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from vancetope_rag.cli import cli


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def source(tmp_path: Path, runner: CliRunner) -> str:
    """A store with project t/p: three documents imported and indexed."""
    uri = f"sqlite:///{tmp_path / 'source.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cats.md").write_text("Cats purr when they are content and sleep a lot.")
    (docs / "dogs.txt").write_text("Dogs bark at strangers and love long walks.")
    (docs / "birds.md").write_text("Birds sing at dawn and migrate south in winter.")
    scoped = ["--store", uri, "--tenant", "t", "--project", "p"]
    for args in (
        ["settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"],
        ["settings", "set", "rag.topK", "4"],
        ["import", str(docs)],
        ["index"],
    ):
        result = runner.invoke(cli, [*scoped, *args])
        assert result.exit_code == 0, result.output + result.stderr
    return uri


def run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args))


def query(runner: CliRunner, store: str, text: str) -> list[dict[str, object]]:
    result = run(runner, "--store", store, "--tenant", "t", "--project", "p", "query", text)
    assert result.exit_code == 0, result.output
    # every hit, scored 0 or not: the engine's minScore would hide the ties at 0
    args = ("query", text, "--json", "--min-score", "-1")
    out = run(runner, "--store", store, "--tenant", "t", "--project", "p", *args)
    found: list[dict[str, object]] = json.loads(out.stdout)
    return found


def test_copy_then_the_target_answers_alike_and_indexes_nothing(
    source: str, tmp_path: Path, runner: CliRunner
) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    result = run(runner, "copy", "--from", source, "--to", target, "--json")
    assert result.exit_code == 0, result.output + result.stderr
    report = json.loads(result.stdout)
    assert report["written"] == {
        "projects": 1,
        "settings": 2,
        "rags": 1,
        "documents": 3,
        "chunks": 3,
        "cachedEmbeddings": 3,
    }
    assert report["present"]["documents"] == 0 and report["indexesNotReady"] == []
    # progress on stderr, one line per step
    assert "t/p _documents: 3 of 3 sources" in result.stderr
    assert "t/p: 3 of 3 documents" in result.stderr

    for text in ("do cats sleep a lot", "birds in winter", "dogs walk"):
        theirs, ours = query(runner, source, text), query(runner, target, text)
        # the hits that match, in order with every field; chunks tied at 0 in any order
        assert [h for h in ours if h["score"]] == [h for h in theirs if h["score"]] != []
        assert sorted((h["sourceRef"], h["score"]) for h in ours) == sorted(
            (h["sourceRef"], h["score"]) for h in theirs
        )
    indexed = run(runner, "--store", target, "--tenant", "t", "--project", "p", "index", "--json")
    summary = json.loads(indexed.stdout)
    assert (summary["indexed"], summary["embeddedTexts"]) == (0, 0)
    status = run(runner, "--store", target, "--tenant", "t", "--project", "p", "status", "--json")
    assert json.loads(status.stdout)["documents"]["indexed"] == 3
    settings = run(runner, "--store", target, "--tenant", "t", "--project", "p", "settings", "get")
    assert "rag.topK" in settings.stdout

    again = run(runner, "copy", "--from", source, "--to", target)
    assert again.exit_code == 0, again.output
    assert "documents" in again.stdout and "already" in again.stdout
    again_json = json.loads(run(runner, "copy", "--from", source, "--to", target, "--json").stdout)
    assert again_json["present"] == report["written"]
    assert set(again_json["written"].values()) == {0}


def test_dry_run_counts_and_creates_no_target(
    source: str, tmp_path: Path, runner: CliRunner
) -> None:
    target = tmp_path / "target.db"
    result = run(runner, "copy", "--from", source, "--to", f"sqlite:///{target}", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "dry run: nothing written" in result.stdout
    assert "documents          3" in result.stdout
    assert not target.exists()


def test_tenant_and_project_limit_the_copy(source: str, tmp_path: Path, runner: CliRunner) -> None:
    target = f"sqlite:///{tmp_path / 'target.db'}"
    other = run(runner, "copy", "--from", source, "--to", target, "--tenant", "x", "--json")
    assert other.exit_code == 0
    assert json.loads(other.stdout)["written"]["documents"] == 0
    assert "holds nothing to copy" in other.stderr
    one = run(runner, "copy", "--from", source, "--to", target, "--tenant", "t", "--project", "p")
    assert one.exit_code == 0, one.output
    assert "embedding cache is copied only by a copy of the whole store" in one.stdout
    bad = run(runner, "copy", "--from", source, "--to", target, "--tenant", "bad id/")
    assert bad.exit_code == 2


def test_bad_input_is_a_clear_error(tmp_path: Path, runner: CliRunner, source: str) -> None:
    same = run(runner, "copy", "--from", source, "--to", source.replace("sqlite:///", ""))
    assert same.exit_code == 1 and "name the same store" in same.stderr

    missing = tmp_path / "missing.db"
    result = run(runner, "copy", "--from", f"sqlite:///{missing}", "--to", source)
    assert result.exit_code == 1 and "there is no store file" in result.stderr
    assert not missing.exists()

    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a database")
    result = run(runner, "copy", "--from", str(foreign), "--to", f"sqlite:///{tmp_path}/x.db")
    assert result.exit_code == 1 and "not a SQLite database" in result.stderr

    result = run(runner, "copy", "--from", "ftp://host/x", "--to", source)
    assert result.exit_code == 1 and "unsupported store URI scheme" in result.stderr
    assert "Traceback" not in result.output

    assert run(runner, "copy", "--to", source).exit_code == 2  # --from is required
    # the group's options name nothing for a copy: refused rather than ignored
    before = run(runner, "--tenant", "t", "copy", "--from", source, "--to", f"sqlite:///{missing}")
    assert before.exit_code == 2 and "put --tenant / --project after `copy`" in before.output
    assert not missing.exists()


def test_credentials_are_never_printed(tmp_path: Path, runner: CliRunner) -> None:
    secret_uri = "mongodb://app:s3cret-pass-word@db.example.net/rag"
    result = run(runner, "copy", "--from", f"sqlite:///{tmp_path}/none.db", "--to", secret_uri)
    assert result.exit_code == 1
    assert "s3cret-pass-word" not in result.output + result.stderr
    assert "mongodb://app:***@db.example.net/rag" in result.stderr
    same = run(runner, "copy", "--from", secret_uri, "--to", secret_uri.replace("s3cret", "other"))
    assert same.exit_code == 1 and "same store" in same.stderr
    assert "s3cret" not in same.output + same.stderr
