"""Text files that are not UTF-8 (Latin-1, Windows-1251, Shift JIS…) are
imported: the encoding is detected and recorded in the extraction record; UTF-8 stays what
it was, and binary data is still refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fakes import P, T
from filemakers import text_pdf, xlsx
from vancetope_rag.app import RagApp
from vancetope_rag.default_plugins.extractors.books import extract_latex
from vancetope_rag.extraction.html import html_to_text
from vancetope_rag.extraction.records import ExtractionRecord
from vancetope_rag.extraction.registry import (
    CODE_MIME_WHITELIST,
    Extraction,
    ExtractorRegistry,
    decode_text,
)
from vancetope_rag.plugins import get_plugin_manager

TEXTS = {
    "latin1.txt": ("Le café crème est très bon, à la française.", "latin-1", "cp1252"),
    "short.txt": ("caf\xe9 cr\xe8me", "latin-1", "cp1252"),
    "russian.md": ("Привет, как дела? Это тест кодировки.", "cp1251", "cp1251"),
    "polish.txt": ("Zażółć gęślą jaźń, żółw.", "cp1250", "cp1250"),
    "japanese.txt": ("こんにちは、世界。日本語のテキストです。", "shift_jis", "shift_jis"),
    "plain.txt": ("Plain UTF-8: naïve café.", "utf-8", "utf-8"),
}


@pytest.fixture
def imported(app: RagApp, tmp_path: Path) -> dict[str, tuple[str, ExtractionRecord | None]]:
    root = tmp_path / "docs"
    root.mkdir()
    for name, (text, encoding, _) in TEXTS.items():
        (root / name).write_bytes(text.encode(encoding))
    (root / "binary.txt").write_bytes(b"abc\x00\x01\x02")
    summary = app.importer.import_directory(T, P, root)
    assert [f.path for f in summary.failed_files] == ["binary.txt"]
    docs = app.documents.list_documents(T, P)
    return {
        d.path.removeprefix("documents/"): (d.content, ExtractionRecord.from_json(d.extraction))
        for d in docs
    }


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_non_utf8_text_is_decoded_and_its_encoding_recorded(
    imported: dict[str, tuple[str, ExtractionRecord | None]], name: str
) -> None:
    text, _, detected = TEXTS[name]
    content, record = imported[name]
    assert content == text
    assert record is not None and record.encoding == detected and not record.failed
    assert record.extractor == "vancetope_rag.extract.decode_text@2"


# HTML and LaTeX are text files too: a legacy encoding is detected for them as well, and an
# HTML page's own declaration (``<meta charset>``, ``<?xml encoding?>``) is taken first.
CAFE = "Le café crème est très bon, à la française. Déjà vu, naïve façade, garçon."
RUSSIAN = "Привет, как дела? Это тест кодировки."
MARKUP = {
    "undeclared.html": (f"<html><body><p>{CAFE}</p></body></html>", "latin-1", CAFE, "cp1252"),
    "declared.htm": (
        f'<html><head><meta charset="windows-1251"></head><body><p>{RUSSIAN}</p></body></html>',
        "cp1251",
        RUSSIAN,
        "cp1251",
    ),
    "http-equiv.html": (
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">'
        f"</head><body><p>{CAFE}</p></body></html>",
        "latin-1",
        CAFE,
        "cp1252",  # what browsers read iso-8859-1 as (WHATWG)
    ),
    "page.xhtml": (
        f'<?xml version="1.0" encoding="koi8-r"?><html><body><p>{RUSSIAN}</p></body></html>',
        "koi8_r",
        RUSSIAN,
        "koi8-r",
    ),
    "paper.tex": (
        f"\\documentclass{{article}}\\begin{{document}}\\section{{Café}}{CAFE}\\end{{document}}",
        "latin-1",
        CAFE,
        "cp1252",
    ),
}


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


@pytest.mark.parametrize("name", sorted(MARKUP))
def test_markup_in_a_legacy_encoding_is_decoded(app: RagApp, tmp_path: Path, name: str) -> None:
    source, encoding, shown, detected = MARKUP[name]
    root = _folder(tmp_path / "docs", {name: source.encode(encoding)})
    summary = app.importer.import_directory(T, P, root)
    assert summary.failed_files == [] and summary.created == 1
    doc = app.documents.get_by_path(T, P, f"documents/{name}")
    assert doc is not None and shown in doc.content
    record = ExtractionRecord.from_json(doc.extraction)
    assert record is not None and record.encoding == detected
    assert record.extractor.endswith("@2")


def test_a_wrong_declaration_does_not_win_over_valid_utf8(app: RagApp, tmp_path: Path) -> None:
    page = f'<meta charset="iso-8859-1"><p>{CAFE}</p>'.encode()
    root = _folder(tmp_path / "docs", {"utf8.html": page})
    app.importer.import_directory(T, P, root)
    doc = app.documents.get_by_path(T, P, "documents/utf8.html")
    assert doc is not None and CAFE in doc.content
    record = ExtractionRecord.from_json(doc.extraction)
    assert record is not None and record.encoding == "utf-8"


def _strict_html(data: bytes, path: str) -> str:
    return html_to_text(decode_text(data, path))


def _strict_latex(data: bytes, path: str) -> Extraction:
    decode_text(data, path)
    return extract_latex(data, path)


def _version_one_registry() -> ExtractorRegistry:
    """The extractors as they were before encodings were detected (strict UTF-8, version 1)."""
    registry = ExtractorRegistry()
    get_plugin_manager().hook.register_extractors(register=registry.register)
    register = registry.register
    text_types = ("text/*", *sorted(CODE_MIME_WHITELIST))
    register(text_types, decode_text, isolated=False, name="vancetope_rag.extract.decode_text")
    html = ("text/html", "application/xhtml+xml")
    name = "vancetope_rag.default_plugins.extractors.extract_html"
    register(html, _strict_html, extensions=(".html", ".htm", ".xhtml"), name=name)
    tex = ("application/x-tex", "application/x-latex", "text/x-tex", "text/x-latex")
    exts = (".tex", ".latex", ".ltx")
    register(tex, _strict_latex, extensions=exts, name="vancetope.latex", isolated=False)
    return registry


def test_the_new_versions_re_read_exactly_their_files(
    make_app: Callable[..., RagApp], tmp_path: Path
) -> None:
    files = {
        "latin1.txt": CAFE.encode("latin-1"),
        "utf8.md": f"# Notes\n\n{CAFE}".encode(),
        "latin1.html": f"<p>{CAFE}</p>".encode("latin-1"),
        "latin1.tex": f"\\section{{Notes}}{CAFE}".encode("latin-1"),
        "report.pdf": text_pdf(["a PDF the text extractors never read"]),
        "sheet.xlsx": xlsx({"S": [["café", 1]]}),
    }
    root = _folder(tmp_path / "docs", files)
    old = make_app(extractors=_version_one_registry())
    first = old.importer.import_directory(T, P, root)
    assert sorted(f.path for f in first.failed_files) == ["latin1.html", "latin1.tex", "latin1.txt"]
    before = {d.path: d.extraction for d in old.documents.list_documents(T, P)}
    old.close()

    new = make_app()
    second = new.importer.import_directory(T, P, root)
    assert second.failed_files == []
    after = {d.path: d for d in new.documents.list_documents(T, P)}
    reread = {p.removeprefix("documents/") for p in after if after[p].extraction != before[p]}
    assert reread == {"latin1.txt", "utf8.md", "latin1.html", "latin1.tex"}
    for name in ("latin1.txt", "latin1.html", "latin1.tex"):
        assert CAFE in after[f"documents/{name}"].content
