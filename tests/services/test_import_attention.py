"""A file replaced by a broken copy: its document stays indexed from the last
good text, counted as done, and the extraction error stays in view ("needs attention") through
any number of reindexes, until an import reads the file again.

Real SQLite store, real PDF extraction, the lexical ``hashing`` provider, the real indexer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import filemakers as fm
from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.domain.records import IndexState

GOOD = ["Cover", "Harbour dues rise in spring"]


@pytest.fixture
def app(make_app: object) -> RagApp:
    made: RagApp = make_app()  # type: ignore[operator]
    made.bring(T, P)
    return made


def index(app: RagApp) -> None:
    app.scheduler.run_until_idle(stop_when_nothing_claimable=True)


def broken_copy(app: RagApp, folder: Path) -> None:
    """report.pdf imported and indexed, then replaced by an encrypted copy and imported."""
    (folder / "report.pdf").write_bytes(fm.text_pdf(GOOD))
    app.importer.import_directory(T, P, folder)
    index(app)
    (folder / "report.pdf").write_bytes(fm.encrypted_pdf("Harbour dues rise in spring"))
    summary = app.importer.import_directory(T, P, folder)
    assert "encrypted" in summary.failed_files[0].reason


def test_a_reindex_keeps_the_extraction_error_of_a_broken_copy(app: RagApp, tmp_path: Path) -> None:
    broken_copy(app, tmp_path)
    for _ in range(2):  # a reindex, and another: the reason is never lost
        app.project_rags.reindex(T, P)
        index(app)
        doc = app.documents.get_by_path(T, P, "documents/report.pdf")
        assert doc is not None and doc.index_state is IndexState.INDEXED
        assert "spring" in doc.content  # the last good text
        assert "encrypted" in (doc.extraction_error or "")
        status = app.project_rags.status(T, P)
        assert status.documents["indexed"] == 1 and status.documents["failed"] == 0
        assert status.progress is not None and status.progress.indexing.done == 1
        [attention] = status.needs_attention
        assert attention.path == "documents/report.pdf" and "encrypted" in attention.error
        assert status.to_json()["needsAttention"] == [
            {"path": "documents/report.pdf", "error": attention.error}
        ]


def test_a_readable_file_again_clears_the_attention(app: RagApp, tmp_path: Path) -> None:
    broken_copy(app, tmp_path)
    (tmp_path / "report.pdf").write_bytes(fm.text_pdf(["Harbour dues fall in autumn"]))
    assert app.importer.import_directory(T, P, tmp_path).updated == 1
    index(app)
    doc = app.documents.get_by_path(T, P, "documents/report.pdf")
    assert doc is not None and doc.extraction_error is None and "autumn" in doc.content
    assert app.project_rags.status(T, P).needs_attention == []


def test_the_same_good_bytes_again_clear_the_attention(app: RagApp, tmp_path: Path) -> None:
    """The good file put back unchanged: same text, nothing to embed, error gone."""
    broken_copy(app, tmp_path)
    (tmp_path / "report.pdf").write_bytes(fm.text_pdf(GOOD))
    assert app.importer.import_directory(T, P, tmp_path).unchanged == 1
    assert app.project_rags.status(T, P).needs_attention == []


def test_a_file_never_readable_stays_failed_not_attention(app: RagApp, tmp_path: Path) -> None:
    (tmp_path / "locked.pdf").write_bytes(fm.encrypted_pdf("secret"))
    app.importer.import_directory(T, P, tmp_path)
    app.project_rags.reindex(T, P)
    index(app)
    status = app.project_rags.status(T, P)
    assert status.documents["failed"] == 1 and status.needs_attention == []


def test_cli_status_shows_what_needs_attention(app: RagApp, tmp_path: Path, store_uri: str) -> None:
    broken_copy(app, tmp_path)
    app.project_rags.reindex(T, P)
    index(app)
    runner = CliRunner()
    base = ["--store", store_uri, "--tenant", T, "--project", P, "status"]
    shown = runner.invoke(cli, base)
    assert shown.exit_code == 0, shown.output
    assert "needs attention: 1" in shown.output
    assert "documents/report.pdf" in shown.output and "encrypted" in shown.output
    data = json.loads(runner.invoke(cli, [*base, "--json"]).output)
    assert [a["path"] for a in data["needsAttention"]] == ["documents/report.pdf"]
