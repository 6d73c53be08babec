"""Local text extraction with budgets and named errors. No model calls, no network.

Extractors live in an :class:`ExtractorRegistry` that the app fills through the
``register_extractors`` hook. The built-in ones (plain text and code, HTML, Jupyter notebooks,
DOCX, PDF) are a default plugin, :mod:`vancetope_rag.default_plugins.extractors`, registered
exactly like third-party ones; there is no registry outside the app's, so every caller of
:func:`extract_text` passes the one it should use (``app.extractors``).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

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

#: Extracts text from a file's bytes; the second argument is the file's path (for messages).
Extractor = Callable[[bytes, str], str]


class RegisterExtractor(Protocol):
    """The ``register`` callback the ``register_extractors`` hook receives
    (:meth:`ExtractorRegistry.register`)."""

    def __call__(
        self,
        mime_types: Iterable[str],
        extractor: Extractor,
        *,
        extensions: Iterable[str] = (),
    ) -> None: ...


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
    registry: ExtractorRegistry,
    mime_type: str | None = None,
    max_chars: int = DEFAULT_MAX_CHARS,
) -> ExtractedText:
    """Extract text from a file's bytes, within a character budget.

    Args:
        data: The file content.
        path: The file's path, for the extension fallback and for messages.
        registry: The extractors to choose from: the app's (``app.extractors``), which
            holds the built-in ones and every plugin's.
        mime_type: The file's MIME type; guessed from ``path`` when ``None``.
        max_chars: Character budget; clamped to :data:`HARD_MAX_CHARS`.

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
        raise extraction_error(
            path, f"the {mime} extractor failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(text, str):
        raise extraction_error(
            path, f"the {mime} extractor returned {type(text).__name__}, not str"
        )
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


# --- helpers for extractors -------------------------------------------------------------------


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
