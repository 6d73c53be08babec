"""The built-in extractors of text formats: plain text, code and HTML (UTF-8, else the
encoding an HTML page declares, else the detected legacy encoding, by
``charset-normalizer``), Jupyter notebooks (UTF-8, as their format says) and DOCX (the
standard library).
"""

from __future__ import annotations

import codecs
import io
import json
import zipfile
from typing import Any
from xml.etree import ElementTree

from vancetope_rag.default_plugins.extractors.guards import ENCRYPTED, OLE_MAGIC
from vancetope_rag.domain.eligibility import CODE_MIME_WHITELIST
from vancetope_rag.errors import ExtractionError
from vancetope_rag.extraction.encoding import declared_encoding
from vancetope_rag.extraction.html import html_to_text
from vancetope_rag.extraction.registry import (
    Extraction,
    RegisterExtractor,
    Section,
    decode_any,
    decode_text,
    extraction_error,
    read_text,
)

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
IPYNB_MIME = "application/x-ipynb+json"
#: Largest ``word/document.xml`` read from a DOCX, after decompression (zip-bomb guard).
MAX_DOCX_XML_BYTES = 50 * 1024 * 1024


# --- HTML -------------------------------------------------------------------------------------


def extract_html(data: bytes, path: str) -> Extraction:
    """Visible text of an HTML page (:func:`html_to_text` of the decoded bytes: UTF-8, else
    the encoding the page declares, else the one detected); the encoding is recorded."""
    text, encoding = decode_any(data, path, declared=declared_encoding(data))
    return Extraction((Section(html_to_text(text)),), encoding=encoding)


# --- notebooks --------------------------------------------------------------------------------


def extract_ipynb(data: bytes, path: str) -> str:
    """Markdown and code cell sources of a Jupyter notebook (nbformat 4); outputs skipped."""
    try:
        notebook: Any = json.loads(decode_text(data, path))
    except (ValueError, RecursionError) as exc:
        raise extraction_error(path, f"not a valid notebook (invalid JSON: {exc})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise extraction_error(
            path, "not a valid notebook (no 'cells' list; only nbformat 4 is supported)"
        )
    metadata = notebook.get("metadata")
    language = ""
    if isinstance(metadata, dict) and isinstance(metadata.get("language_info"), dict):
        language = str(metadata["language_info"].get("name") or "")
    blocks: list[str] = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("markdown", "code"):
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        if not text.strip():
            continue
        if cell["cell_type"] == "code":
            text = f"```{language}\n{text.rstrip()}\n```"
        blocks.append(text.strip("\n"))
    return "\n\n".join(blocks)


# --- DOCX -------------------------------------------------------------------------------------


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# Skipped with their content: properties (where w:tab is a tab stop, not a tab character) and
# the fallback copy of alternate content, which would repeat text-box text.
_DOCX_SKIPPED = frozenset(
    {
        f"{_W}pPr",
        f"{_W}rPr",
        f"{_W}sectPr",
        f"{_W}tblPr",
        "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback",
    }
)


def extract_docx(data: bytes, path: str) -> str:
    """Paragraphs of a DOCX's main document, one per line; DTDs and entities are refused."""
    if data.startswith(OLE_MAGIC):
        # A password-protected Office file is an OLE container around the encrypted zip.
        raise extraction_error(path, ENCRYPTED)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                info = archive.getinfo("word/document.xml")
            except KeyError:
                raise extraction_error(path, "not a DOCX file (no word/document.xml)") from None
            if info.file_size > MAX_DOCX_XML_BYTES:
                raise _docx_too_large(path)
            with archive.open(info) as member:
                xml = member.read(MAX_DOCX_XML_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError) as exc:
        raise extraction_error(path, f"not a readable DOCX file ({exc})") from None
    if len(xml) > MAX_DOCX_XML_BYTES:
        raise _docx_too_large(path)
    if xml.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, b"\x00")):
        raise extraction_error(path, "word/document.xml is not UTF-8 encoded")
    upper = xml.upper()
    if b"<!DOCTYPE" in upper or b"<!ENTITY" in upper:
        # Entity expansion and external entities are how XML bombs and file reads happen.
        raise extraction_error(
            path, "the DOCX contains a DTD or entity declaration, which is refused"
        )
    parser: ElementTree.XMLPullParser[ElementTree.Element] = ElementTree.XMLPullParser(
        events=("start", "end")
    )
    parts: list[str] = []
    skipping = 0
    try:
        parser.feed(xml)
        parser.close()
        for item in parser.read_events():
            event, element = item[0], item[-1]
            if not isinstance(element, ElementTree.Element):
                continue
            tag = element.tag
            if tag in _DOCX_SKIPPED:
                skipping += 1 if event == "start" else -1
            elif skipping:
                continue
            elif event == "start":
                if tag == f"{_W}tab":
                    parts.append("\t")
                elif tag in (f"{_W}br", f"{_W}cr"):
                    parts.append("\n")
            elif tag == f"{_W}t":
                parts.append(element.text or "")
            elif tag == f"{_W}p":
                parts.append("\n")
    except ElementTree.ParseError as exc:
        raise extraction_error(path, f"word/document.xml is not well-formed XML ({exc})") from None
    return "".join(parts).strip("\n")


def _docx_too_large(path: str) -> ExtractionError:
    return extraction_error(
        path, f"word/document.xml is larger than {MAX_DOCX_XML_BYTES} bytes unpacked"
    )


# --- registration -----------------------------------------------------------------------------


def register(register: RegisterExtractor) -> None:
    """Register the text, HTML, notebook and DOCX extractors."""
    # Order matters: IPYNB_MIME is one of the code/data types decoded as text, and the
    # notebook extractor registered after it replaces that entry.
    # Strict decoding is linear in the file and cannot hang: no worker-process round trip.
    # The names are the ones these extractors had when their names came from their module
    # paths: stored extraction records carry them, so a changed name would re-read every file.
    # Version 2 detects a legacy encoding when a file is not UTF-8 (version 1 refused it):
    # the new fingerprint re-reads the files of these types, and only those.
    register(
        ("text/*", *sorted(CODE_MIME_WHITELIST)),
        read_text,
        isolated=False,
        name="vancetope_rag.extract.decode_text",
        version="2",
    )
    register(
        ("text/html", "application/xhtml+xml"),
        extract_html,
        extensions=(".html", ".htm", ".xhtml"),
        name="vancetope_rag.default_plugins.extractors.extract_html",
        version="2",  # reads a declared or detected legacy encoding (version 1 refused it)
    )
    register(
        (IPYNB_MIME,),
        extract_ipynb,
        extensions=(".ipynb",),
        name="vancetope_rag.default_plugins.extractors.extract_ipynb",
    )
    register(
        (DOCX_MIME,),
        extract_docx,
        extensions=(".docx",),
        name="vancetope_rag.default_plugins.extractors.extract_docx",
    )
