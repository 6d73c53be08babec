"""Local text extraction: built-ins on real bytes, budgets, named errors, the registry.

The built-in extractors are a default plugin; every test extracts with the registry the
default plugins fill through ``register_extractors``, as the app does.
"""

from __future__ import annotations

import codecs
import importlib.util
import io
import json
import sys
import zipfile
from typing import Any

import pytest

import filemakers
from fakes import default_extractors
from vancetope_rag.default_plugins import extractors
from vancetope_rag.default_plugins.extractors import scans as extract_scans
from vancetope_rag.default_plugins.extractors import text as extract_text_formats
from vancetope_rag.errors import ExtractionError, InvalidInputError, MissingDependencyError
from vancetope_rag.extraction.registry import (
    DEFAULT_MAX_CHARS,
    HARD_MAX_CHARS,
    ExtractedText,
    ExtractorDependencyMissing,
    ExtractorRegistry,
    UnsupportedTypeError,
    decode_text,
    extract_text,
    read_text,
)

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(body: str, *, prolog: str = "") -> bytes:
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'{prolog}<w:document xmlns:w="{W_NS}"><w:body>{body}</w:body></w:document>'
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", document)
    return buffer.getvalue()


def make_pdf(text: str) -> bytes:
    return filemakers.text_pdf([text])


BUILTINS = default_extractors()  # never changed by a test


def extract(data: bytes, **kwargs: Any) -> ExtractedText:
    """:func:`extract_text` with the default plugins' extractors."""
    return extract_text(data, registry=BUILTINS, **kwargs)


# --- plain text ---------------------------------------------------------------------------


def test_utf8_text() -> None:
    result = extract("héllo wörld ✓\n".encode(), path="a.txt")
    assert result == ExtractedText(
        text="héllo wörld ✓\n",
        mime_type="text/plain",
        truncated=False,
        chars=14,
        extractor="vancetope_rag.extract.decode_text@2",
        encoding="utf-8",
    )


def test_utf8_bom_is_stripped() -> None:
    assert extract(codecs.BOM_UTF8 + b"abc", path="a.md").text == "abc"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_with_bom(encoding: str) -> None:
    data = "héllo ✓".encode(encoding)
    if encoding != "utf-16":
        bom = codecs.BOM_UTF16_LE if encoding.endswith("le") else codecs.BOM_UTF16_BE
        data = bom + data
    assert extract(data, path="a.txt").text == "héllo ✓"


def test_utf16_without_bom_is_refused() -> None:
    with pytest.raises(ExtractionError, match="NUL"):
        extract("hello".encode("utf-16-le"), path="a.txt")


def test_latin1_is_read_in_its_detected_encoding() -> None:
    # refused until the text extractor's version 2
    result = extract("café crème!".encode("latin-1"), path="notes/a.md")
    assert result.text == "café crème!" and result.encoding == "cp1252"


def test_strict_decoding_refuses_latin1_with_offset_and_advice() -> None:
    # decode_text, the strict helper HTML and notebooks decode with
    with pytest.raises(ExtractionError) as info:
        decode_text("café!".encode("latin-1"), "notes/a.md")
    message = str(info.value)
    assert "not UTF-8 text (invalid byte 0xe9 at offset 3)" in message
    assert "convert the file to UTF-8 or mark it ragEnabled=false" in message
    assert "'notes/a.md'" in message
    assert info.value.code == "EXTRACTION_FAILED"


def test_offset_counts_the_bom() -> None:
    with pytest.raises(ExtractionError, match=r"invalid byte 0xff at offset 5\)"):
        extract(codecs.BOM_UTF8 + b"ab\xffc", path="a.txt")


def test_nul_byte_is_refused() -> None:
    with pytest.raises(ExtractionError, match=r"NUL byte at offset 2"):
        extract(b"ab\x00cd", path="a.txt")


