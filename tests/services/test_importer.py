"""DocumentImporter: files in, documents out, every skipped file with its reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.extraction.registry import ExtractorRegistry
from vancetope_rag.services.extraction import ExtractionService
from vancetope_rag.services.importer import DocumentImporter, ImportSource


def test_directory_import_creates_updates_and_skips(app: RagApp, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("alpha")
    (root / "b.txt").write_text("beta")
    (root / ".hidden.md").write_text("never imported")
    (root / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    os.symlink(root / "b.txt", root / "link.txt")

    first = app.importer.import_directory(T, P, root, prefix="documents")
    assert (first.created, first.updated, first.unchanged) == (2, 0, 0)
    assert {s.path for s in first.skipped_files} == {"link.txt"}
    assert "symbolic link" in first.to_json()["skippedFiles"][0]["reason"]  # type: ignore[index]
    # An image without OCR is no silence: a failed document that says why.
    assert [(f.path, "no text layer" in f.reason) for f in first.failed_files] == [
        ("pic.png", True)
    ]
    docs = {d.path: d for d in app.documents.list_documents(T, P)}
    assert sorted(docs) == ["documents/b.txt", "documents/notes/a.md", "documents/pic.png"]
    assert docs["documents/pic.png"].index_state == "failed"
    assert first.by_type["png"].failed == 1 and first.by_type["md"].created == 1

    (root / "b.txt").write_text("beta, changed")
    again = app.importer.import_directory(T, P, root)
    assert (again.created, again.updated, again.unchanged, again.skipped) == (0, 1, 1, 1)
    assert again.failed == 1


def test_one_bad_file_loses_nothing_else(app: RagApp) -> None:
    importer = DocumentImporter(
        documents=app.documents,
        extractors=app.extractors,
        extraction=ExtractionService(registry=app.extractors),
        max_text_chars=1000,
        max_bytes=10,
    )
    summary = importer.import_sources(
        T,
        P,
        [
            ImportSource("ok.md", data=b"fine"),
            ImportSource("big.md", data=b"x" * 11),
            ImportSource("bad.txt", data=b"caf\x00\xe9"),  # binary: Latin-1 is read now
            ImportSource("also-ok.md", data=b"also fine"),
        ],
    )
    assert summary.created == 2 and not summary.skipped_files
    reasons = {s.path: s.reason for s in summary.failed_files}
    assert reasons.keys() == {"big.md", "bad.txt"}
    assert "larger than" in reasons["big.md"] and "not text" in reasons["bad.txt"]
    states = {d.path: (d.index_state, d.content) for d in app.documents.list_documents(T, P)}
    assert states == {
        "documents/ok.md": ("pending", "fine"),
        "documents/also-ok.md": ("pending", "also fine"),
        "documents/big.md": ("failed", ""),
        "documents/bad.txt": ("failed", ""),
    }


@pytest.mark.parametrize("registered", [True, False])
def test_extracts_through_the_given_registry(app: RagApp, registered: bool) -> None:
    """File types come from the app's registry (filled by plugins), not a built-in default."""
    registry = ExtractorRegistry()
    if registered:
        registry.register(["message/rfc822"], lambda data, path: data.decode().upper())
    importer = DocumentImporter(
        documents=app.documents,
        extractors=registry,
        extraction=ExtractionService(registry=registry),
        max_text_chars=1000,
    )
    summary = importer.import_sources(T, P, [ImportSource("hi.eml", data=b"hello")])
    doc = app.documents.get_by_path(T, P, "documents/hi.eml")
    if registered:
        assert summary.created == 1
        assert doc is not None and doc.content == "HELLO"
    else:
        assert "unsupported type message/rfc822" in summary.skipped_files[0].reason
        assert doc is None
