"""Legacy Office files (``.doc``, ``.xls``, ``.ppt``): converted with headless LibreOffice to
their OOXML successors, then read by the DOCX, XLSX and PPTX extractors.

The binary formats of Office 97-2003 have no reader in Python worth trusting with a hostile
file; LibreOffice reads them all, in a process that can be killed. Each conversion gets a
fresh directory (the file's bytes, the output and a throw-away LibreOffice user profile, so no
conversion sees another's settings, recent files or lock) under the extraction's temp
directory; it runs within ``rag.extract.timeoutSeconds`` as a process tree that is killed whole
(:mod:`vancetope_rag.extraction.programs`), on a file no larger than
``rag.extract.maxLegacyOfficeBytes``. Without LibreOffice the file fails with
``EXTRACT_PROGRAM_MISSING`` naming the Debian package to install, and the next import tries it
again. The conversion itself, and the rendering of slides for a vision model, are
:mod:`.libreoffice`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vancetope_rag.default_plugins.extractors.guards import check_size
from vancetope_rag.default_plugins.extractors.libreoffice import convert_with_libreoffice
from vancetope_rag.default_plugins.extractors.office import extract_pptx, extract_xlsx
from vancetope_rag.default_plugins.extractors.text import extract_docx
from vancetope_rag.extraction.programs import Deadline
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    RegisterExtractor,
)

__all__ = [
    "LEGACY_TYPES",
    "extract_doc",
    "extract_ppt",
    "extract_xls",
    "register",
]


@dataclass(frozen=True)
class LegacyType:
    """One legacy format: what LibreOffice converts it to, and who reads the result."""

    extension: str
    mime_type: str
    #: The format's name in messages.
    kind: str
    #: LibreOffice's ``--convert-to`` target (the successor's extension).
    target: str
    #: The Debian/Ubuntu package with the LibreOffice module that reads it.
    package: str
    read: Callable[[bytes, str, ExtractOptions], str | Extraction]
    budgets: tuple[str, ...]


LEGACY_TYPES: dict[str, LegacyType] = {
    t.extension: t
    for t in (
        LegacyType(
            ".doc",
            "application/msword",
            "Word 97-2003 document",
            "docx",
            "libreoffice-writer-nogui",
            lambda data, path, _options: extract_docx(data, path),
            (),
        ),
        LegacyType(
            ".xls",
            "application/vnd.ms-excel",
            "Excel 97-2003 workbook",
            "xlsx",
            "libreoffice-calc-nogui",
            extract_xlsx,
            ("max_sheets", "max_cells"),
        ),
        LegacyType(
            ".ppt",
            "application/vnd.ms-powerpoint",
            "PowerPoint 97-2003 presentation",
            "pptx",
            "libreoffice-impress-nogui",
            extract_pptx,
            ("max_slides",),
        ),
    )
}


def extract_doc(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """A Word 97-2003 document: converted to DOCX, read as one."""
    return _extract_legacy(LEGACY_TYPES[".doc"], data, path, options)


def extract_xls(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """An Excel 97-2003 workbook: converted to XLSX, read as one (a section per sheet)."""
    return _extract_legacy(LEGACY_TYPES[".xls"], data, path, options)


def extract_ppt(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """A PowerPoint 97-2003 presentation: converted to PPTX, read as one (a section per
    slide; with ``vision_all``, what the vision model sees on each)."""
    return _extract_legacy(LEGACY_TYPES[".ppt"], data, path, options)


def _extract_legacy(
    kind: LegacyType, data: bytes, path: str, options: ExtractOptions
) -> str | Extraction:
    """Convert with LibreOffice, then read what it became within the same budgets."""
    check_size(data, path, options.max_legacy_office_bytes, "maxLegacyOfficeBytes", kind.kind)
    converted = convert_with_libreoffice(
        data,
        path,
        source=kind.extension,
        target=kind.target,
        package=kind.package,
        deadline=Deadline.after(options.timeout_s),
    )
    return kind.read(converted, path, options)


def register(register: RegisterExtractor) -> None:
    """Register this module's extractors (called by the default plugin's hook)."""
    extractors = {".doc": extract_doc, ".xls": extract_xls, ".ppt": extract_ppt}
    for extension, extractor in extractors.items():
        kind = LEGACY_TYPES[extension]
        register(
            (kind.mime_type,),
            extractor,
            extensions=(extension,),
            name=f"vancetope.{extension[1:]}",
            takes_options=("max_legacy_office_bytes", *kind.budgets),
        )