@pytest.mark.parametrize(
    ("mime", "expected_mime"),
    [
        ("text/plain; charset=utf-8", "text/plain"),
        ("TEXT/X-Unknown-Thing", "text/x-unknown-thing"),
        ("application/json", "application/json"),
        ("application/vnd.api+json", "application/vnd.api+json"),
        ("application/atom+xml", "application/atom+xml"),
        ("application/x-sh", "application/x-sh"),
        ("image/svg+xml", "image/svg+xml"),
    ],
)
def test_every_textual_type_is_decoded(mime: str, expected_mime: str) -> None:
    result = extract(b'{"a": 1}', path="x", mime_type=mime)
    assert (result.text, result.mime_type) == ('{"a": 1}', expected_mime)


def test_mime_type_is_guessed_from_the_path() -> None:
    assert extract(b"# hi", path="documents/a.md").mime_type == "text/markdown"


def test_unknown_extension_with_clean_text_is_plain_text() -> None:
    result = extract(b"MIT License\n", path="COPYING.v2")
    assert (result.text, result.mime_type) == ("MIT License\n", "text/plain")


# --- budgets ------------------------------------------------------------------------------


def test_truncation_flag_and_chars() -> None:
    result = extract(b"a" * 100, path="a.txt", max_chars=10)
    assert (result.text, result.truncated, result.chars, result.max_chars) == (
        "a" * 10,
        True,
        10,
        10,
    )
    exact = extract(b"a" * 10, path="a.txt", max_chars=10)
    assert (exact.truncated, exact.chars) == (False, 10)


def test_budget_counts_characters_not_bytes() -> None:
    result = extract("ééé".encode(), path="a.txt", max_chars=2)
    assert (result.text, result.truncated) == ("éé", True)


def test_budget_is_clamped_to_the_hard_cap() -> None:
    assert DEFAULT_MAX_CHARS <= HARD_MAX_CHARS
    result = extract(b"abc", path="a.txt", max_chars=HARD_MAX_CHARS * 10)
    assert result.max_chars == HARD_MAX_CHARS
    assert extract(b"abc", path="a.txt").max_chars == DEFAULT_MAX_CHARS


@pytest.mark.parametrize("max_chars", [0, -5, True])
def test_budget_must_be_positive(max_chars: int) -> None:
    with pytest.raises(InvalidInputError):
        extract(b"abc", path="a.txt", max_chars=max_chars)


# --- HTML ---------------------------------------------------------------------------------

HTML = b"""<!DOCTYPE html>
<html><head><title>The  Title</title>
<style>body { color: red }</style>
<script>var secret = "<p>not text</p>";</script></head>
<body>
  <h1>Heading &amp; more</h1>
  <p>First   paragraph with <b>bold</b> and <a href="#">a link</a>.</p>
  <p>Line one<br>Line two<br/>Line three</p>
  <ul><li>one</li><li>two</li></ul>
  <pre>  keep
    indent</pre>
  <div>caf&eacute; &#10003;</div>
</body></html>
"""


def test_html_visible_text_with_block_breaks() -> None:
    result = extract(HTML, path="page.html")
    assert result.mime_type == "text/html"
    assert result.text == (
        "The Title\n"
        "Heading & more\n"
        "First paragraph with bold and a link.\n"
        "Line one\nLine two\nLine three\n"
        "one\ntwo\n"
        "  keep\n    indent\n"
        "café ✓"
    )


def test_html_that_is_not_utf8_is_read_in_its_encoding_and_binary_is_refused() -> None:
    result = extract("<p>café crème</p>".encode("latin-1"), path="p.html")
    assert (result.text, result.encoding) == ("café crème", "cp1252")
    with pytest.raises(ExtractionError, match="binary data"):
        extract(b"<p>caf\xe9</p>\x00", path="p.html")


# --- notebooks ----------------------------------------------------------------------------


