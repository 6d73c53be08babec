"""Local text extraction with budgets and named errors. No model calls, no network.

Text-first: plain text and code, HTML, Jupyter notebooks and DOCX are extracted with the
standard library; PDF needs the optional ``pypdf`` (``pip install 'vancetope-rag[pdf]'``).
Extractors live in an :class:`ExtractorRegistry` so plugins can add more; the built-ins are
registered by :func:`default_registry` like any other extractor.
"""

from __future__ import annotations

import codecs
import io
import json
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from xml.etree import ElementTree

from vancetope_rag.domain.eligibility import (
    CODE_MIME_WHITELIST,
    OCTET_STREAM,
    guess_mime_type,
)
from vancetope_rag.errors import (
    ExtractionError,
    InvalidInputError,
    MissingDependencyError,
    RagError,
)

DEFAULT_MAX_CHARS = 2_000_000
HARD_MAX_CHARS = 10_000_000
#: Largest ``word/document.xml`` read from a DOCX, after decompression (zip-bomb guard).
MAX_DOCX_XML_BYTES = 50 * 1024 * 1024

#: Extracts text from a file's bytes; the second argument is the file's path (for messages).
Extractor = Callable[[bytes, str], str]

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
IPYNB_MIME = "application/x-ipynb+json"
PDF_MIME = "application/pdf"


class ExtractorDependencyMissing(ExtractionError, MissingDependencyError):
    """An extractor needs an optional dependency; ``extra`` names what to install."""

    code = "EXTRACT_DEPENDENCY_MISSING"

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(what, extra)


class UnsupportedTypeError(ExtractionError):
    """No extractor handles the file's MIME type (images, archives, unknown binaries...)."""

    code = "EXTRACT_UNSUPPORTED_TYPE"

    def __init__(self, message: str, *, mime_type: str) -> None:
        super().__init__(message)
        self.mime_type = mime_type


@dataclass(frozen=True)
class ExtractedText:
    """Text extracted from a file.

    Attributes:
        text: The extracted text, cut to the character budget.
        mime_type: The MIME type the extractor was chosen for (parameters removed).
        truncated: Whether ``text`` was cut to fit the budget.
        chars: Number of characters in ``text``.
        max_chars: The effective budget after clamping to :data:`HARD_MAX_CHARS`.
    """

    text: str
    mime_type: str
    truncated: bool
    chars: int
    max_chars: int = DEFAULT_MAX_CHARS


def _essence(mime_type: str) -> str:
    return mime_type.split(";", 1)[0].strip().lower()


