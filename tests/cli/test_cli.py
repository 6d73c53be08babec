"""The `vancetope-rag` CLI end to end on a real SQLite store (hashing provider: fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vancetope_rag.cli import cli


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "cats.md").write_text("Cats purr when they are content and sleep a lot.")
    (root / "dogs.txt").write_text("Dogs bark at strangers and love long walks.")
    (root / "code.py").write_text("def purr():\n    return 'cats'\n")
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00")
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me".encode("latin-1"))
    (root / ".hidden.md").write_text("secret")
    return root


def _enable(run) -> None:
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")


def test_import_index_query_context_status(run, docs: Path) -> None:
    _enable(run)
    imported = json.loads(run("import", str(docs), "--json").stdout)
    # Latin-1 is read in its detected encoding.
    assert imported["created"] == 4 and imported["skippedFiles"] == []
    # Files that cannot be read are documents in state failed, with the reason.
    assert {s["path"] for s in imported["failedFiles"]} == {"image.png"}
    reasons = " ".join(s["reason"] for s in imported["failedFiles"])
    assert "no text layer" in reasons
    assert imported["byType"]["png"]["failed"] == 1 and imported["byType"]["md"]["created"] == 1

    indexed = run("index", "--json", ok=False)
    assert indexed.exit_code == 1  # the project has failed documents: index says so
    summary = json.loads(indexed.stdout)
    assert summary["indexed"] == 4 and summary["failed"] == 1
    assert {f["path"] for f in summary["failures"]} == {"documents/image.png"}
    assert summary["embeddedTexts"] == 4 and summary["cacheHits"] == 0

    hits = json.loads(run("query", "do cats sleep a lot", "--json").stdout)
    assert hits[0]["path"] == "documents/notes/cats.md"
    base = {"label", "source", "path", "kind", "score", "text", "sourceRef"}
    # hybrid by default: the fusion's ranks ride along; dense answers with the plain fields
    assert set(hits[0]) == base | {"fusedScore", "denseRank", "lexicalRank"}
    assert hits[0]["denseRank"] == 1 and hits[0]["lexicalRank"] == 1
    dense = json.loads(run("query", "do cats sleep a lot", "--mode", "dense", "--json").stdout)
    assert set(dense[0]) == base and dense[0]["path"] == "documents/notes/cats.md"

    status = json.loads(run("status", "--json").stdout)
    assert status["exists"] is True and status["chunkCount"] == 4
    assert status["embeddingProvider"] == "hashing"
    assert status["documents"]["indexed"] == 4

    # AutoInject is OFF by default: nothing printed, exit 0.
    assert run("context", "do cats sleep a lot").stdout == ""
    run("settings", "set", "rag.autoInject.enabled", "ON")
    run("settings", "set", "rag.minScore", "0.1")
    block = run("context", "do cats sleep a lot").stdout
    assert block.startswith("<rag-context>") and "documents/notes/cats.md" in block


def test_reimport_updates_changed_files_only(run, docs: Path) -> None:
    _enable(run)
    run("import", str(docs))
    run("index", ok=False)  # exit 1: the image could not be read
    (docs / "dogs.txt").write_text("Dogs bark, wag their tails and fetch sticks.")
    again = json.loads(run("import", str(docs), "--json").stdout)
    assert (again["created"], again["updated"], again["unchanged"]) == (0, 1, 3)
    assert again["failed"] == 1
    summary = json.loads(run("index", "--json", ok=False).stdout)
    assert summary["indexed"] == 1 and summary["embeddedTexts"] == 1


def test_index_without_embeddings_says_how_to_enable(run, docs: Path) -> None:
    run("import", str(docs))
    result = run("index", ok=False)
    assert result.exit_code == 1
    assert "ai.embedding.provider" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("query", "x", "--rag", "nope"), "no RAG 'nope'"),
        (("settings", "set", "rag.topK", "abc"), "rag.topK"),
        (("settings", "set", "no.such.key", "1"), "unknown setting"),
        (("query", "   "), ""),
    ],
)
def test_bad_input_exits_non_zero(run, args: tuple[str, ...], message: str) -> None:
    _enable(run)
    run("reindex")  # creates the project and its _documents RAG
    result = run(*args, ok=False)
    assert result.exit_code != 0
    assert message in result.stderr


def test_corrupt_store_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database at all" * 10)
    before = bad.read_bytes()
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{bad}", "status"])
    assert result.exit_code == 1
    assert "not a SQLite database" in result.stderr
    assert bad.read_bytes() == before


def test_store_in_missing_folder_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", f"sqlite:///{tmp_path}/no/such/rag.db", "status"])
    assert result.exit_code == 1
    assert "does not exist" in result.stderr


def test_store_path_not_writable(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--store", "sqlite:////proc/vancetope/rag.db", "status"])
    assert result.exit_code == 1
    assert "cannot" in result.stderr


def test_api_key_is_never_printed(run) -> None:
    out = run("settings", "set", "ai.embedding.apiKey", "sk-supersecret", "--scope", "tenant")
    assert "sk-supersecret" not in out.stdout
    listing = run("settings", "get", "--scope", "tenant").stdout
    assert "sk-supersecret" not in listing and "********" in listing


def test_index_with_misconfigured_provider_fails_clearly(run, docs: Path) -> None:
    run("import", str(docs))
    run("settings", "set", "ai.embedding.provider", "openai", "--scope", "tenant")
    result = run("index", ok=False)
    assert result.exit_code == 1
    assert "ai.embedding.apiKey is required" in result.stderr


def test_a_path_with_a_nul_character_is_a_usage_error(tmp_path: Path) -> None:
    """click's Path type stats the value, and a NUL made that a bare ValueError (the property
    test of the CLI found it): a usage error naming the option instead."""
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]
    for args in (["context", "x", "--recipe", "r\0.yaml"], ["import", "d\0"]):
        result = CliRunner().invoke(cli, [*base, *args])
        assert result.exit_code == 2, (args, repr(result.exception))
        assert "NUL" in result.output


def test_a_path_the_file_system_cannot_name_is_a_usage_error(tmp_path: Path) -> None:
    """A lone surrogate (reachable from Python callers, not from a Linux argv, whose bytes
    decode with surrogateescape) made ``os.stat`` raise a bare UnicodeEncodeError; the
    property test of the CLI found it. A usage error naming the option instead."""
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]
    for args in (["context", "x", "--recipe", "r\ud800.yaml"], ["import", "d\ud800"]):
        result = CliRunner().invoke(cli, [*base, *args])
        assert result.exit_code == 2, (args, repr(result.exception))
        assert "cannot be a file name" in result.output
