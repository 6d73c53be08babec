"""Pypdf's warnings about a damaged but readable PDF do not leak to stderr
(they went to the terminal of an ``import`` through logging's last-resort handler)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import P, T
from filemakers import text_pdf
from vancetope_rag.app import RagApp


def _wrong_startxref(pdf: bytes) -> bytes:
    at = pdf.rfind(b"startxref")
    return pdf[:at] + b"startxref\n999\n%%EOF\n"  # pypdf warns, then finds the objects itself


def test_a_damaged_pdf_imports_without_pypdf_output(
    app: RagApp, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pypdf")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "damaged.pdf").write_bytes(_wrong_startxref(text_pdf(["hello from a damaged PDF"])))
    summary = app.importer.import_directory(T, P, root)
    assert summary.created == 1 and summary.failed_files == []
    doc = app.documents.get_by_path(T, P, "documents/damaged.pdf")
    assert doc is not None and "hello from a damaged PDF" in doc.content
    out, err = capfd.readouterr()
    assert "startxref" not in err and "Object Streams" not in err
    assert "startxref" not in out