def _extension(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _fail(path: str, reason: str) -> ExtractionError:
    return ExtractionError(f"cannot extract text from {path!r}: {reason}")


class ExtractorRegistry:
    """Maps MIME types (exact or ``major/*``) and file extensions to extractors.

    Lookup order in :meth:`find`: the exact MIME type; for ``+json`` / ``+xml`` suffixes the
    base type (``application/json`` / ``application/xml``); the ``major/*`` wildcard; then the
    path's extension. A later registration for the same key replaces the earlier one.
    """

    def __init__(self) -> None:
        self._by_mime: dict[str, Extractor] = {}
        self._by_extension: dict[str, Extractor] = {}

    def register(
        self,
        mime_types: Iterable[str],
        extractor: Extractor,
        *,
        extensions: Iterable[str] = (),
    ) -> None:
        """Register an extractor.

        Args:
            mime_types: MIME types it handles; ``text/*`` style wildcards are allowed.
            extractor: Called as ``extractor(data, path)``; returns the text or raises
                :class:`~vancetope_rag.errors.ExtractionError`.
            extensions: File extensions it handles when the MIME type does not match
                (``".docx"`` or ``"docx"``, case-insensitive).
        """
        for mime in mime_types:
            self._by_mime[_essence(mime)] = extractor
        for ext in extensions:
            ext = ext.lower()
            self._by_extension[ext if ext.startswith(".") else f".{ext}"] = extractor

    def find(self, mime: str | None, path: str) -> Extractor | None:
        """Return the extractor for a MIME type and path, or ``None`` if none fits.

        Args:
            mime: The file's MIME type (parameters and case are ignored), or ``None``.
            path: The file's path; its extension is the fallback key.
        """
        if mime:
            essence = _essence(mime)
            major, _, minor = essence.partition("/")
            candidates = [essence]
            for suffix in ("json", "xml"):
                if minor.endswith(f"+{suffix}"):
                    candidates.append(f"application/{suffix}")
            candidates.append(f"{major}/*")
            for key in candidates:
                if key in self._by_mime:
                    return self._by_mime[key]
        return self._by_extension.get(_extension(path))

    def supported(self) -> list[str]:
        """Registered MIME types and extensions, sorted, for messages and diagnostics."""
        return sorted(self._by_mime) + sorted(self._by_extension)


def extract_text(
    data: bytes,
    *,
    path: str,
    mime_type: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    registry: ExtractorRegistry | None = None,
) -> ExtractedText:
    """Extract text from a file's bytes, within a character budget.

    Args:
        data: The file content.
        path: The file's path, for the extension fallback and for messages.
        mime_type: The file's MIME type; guessed from ``path`` when ``None``.
        max_chars: Character budget; clamped to :data:`HARD_MAX_CHARS`.
        registry: Extractors to use; :func:`default_registry` when ``None``.

    Returns:
        The text, cut to the budget, and whether it was cut.

    Raises:
        UnsupportedTypeError: No extractor handles the type (e.g. ``image/png``).
        ExtractorDependencyMissing: The extractor needs an extra that is not installed.
        ExtractionError: The content is not valid for its type (not UTF-8, NUL bytes,
            broken DOCX, DTD in XML, ...).
        InvalidInputError: ``max_chars`` is not a positive integer.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InvalidInputError(f"max_chars must be a positive integer, got {max_chars!r}")
    budget = min(max_chars, HARD_MAX_CHARS)
    registry = registry if registry is not None else default_registry()
    mime = _essence(mime_type) if mime_type else guess_mime_type(path)
    extractor = registry.find(mime, path)
    if extractor is None and mime == OCTET_STREAM:
        # Unknown extension: accept it if it is clean UTF-8 text (README-like files).
        text = _sniff_text(data)
        if text is not None:
            return _budgeted(text, "text/plain", budget)
    if extractor is None:
        raise _unsupported(path, mime, registry)
    try:
        text = extractor(data, path)
    except RagError:
        raise
    except Exception as exc:  # a plugin's bug must not escape as a bare error
        raise _fail(path, f"the {mime} extractor failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str):
        raise _fail(path, f"the {mime} extractor returned {type(text).__name__}, not str")
    return _budgeted(text, mime, budget)


def _budgeted(text: str, mime: str, budget: int) -> ExtractedText:
    truncated = len(text) > budget
    if truncated:
        text = text[:budget]
    return ExtractedText(
        text=text, mime_type=mime, truncated=truncated, chars=len(text), max_chars=budget
    )


def _unsupported(path: str, mime: str, registry: ExtractorRegistry) -> UnsupportedTypeError:
    shown = [key for key in registry.supported() if key not in CODE_MIME_WHITELIST]
    return UnsupportedTypeError(
        f"cannot extract text from {path!r}: unsupported type {mime}. Extractors exist for "
        f"{', '.join(shown)} and {len(CODE_MIME_WHITELIST)} code and data types such as "
        "application/json and application/yaml. Convert the file to text, or mark it "
        "ragEnabled=false",
        mime_type=mime,
    )


def _sniff_text(data: bytes) -> str | None:
    try:
        return decode_text(data, "")
    except ExtractionError:
        return None


# --- built-in extractors ------------------------------------------------------------------


def decode_text(data: bytes, path: str) -> str:
    """Decode text: strict UTF-8 (BOM stripped), or UTF-16/UTF-32 when a BOM says so.

    Args:
        data: The file content.
        path: The file's path, for messages.

    Raises:
        ExtractionError: The data has NUL bytes or is not valid in its encoding.
    """
    start = 0
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        encoding = "utf-32"
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8"
        start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        nul = data.find(b"\x00")
        if nul >= 0:
            raise _fail(
                path,
                f"binary data (NUL byte at offset {nul}), not text; mark it ragEnabled=false",
            )
    try:
        text = data[start:].decode(encoding) if start else data.decode(encoding)
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        raise _fail(
            path,
            f"not {encoding.upper()} text (invalid byte 0x{data[offset]:02x} at offset "
            f"{offset}); convert the file to UTF-8 or mark it ragEnabled=false",
        ) from None
    if "\x00" in text:
        raise _fail(path, "binary data (NUL character), not text; mark it ragEnabled=false")
    return text


_BLOCK_TAGS = frozenset(
    {
        *("address", "article", "aside", "blockquote", "body", "br", "caption", "dd"),
        *("details", "div", "dl", "dt", "figcaption", "figure", "footer", "form"),
        *("h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol"),
        *("p", "pre", "section", "summary", "table", "tbody", "td", "th", "thead"),
        *("title", "tr", "ul"),
    }
)
_SKIPPED_TAGS = frozenset({"script", "style", "template"})


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def _newline(self) -> None:
        if self.parts and not self.parts[-1].endswith("\n"):
            self.parts.append("\n")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self._newline()
            self._pre += tag == "pre"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCK_TAGS and tag != "br":
            self._newline()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_data(self, data: str) -> None:
        if self._skip or not data:
            return
        if not self._pre:
            collapsed = " ".join(data.split())
            separable = not self._at_line_start() and not self.parts[-1].endswith(" ")
            lead = " " if data[0].isspace() and separable else ""
            trail = " " if collapsed and data[-1].isspace() else ""
            data = lead + collapsed + trail
        if data:
            self.parts.append(data)

    def _at_line_start(self) -> bool:
        return not self.parts or self.parts[-1].endswith("\n")

    def text(self) -> str:
        lines = [line.rstrip() for line in "".join(self.parts).split("\n")]
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip("\n")


def extract_html(data: bytes, path: str) -> str:
    """Visible text of an HTML page: no scripts or styles, one line per block element."""
    parser = _HtmlText()
    parser.feed(decode_text(data, path))
    parser.close()
    return parser.text()


def extract_ipynb(data: bytes, path: str) -> str:
    """Markdown and code cell sources of a Jupyter notebook (nbformat 4); outputs skipped."""
    try:
        notebook: Any = json.loads(decode_text(data, path))
    except (ValueError, RecursionError) as exc:
        raise _fail(path, f"not a valid notebook (invalid JSON: {exc})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise _fail(path, "not a valid notebook (no 'cells' list; only nbformat 4 is supported)")
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
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            try:
                info = archive.getinfo("word/document.xml")
            except KeyError:
                raise _fail(path, "not a DOCX file (no word/document.xml)") from None
            if info.file_size > MAX_DOCX_XML_BYTES:
                raise _docx_too_large(path)
            with archive.open(info) as member:
                xml = member.read(MAX_DOCX_XML_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError) as exc:
        raise _fail(path, f"not a readable DOCX file ({exc})") from None
    if len(xml) > MAX_DOCX_XML_BYTES:
        raise _docx_too_large(path)
    if xml.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, b"\x00")):
        raise _fail(path, "word/document.xml is not UTF-8 encoded")
    upper = xml.upper()
    if b"<!DOCTYPE" in upper or b"<!ENTITY" in upper:
        # Entity expansion and external entities are how XML bombs and file reads happen.
        raise _fail(path, "the DOCX contains a DTD or entity declaration, which is refused")
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
        raise _fail(path, f"word/document.xml is not well-formed XML ({exc})") from None
    return "".join(parts).strip("\n")


def _docx_too_large(path: str) -> ExtractionError:
    return _fail(path, f"word/document.xml is larger than {MAX_DOCX_XML_BYTES} bytes unpacked")


def extract_pdf(data: bytes, path: str) -> str:
    """Text layer of a PDF, pages separated by blank lines; needs the ``pdf`` extra."""
    try:
        import pypdf  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise ExtractorDependencyMissing("PDF text extraction", "pdf") from None
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise _fail(path, "the PDF is encrypted")
        pages = [page.extract_text() or "" for page in reader.pages]
    except RagError:
        raise
    except Exception as exc:  # pypdf raises many types for broken files
        raise _fail(path, f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    return "\n\n".join(page.strip() for page in pages if page.strip())


#: The built-in extractors as (MIME types, extractor, extensions), registered in this order.
DEFAULT_EXTRACTORS: tuple[tuple[tuple[str, ...], Extractor, tuple[str, ...]], ...] = (
    (("text/*", *sorted(CODE_MIME_WHITELIST)), decode_text, ()),
    (("text/html", "application/xhtml+xml"), extract_html, (".html", ".htm", ".xhtml")),
    ((IPYNB_MIME,), extract_ipynb, (".ipynb",)),
    ((DOCX_MIME,), extract_docx, (".docx",)),
    ((PDF_MIME, "application/x-pdf"), extract_pdf, (".pdf",)),
)


def default_registry() -> ExtractorRegistry:
    """A new registry holding the built-in extractors; each call returns a fresh one."""
    registry = ExtractorRegistry()
    for mime_types, extractor, extensions in DEFAULT_EXTRACTORS:
        registry.register(mime_types, extractor, extensions=extensions)
    return registry