def test_ipynb_markdown_and_code_without_outputs() -> None:
    notebook = {
        "nbformat": 4,
        "metadata": {"language_info": {"name": "python"}},
        "cells": [
            {"cell_type": "markdown", "source": ["# Title\n", "Some prose."]},
            {
                "cell_type": "code",
                "source": "x = 1\nprint(x)\n",
                "outputs": [{"output_type": "stream", "text": ["OUTPUT-SHOULD-NOT-APPEAR"]}],
            },
            {"cell_type": "raw", "source": "RAW-SHOULD-NOT-APPEAR"},
            {"cell_type": "markdown", "source": []},
        ],
    }
    result = extract(json.dumps(notebook).encode(), path="nb.ipynb")
    assert result.mime_type == "application/x-ipynb+json"
    assert result.text == "# Title\nSome prose.\n\n```python\nx = 1\nprint(x)\n```"


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'{"cells": 3}', b"[" * 100_000])
def test_invalid_notebook_is_refused(data: bytes) -> None:
    with pytest.raises(ExtractionError, match="not a valid notebook"):
        extract(data, path="nb.ipynb")


# --- DOCX ---------------------------------------------------------------------------------


def test_docx_paragraphs_as_lines() -> None:
    body = (
        '<w:p><w:pPr><w:tabs><w:tab w:val="left" w:pos="720"/></w:tabs></w:pPr>'
        '<w:r><w:t>Hello</w:t></w:r><w:r><w:t xml:space="preserve"> world</w:t></w:r></w:p>'
        "<w:p><w:r><w:t>a</w:t><w:tab/><w:t>b</w:t><w:br/><w:t>c</w:t></w:r></w:p>"
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>cell &amp; text</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
        "<w:p><w:r><w:t>Ünïcode ✓</w:t></w:r></w:p>"
    )
    result = extract(make_docx(body), path="report.docx")
    assert result.mime_type == DOCX_MIME
    assert result.text == "Hello world\na\tb\nc\ncell & text\nÜnïcode ✓"


def test_docx_found_by_extension_when_mime_is_generic() -> None:
    data = make_docx("<w:p><w:r><w:t>x</w:t></w:r></w:p>")
    result = extract(data, path="r.DOCX", mime_type="application/octet-stream")
    assert result.text == "x"


@pytest.mark.parametrize(
    "prolog",
    [
        '<!DOCTYPE w:document [<!ENTITY e "boom">]>',
        '<!DOCTYPE w:document SYSTEM "file:///etc/passwd">',
        '<!doctype w:document [<!entity e "x">]>',
    ],
)
def test_docx_with_dtd_is_refused(prolog: str) -> None:
    data = make_docx("<w:p><w:r><w:t>x</w:t></w:r></w:p>", prolog=prolog)
    with pytest.raises(ExtractionError, match="DTD or entity"):
        extract(data, path="evil.docx")


def test_docx_zip_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_text_formats, "MAX_DOCX_XML_BYTES", 1000)
    data = make_docx("<w:p><w:r><w:t>" + "x" * 5000 + "</w:t></w:r></w:p>")
    with pytest.raises(ExtractionError, match="larger than 1000 bytes"):
        extract(data, path="bomb.docx")


def test_broken_docx_is_refused() -> None:
    with pytest.raises(ExtractionError, match="not a readable DOCX"):
        extract(b"PK\x03\x04 not really a zip", path="x.docx")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("other.xml", "<x/>")
    with pytest.raises(ExtractionError, match=r"no word/document\.xml"):
        extract(buffer.getvalue(), path="x.docx")
    with pytest.raises(ExtractionError, match="not well-formed"):
        extract(make_docx("<w:p>"), path="x.docx")


# --- PDF ----------------------------------------------------------------------------------


def test_pdf_without_pypdf_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # makes `import pypdf` fail
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(b"%PDF-1.4", path="a.pdf")
    error = info.value
    assert isinstance(error, ExtractionError)
    assert isinstance(error, MissingDependencyError)
    assert error.code == "EXTRACT_DEPENDENCY_MISSING"
    assert error.extra == "pdf"
    assert "pip install 'vancetope-rag[pdf]'" in str(error)


@pytest.mark.skipif(importlib.util.find_spec("pypdf") is None, reason="pypdf not installed")
def test_pdf_with_pypdf() -> None:
    result = extract(make_pdf("Hello PDF world"), path="a.pdf")
    assert result.mime_type == "application/pdf"
    assert "Hello PDF world" in result.text
    with pytest.raises(ExtractionError, match="not a readable PDF"):
        extract(b"%PDF-1.4 garbage", path="b.pdf")


