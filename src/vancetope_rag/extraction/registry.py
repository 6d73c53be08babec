"""Local text extraction with sections, budgets and named errors. No model calls here (the
OCR/vision backends are the scan extractors' business).

Extractors live in an :class:`ExtractorRegistry` that the app fills through the
``register_extractors`` hook. The built-in ones (text and code, HTML, notebooks, office files,
books, PDFs, images) are a default plugin, :mod:`vancetope_rag.default_plugins.extractors`,
registered exactly like third-party ones; there is no registry outside the app's, so every
caller of :func:`extract_text` passes the one it should use (``app.extractors``). The values
extraction speaks (sections, options, results) are :mod:`vancetope_rag.extraction.types` and its
errors :mod:`vancetope_rag.errors`; both are re-exported here.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from vancetope_rag.domain import limits
from vancetope_rag.domain.eligibility import (
    CODE_MIME_WHITELIST,
    OCTET_STREAM,
    guess_mime_type,
)
from vancetope_rag.errors import (
    ExtractionError,
    ExtractionTimeoutError,
    ExtractorDependencyMissingError,
    ExtractorUnavailableError,
    InvalidInputError,
    NoTextError,
    NoTextLayerError,
    RagError,
    UnsupportedTypeError,
)
from vancetope_rag.extraction.types import (
    BUDGETS,
    DEFAULT_MAX_CHARS,
    MAX_SECTION_TITLE,
    ExtractedText,
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissing,
    OcrConfig,
    Section,
    clean_title,
    error_from_code,
    sections_of,
)

__all__ = [
    "BUDGETS",
    "DEFAULT_MAX_CHARS",
    "HARD_MAX_CHARS",
    "MAX_SECTION_TITLE",
    "ExtractOptions",
    "ExtractedText",
    "Extraction",
    "ExtractionTimeoutError",
    "Extractor",
    "ExtractorDependencyMissing",
    "ExtractorDependencyMissingError",
    "ExtractorEntry",
    "ExtractorRegistry",
    "ExtractorUnavailableError",
    "NoTextError",
    "NoTextLayerError",
    "OcrConfig",
    "RegisterExtractor",
    "Section",
    "UnsupportedTypeError",
    "clean_title",
    "decode_any",
    "decode_text",
    "error_from_code",
    "extract_text",
    "extraction_error",
    "run_extractor",
    "sections_of",
]

#: The text an extraction keeps at most, whatever budget it is given.
HARD_MAX_CHARS = limits.HARD_MAX_TEXT_CHARS
#: Extracts text from a file's bytes; the second argument is the file's path (for messages).
#: It returns the text, or an :class:`Extraction` with sections; registered with
#: ``takes_options=True`` it is called with the :class:`ExtractOptions` as a third argument.
Extractor = Callable[..., "str | Extraction"]


class RegisterExtractor(Protocol):
    """The ``register`` callback the ``register_extractors`` hook receives
    (:meth:`ExtractorRegistry.register`)."""

    def __call__(
        self,
        mime_types: Iterable[str],
        extractor: Extractor,
        *,
        extensions: Iterable[str] = (),
        name: str | None = None,
        version: str = "1",
        takes_options: bool | Iterable[str] = False,
        isolated: bool = True,
    ) -> None: ...


@dataclass(frozen=True)
class ExtractorEntry:
    """A registered extractor: the function and what identifies its output.

    ``name`` and ``version`` go into the extraction fingerprint an import compares: a new
    version of an extractor re-extracts the files it handles, and only those.
    """

    extractor: Extractor
    name: str
    version: str = "1"
    takes_options: bool = False
    #: The :class:`ExtractOptions` budgets its output depends on (``max_pages``...): a
    #: change of another budget does not re-extract its files.
    budgets: tuple[str, ...] = ()
    #: Runs in a worker process under the time and memory limits (False only for
    #: extractors that are linear in their input, such as strict text decoding).
    isolated: bool = True

    def __call__(self, data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
        if self.takes_options:
            return self.extractor(data, path, options)
        return self.extractor(data, path)


def _essence(mime_type: str) -> str:
    return mime_type.split(";", 1)[0].strip().lower()


def _extension(path: str) -> str:
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def extraction_error(path: str, reason: str) -> ExtractionError:
    """The error an extractor raises for content it cannot read, worded like the built-ins'.

    Args:
        path: The file's path.
        reason: What is wrong and, where possible, what to do about it.
    """
    return ExtractionError(f"cannot extract text from {path!r}: {reason}")


class ExtractorRegistry:
    """Maps MIME types (exact or ``major/*``) and file extensions to extractors.

    Lookup order in :meth:`find`: the exact MIME type; for ``+json`` / ``+xml`` suffixes the
    base type (``application/json`` / ``application/xml``); the ``major/*`` wildcard; then the
    path's extension. A later registration for the same key replaces the earlier one.
    """

    def __init__(self) -> None:
        self._by_mime: dict[str, ExtractorEntry] = {}
        self._by_extension: dict[str, ExtractorEntry] = {}

    def register(
        self,
        mime_types: Iterable[str],
        extractor: Extractor,
        *,
        extensions: Iterable[str] = (),
        name: str | None = None,
        version: str = "1",
        takes_options: bool | Iterable[str] = False,
        isolated: bool = True,
    ) -> None:
        """Register an extractor.

        Args:
            mime_types: MIME types it handles; ``text/*`` style wildcards are allowed.
            extractor: Called as ``extractor(data, path)``; returns the text or raises
                :class:`~vancetope_rag.errors.ExtractionError`.
            extensions: File extensions it handles when the MIME type does not match
                (``".docx"`` or ``"docx"``, case-insensitive).
            name: What identifies the extractor in an import's fingerprint; defaults to the
                function's module and name.
            version: Bump it when the extractor's output changes: files it read before are
                extracted again by the next import.
            takes_options: Call it as ``extractor(data, path, options)`` with the
                :class:`ExtractOptions` (budgets, OCR backend). ``True``: its output may
                depend on every budget; the names of the budgets it reads
                (``("max_pages",)``): a change of another budget leaves its files alone.
            isolated: Run it in an extraction worker process, under the time and memory
                limits (the default). ``False`` saves the round trip through a pipe
                (``bench/extraction.py`` measures it) for an extractor whose cost is linear
                in its input and that cannot hang.
        """
        if name is None:
            module = getattr(extractor, "__module__", None) or "?"
            name = f"{module}.{getattr(extractor, '__qualname__', type(extractor).__name__)}"
        budgets: tuple[str, ...]
        if isinstance(takes_options, bool):
            budgets = BUDGETS if takes_options else ()
        else:
            budgets = tuple(takes_options)
            unknown = set(budgets) - set(BUDGETS)
            if unknown:
                raise InvalidInputError(
                    f"unknown budgets {sorted(unknown)}; known: {', '.join(BUDGETS)}"
                )
        entry = ExtractorEntry(
            extractor, name, str(version), takes_options is not False, budgets, isolated
        )
        for mime in mime_types:
            self._by_mime[_essence(mime)] = entry
        for ext in extensions:
            ext = ext.lower()
            self._by_extension[ext if ext.startswith(".") else f".{ext}"] = entry

    def find(self, mime: str | None, path: str) -> Extractor | None:
        """Return the extractor for a MIME type and path, or ``None`` if none fits.

        Args:
            mime: The file's MIME type (parameters and case are ignored), or ``None``.
            path: The file's path; its extension is the fallback key.
        """
        entry = self.find_entry(mime, path)
        return entry.extractor if entry is not None else None

    def find_entry(self, mime: str | None, path: str) -> ExtractorEntry | None:
        """The registration (extractor, name, version) :meth:`find` picks.

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
    registry: ExtractorRegistry,
    mime_type: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    options: ExtractOptions | None = None,
) -> ExtractedText:
    """Extract text from a file's bytes, within a character budget, in this process.

    This is the extraction itself, with no wall-time limit: imports and tools run it through
    :class:`~vancetope_rag.services.extraction.ExtractionService`, which runs it in a worker
    process it can stop.

    Args:
        data: The file content.
        path: The file's path, for the extension fallback and for messages.
        registry: The extractors to choose from: the app's (``app.extractors``), which
            holds the built-in ones and every plugin's.
        mime_type: The file's MIME type; guessed from ``path`` when ``None``.
        max_chars: Character budget; clamped to :data:`HARD_MAX_CHARS` (and to
            ``options.max_chars``).
        options: Budgets and the OCR backend; the defaults when ``None``.

    Returns:
        The text, cut to the budget, its sections, and whether (and why) it was cut.

    Raises:
        UnsupportedTypeError: No extractor handles the type (e.g. ``application/zip``).
        ExtractorDependencyMissingError: The extractor needs an extra that is not installed.
        NoTextLayerError: A scan, and no OCR/vision backend is configured.
        ExtractionError: The content is not valid for its type (not UTF-8, NUL bytes,
            broken DOCX, DTD in XML, encrypted PDF, ...).
        InvalidInputError: ``max_chars`` is not a positive integer.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise InvalidInputError(f"max_chars must be a positive integer, got {max_chars!r}")
    options = options or ExtractOptions(max_chars=max_chars)
    budget = min(max_chars, options.max_chars, HARD_MAX_CHARS)
    mime = _essence(mime_type) if mime_type else guess_mime_type(path)
    entry = registry.find_entry(mime, path)
    if entry is None and mime == OCTET_STREAM:
        # Unknown extension: accept it if it is clean UTF-8 text (README-like files).
        text = _sniff_text(data)
        if text is not None:
            return _budgeted(Extraction.of(text), "text/plain", budget, "sniffed-text@1")
    if entry is None:
        raise _unsupported(path, mime, registry)
    return run_extractor(entry, data, path, mime, options, budget)


def run_extractor(
    entry: ExtractorEntry,
    data: bytes,
    path: str,
    mime: str,
    options: ExtractOptions,
    budget: int,
) -> ExtractedText:
    """Run one chosen extractor and apply the character budget (what :func:`extract_text`
    does once it has found the extractor; an extraction worker process runs this)."""
    try:
        result = entry(data, path, options)
    except RagError:
        raise
    except RecursionError:
        raise extraction_error(
            path, "the file nests too deeply to be read (a hostile or broken file)"
        ) from None
    except MemoryError:
        raise extraction_error(path, "reading the file needs more memory than allowed") from None
    except Exception as exc:  # a plugin's bug must not escape as a bare error
        raise extraction_error(
            path, f"the {mime} extractor failed: {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(result, str):
        result = Extraction.of(result)
    elif not isinstance(result, Extraction) or not all(
        isinstance(s, Section) and isinstance(s.text, str) for s in result.sections
    ):
        raise extraction_error(
            path,
            f"the {mime} extractor returned {type(result).__name__}, not str or an Extraction "
            "of Sections (a bug in the extractor: report it to its plugin's authors)",
        )
    return _budgeted(result, mime, budget, f"{entry.name}@{entry.version}")


def _budgeted(result: Extraction, mime: str, budget: int, extractor: str) -> ExtractedText:
    """Join the sections with blank lines, cut at the character budget (never mid-way through
    the recorded spans: a cut section ends where the text does)."""
    parts: list[str] = []
    spans: list[tuple[str, int, int]] = []
    at = 0
    cut = False
    several = len(result.sections) > 1
    for section in result.sections:
        text = section.text.strip("\n") if several else section.text
        if several and not text.strip():
            continue
        sep = "\n\n" if parts else ""
        if at + len(sep) >= budget:
            cut = True
            break
        room = budget - at - len(sep)
        if len(text) > room:
            text, cut = text[:room], True
        parts.append(sep + text)
        start = at + len(sep)
        at = start + len(text)
        spans.append((clean_title(section.title) or "", start, at))
        if cut:
            break
    text = "".join(parts)
    if not any(title for title, _, _ in spans):
        spans = []  # no titled part: the text is one section
    reason = result.truncated
    if cut:
        chars = f"only the first {budget:,} characters were kept (the text limit)"
        reason = f"{reason}; {chars}" if reason else chars
    return ExtractedText(
        text=text,
        mime_type=mime,
        truncated=reason is not None,
        chars=len(text),
        max_chars=budget,
        sections=tuple(spans),
        truncated_reason=reason,
        ocr=result.ocr,
        extractor=extractor,
        encoding=result.encoding,
        vision_frames=result.vision_frames,
        ocr_pages=result.ocr_pages,
        ocr_left=result.ocr_left,
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


# --- helpers for extractors -------------------------------------------------------------------


def read_text(data: bytes, path: str) -> Extraction:
    """The text extractor: :func:`decode_any`; the encoding is recorded."""
    text, encoding = decode_any(data, path)
    return Extraction((Section(text),), encoding=encoding)


def decode_any(data: bytes, path: str, *, declared: str | None = None) -> tuple[str, str]:
    """Text in any encoding, and that encoding's name: :func:`decode_text` (UTF-8, or the
    UTF-16/32 a BOM names), else ``declared`` (what an HTML or XML file says, see
    :func:`~vancetope_rag.extraction.encoding.declared_encoding`) when it fits, else the
    legacy encoding detected (:mod:`vancetope_rag.extraction.encoding`).

    Raises:
        ExtractionError: Binary data (a NUL byte), invalid text under a BOM, or bytes no
            known encoding reads: :func:`decode_text`'s error.
    """
    from vancetope_rag.extraction.encoding import decode_detected

    try:
        return decode_text(data, path), _bom_encoding(data)
    except ExtractionError as exc:
        if _has_nul(data) or data.startswith(codecs.BOM_UTF8) or _bom_encoding(data) != "utf-8":
            raise  # binary, or a BOM that names the encoding: nothing to guess
        return decode_detected(data, path, exc, declared=declared)


def _bom_encoding(data: bytes) -> str:
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def _has_nul(data: bytes) -> bool:
    return b"\x00" in data


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
            raise extraction_error(
                path,
                f"binary data (NUL byte at offset {nul}), not text; mark it ragEnabled=false",
            )
    try:
        text = data[start:].decode(encoding) if start else data.decode(encoding)
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        raise extraction_error(
            path,
            f"not {encoding.upper()} text (invalid byte 0x{data[offset]:02x} at offset "
            f"{offset}); convert the file to UTF-8 or mark it ragEnabled=false",
        ) from None
    if "\x00" in text:
        raise extraction_error(
            path, "binary data (NUL character), not text; mark it ragEnabled=false"
        )
    return text
