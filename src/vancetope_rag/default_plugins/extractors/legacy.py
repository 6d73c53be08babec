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
again. :func:`slide_images` renders a presentation's slides (also PPTX and ODP) for a vision
model the same way, through a PDF.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vancetope_rag.default_plugins.extractors.guards import check_size
from vancetope_rag.default_plugins.extractors.office import extract_pptx, extract_xlsx
from vancetope_rag.default_plugins.extractors.scans import render_page
from vancetope_rag.default_plugins.extractors.text import extract_docx
from vancetope_rag.extraction.programs import Deadline, require_program, run_program
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissingError,
    RegisterExtractor,
    extraction_error,
)

__all__ = [
    "LEGACY_TYPES",
    "convert_with_libreoffice",
    "extract_doc",
    "extract_ppt",
    "extract_xls",
    "register",
    "slide_images",
]

#: Largest converted file read back (the OOXML readers check what is inside it).
MAX_CONVERTED_BYTES = 200 * 1024 * 1024


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


def convert_with_libreoffice(
    data: bytes, path: str, *, source: str, target: str, package: str, deadline: Deadline
) -> bytes:
    """``data`` (a file of extension ``source``) converted by ``soffice --convert-to target``.

    Args:
        data: The file's bytes; written to a fresh temp directory under a fixed name, so no
            part of the user's path reaches LibreOffice's command line.
        path: The file's path, for messages.
        source: The extension LibreOffice recognizes the file by (``".doc"``).
        target: The format to convert to (``"docx"``, ``"pdf"``).
        package: The Debian package named when ``soffice`` is missing.
        deadline: The extraction's deadline.

    Raises:
        ExtractorProgramMissingError: ``soffice`` is not on the PATH.
        ExtractionTimeoutError: The conversion ran past the deadline (its tree was killed).
        ExtractionError: LibreOffice could not read the file.
    """
    soffice = require_program("soffice", f"Reading {source} files", package)
    with tempfile.TemporaryDirectory(prefix="vancetope-soffice-") as scratch:
        work = Path(scratch)
        (work / "out").mkdir()
        src = work / f"input{source}"
        src.write_bytes(data)
        result = run_program(
            [
                soffice,
                f"-env:UserInstallation={(work / 'profile').as_uri()}",
                "--headless",
                "--invisible",
                "--nologo",
                "--nodefault",
                "--norestore",
                "--nolockcheck",
                "--convert-to",
                target,
                "--outdir",
                str(work / "out"),
                str(src),
            ],
            deadline=deadline,
            path=path,
            cwd=work,
        )
        out = work / "out" / f"input.{target}"
        if not out.is_file():
            detail = _detail(result.stderr)
            raise extraction_error(
                path,
                f"LibreOffice could not read it as a {source} file (damaged, encrypted, or "
                f"another format under that name; exit code {result.returncode}){detail}",
            )
        if out.stat().st_size > MAX_CONVERTED_BYTES:
            raise extraction_error(
                path, f"converted, it is over {MAX_CONVERTED_BYTES:,} bytes; split the file"
            )
        return out.read_bytes()


def _detail(stderr: str) -> str:
    lines = [
        line
        for line in stderr.splitlines()
        if line.strip() and "javaldx" not in line  # a warning of every run, not the reason
    ]
    return f": {' '.join(lines)[-300:]}" if lines else ""


def extract_doc(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """A Word 97-2003 document: converted to DOCX, read as one."""
    return _extract_legacy(LEGACY_TYPES[".doc"], data, path, options)


def extract_xls(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """An Excel 97-2003 workbook: converted to XLSX, read as one (a section per sheet)."""
    return _extract_legacy(LEGACY_TYPES[".xls"], data, path, options)


def extract_ppt(data: bytes, path: str, options: ExtractOptions) -> str | Extraction:
    """A PowerPoint 97-2003 presentation: converted to PPTX, read as one (a section per
    slide)."""
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


#: Presentations :func:`slide_images` renders, by extension: the LibreOffice package for each.
PRESENTATIONS = {
    ".ppt": "libreoffice-impress-nogui",
    ".pptx": "libreoffice-impress-nogui",
    ".odp": "libreoffice-impress-nogui",
}


def slide_images(data: bytes, path: str, *, max_slides: int, timeout_s: float) -> list[bytes]:
    """The first ``max_slides`` slides of a presentation as PNG images, for a vision model
    (the ``files_visualize`` tool's ``vision: true``): LibreOffice prints it to PDF, pypdfium2
    renders the pages, as the scans' OCR does.

    Args:
        data: A ``.ppt``, ``.pptx`` or ``.odp`` (by ``path``'s extension).
        path: The file's path: its extension, and messages.
        max_slides: Slides rendered at most.
        timeout_s: The wall time the conversion may take (its process tree is killed then).

    Raises:
        ExtractorProgramMissingError: No LibreOffice.
        ExtractorDependencyMissingError: No pypdfium2 (the ``pdf`` extra).
        ExtractionError: Not a presentation LibreOffice reads.
    """
    source = Path(path).suffix.lower()
    if source not in PRESENTATIONS:
        raise extraction_error(
            path, f"not a presentation (one of {', '.join(PRESENTATIONS)}) to render"
        )
    try:
        import pypdfium2  # type: ignore[import-not-found, unused-ignore]
        from PIL import Image  # noqa: F401  (the render's to_pil needs it)
    except ImportError:
        raise ExtractorDependencyMissingError("Rendering slides", "pdf") from None
    pdf = convert_with_libreoffice(
        data,
        path,
        source=source,
        target="pdf",
        package=PRESENTATIONS[source],
        deadline=Deadline.after(timeout_s),
    )
    document = pypdfium2.PdfDocument(pdf)
    try:
        count = min(len(document), max(0, max_slides))
        return [render_page(document, index, path) for index in range(count)]
    finally:
        document.close()


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