# --- unsupported types --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "path", "mime"),
    [
        # PNG, JPEG, TIFF, WebP and GIF go to OCR (test_extract_scans.py); icons do not.
        (b"\x00\x00\x01\x00\x01\x00\x10\x10", "favicon.ico", None),
        (b"\x00\x00\x01\x00\x01\x00\x10\x10", "img", "image/x-icon"),
        (b"\x00\x01\x02binary", "blob.bin", "application/octet-stream"),
        (b"\xff\xfe\xfd", "blob", None),
        (b"PK\x03\x04", "a.zip", None),
    ],
)
def test_unsupported_binary_is_refused(data: bytes, path: str, mime: str | None) -> None:
    with pytest.raises(UnsupportedTypeError) as info:
        extract(data, path=path, mime_type=mime)
    message = str(info.value)
    assert "unsupported type" in message
    assert info.value.mime_type in message
    assert "text/*" in message and "text/html" in message and ".docx" in message
    assert isinstance(info.value, ExtractionError)
    assert info.value.code == "EXTRACT_UNSUPPORTED_TYPE"


# --- registry -----------------------------------------------------------------------------


def shout(data: bytes, path: str) -> str:
    return data.decode().upper()


def test_custom_extractor_in_a_fresh_registry() -> None:
    registry = ExtractorRegistry()
    registry.register(["application/x-custom"], shout, extensions=["CST"])
    by_mime = extract_text(b"hi", path="x", mime_type="application/x-custom", registry=registry)
    assert by_mime.text == "HI"
    assert registry.find(None, "dir/file.cst") is shout
    assert extract_text(b"ho", path="dir/file.cst", registry=registry).text == "HO"
    with pytest.raises(UnsupportedTypeError):
        extract(b"hi", path="x", mime_type="application/x-custom")


def test_there_is_no_registry_but_the_callers() -> None:
    # No module-level default: a caller that forgets the app's registry fails at once
    # instead of silently missing every plugin's extractors (an import that
    # built its own registry skipped `.eml` files although the app's registry knew them).
    with pytest.raises(TypeError, match="registry"):
        extract_text(b"hi", path="a.txt")  # type: ignore[call-arg]
    first = default_extractors()
    first.register(["text/plain"], shout)
    assert default_extractors().find("text/plain", "a.txt") is read_text
    assert extract(b"hi", path="a.txt").text == "hi"


def test_registry_lookup_order() -> None:
    registry = default_extractors()
    assert registry.find("text/html; charset=utf-8", "x.txt") is extractors.extract_html
    assert registry.find("application/ld+json", "x") is read_text
    assert registry.find("text/x-whatever", "x.docx") is read_text
    assert registry.find("application/octet-stream", "x.ipynb") is extractors.extract_ipynb
    assert registry.find("application/x-ipynb+json", "x") is extractors.extract_ipynb
    assert registry.find("image/png", "x.png") is extract_scans.extract_image
    assert registry.find("image/x-icon", "x.ico") is None


def test_html_to_text_is_the_html_extractor_on_a_string() -> None:
    html = HTML.decode()
    assert extractors.html_to_text(html) == extract(HTML, path="page.html").text
    assert extractors.html_to_text("<p>a</p><p>b &amp; c</p>") == "a\nb & c"


def test_plugin_failure_becomes_an_extraction_error() -> None:
    def broken(data: bytes, path: str) -> str:
        raise ValueError("boom")

    def wrong_type(data: bytes, path: str) -> str:
        return data  # type: ignore[return-value]

    registry = ExtractorRegistry()
    registry.register(["application/x-broken"], broken)
    registry.register(["application/x-wrong"], wrong_type)
    with pytest.raises(ExtractionError, match="ValueError: boom"):
        extract_text(b"x", path="x", mime_type="application/x-broken", registry=registry)
    with pytest.raises(ExtractionError, match="returned bytes, not str"):
        extract_text(b"x", path="x", mime_type="application/x-wrong", registry=registry)
