"""Headless LibreOffice as extractors use it: a file converted to another format
(``soffice --headless --convert-to``), and a presentation's slides rendered as images for a
vision model (``files_visualize`` with ``vision: true`` on a ``.ppt``, ``.pptx`` or ``.odp``).

Each conversion gets a fresh directory (the file's bytes under a fixed name, the output and a
throw-away LibreOffice user profile, so no conversion sees another's settings, recent files or
lock) under the extraction's temp directory, and runs within its deadline as a process tree
that is killed whole (:mod:`vancetope_rag.extraction.programs`), in the extraction worker.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from vancetope_rag.default_plugins.extractors.ocr import recognize
from vancetope_rag.default_plugins.extractors.scans import render_page
from vancetope_rag.extraction.programs import Deadline, require_program, run_program
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissingError,
    Section,
    extraction_error,
)

__all__ = ["PRESENTATIONS", "convert_with_libreoffice", "look_at_slides", "slide_images"]

#: Largest converted file read back (the OOXML readers check what is inside it).
MAX_CONVERTED_BYTES = 200 * 1024 * 1024


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


#: Presentations :func:`slide_images` renders, by extension: the LibreOffice package for each.
PRESENTATIONS = {
    ".ppt": "libreoffice-impress-nogui",
    ".pptx": "libreoffice-impress-nogui",
    ".odp": "libreoffice-impress-nogui",
}


def slide_images(
    data: bytes, path: str, *, max_slides: int, timeout_s: float, source: str | None = None
) -> list[bytes]:
    """The first ``max_slides`` slides of a presentation as PNG images, for a vision model
    (the ``files_visualize`` tool's ``vision: true``): LibreOffice prints it to PDF, pypdfium2
    renders the pages, as the scans' OCR does.

    Args:
        data: A ``.ppt``, ``.pptx`` or ``.odp`` (by ``source``, else ``path``'s extension).
        path: The file's path: its extension, and messages.
        max_slides: Slides rendered at most.
        timeout_s: The wall time the conversion may take (its process tree is killed then).
        source: The format of ``data`` where the path's extension is not it (a ``.ppt``
            already converted to PPTX).

    Raises:
        ExtractorProgramMissingError: No LibreOffice.
        ExtractorDependencyMissingError: No pypdfium2 (the ``pdf`` extra).
        ExtractionError: Not a presentation LibreOffice reads.
    """
    source = (source or Path(path).suffix).lower()
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


#: What the vision model is asked for with each slide: its words, and the look of what has none.
SLIDE_INSTRUCTION = (
    "This image is one slide of a presentation. Transcribe its text verbatim, in reading "
    "order, then describe in two or three plain sentences any chart, diagram or picture on "
    "it. Do not add headings or formatting of your own."
)


def look_at_slides(
    extraction: Extraction, data: bytes, path: str, options: ExtractOptions, *, source: str
) -> Extraction:
    """A presentation's slides (its sections, in order) with what the vision model sees on
    each, after their own text: ``files_visualize`` with ``vision: true`` (``vision_all``),
    where a slide's look (a chart, a picture) is asked for, not only its words. At most the
    backend's page budget (``rag.bridge.visionMaxPages``) of slides is rendered, from the
    first; an import never sets ``vision_all``, so its reading is the text alone.

    Args:
        extraction: The slides as the text reader read them, one section each.
        data: The presentation, in the format ``source`` names (``".pptx"``, ``".odp"``).
        path: The file's path, for messages.
        options: ``vision_all`` and the ``ocr`` backend; ``timeout_s`` bounds the rendering.
        source: The extension of ``data``'s format.
    """
    ocr = options.ocr
    if not options.vision_all or ocr is None or not extraction.sections:
        return extraction
    count = min(len(extraction.sections), max(0, ocr.max_pages))
    images = slide_images(data, path, max_slides=count, timeout_s=options.timeout_s, source=source)
    seen = recognize(images, ocr, path, instruction=SLIDE_INSTRUCTION)
    sections = list(extraction.sections)
    for index, text in enumerate(seen):
        own = sections[index].text.strip()
        looked = text.strip()
        sections[index] = Section(f"{own}\n\n{looked}" if own else looked, sections[index].title)
    reasons = [extraction.truncated] if extraction.truncated else []
    if len(seen) < len(sections):
        reasons.append(
            f"only {len(seen):,} of the {len(sections):,} slides were shown to the vision "
            f"model ({ocr.limit_setting})"
        )
    return replace(
        extraction,
        sections=tuple(sections),
        truncated="; ".join(reasons) or None,
        ocr=True,
        ocr_pages=tuple(range(1, len(seen) + 1)),
    )
