"""Issue 20 item 11: text files that are not UTF-8 (Latin-1, Windows-1251, Shift JIS…) are
imported: the encoding is detected and recorded in the extraction record; UTF-8 stays what
it was, and binary data is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.extraction.records import ExtractionRecord

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
