"""Spreadsheets and presentations: XLSX and PPTX (the ``office`` extra); OpenDocument is
:mod:`.extract_odf`, registered from here.

Both are zips: :func:`~.office_common.check_zip` refuses zip bombs and encrypted (OLE) files
before any library sees the bytes. Workbooks are read within the sheet and cell budgets,
presentations within the slide budget; each sheet and slide is a
:class:`~vancetope_rag.extraction.registry.Section`.
"""

from __future__ import annotations

import datetime
import io
import warnings
from collections.abc import Iterable
from typing import Any

from vancetope_rag.default_plugins.extractors import odf as extract_odf
from vancetope_rag.default_plugins.extractors.guards import (
    MAX_COLUMNS,
    MAX_GRID,
    cells_cut_reason,
    check_zip,
    cut_reason,
    grid_cut_reason,
)
from vancetope_rag.default_plugins.extractors.libreoffice import look_at_slides
from vancetope_rag.errors import RagError
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissingError,
    RegisterExtractor,
    Section,
    extraction_error,
)

XLSX_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
XLSM_MIME = "application/vnd.ms-excel.sheet.macroEnabled.12"
PPTX_MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODF_MIME = "application/vnd.oasis.opendocument."
# --- XLSX -------------------------------------------------------------------------------------


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime):
        return value.isoformat(" ") if value.time() != datetime.time() else str(value.date())
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return " ".join(str(value).split())


def extract_xlsx(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """One section per worksheet (``sheet Name``): rows as lines, cells tab-separated.

    Cached formula results are read, not formulas; empty rows and trailing empty cells are
    dropped. Needs the ``office`` extra (openpyxl).
    """
    try:
        import openpyxl
    except ImportError:
        raise ExtractorDependencyMissingError("XLSX extraction", "office") from None
    check_zip(data, path, "XLSX", scan_xml=True)
    sections: list[Section] = []
    reasons: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            sheets = list(book.worksheets)
            cells = grid = 0
            for index, sheet in enumerate(sheets):
                if index >= options.max_sheets:
                    reasons.append(cut_reason(index, len(sheets), "sheets", "maxSheets"))
                    break
                sheet.reset_dimensions()  # a hostile <dimension> would pad every row
                lines: list[str] = []
                for row in sheet.iter_rows(max_row=1_048_576, values_only=True):
                    grid += len(row) + 1
                    if grid > MAX_GRID:
                        reasons.append(grid_cut_reason(index + 1, len(sheets)))
                        break
                    values: list[str] = []
                    for value in row[:MAX_COLUMNS]:
                        text = _cell_text(value)
                        if text and cells == options.max_cells:
                            reasons.append(cells_cut_reason(cells))
                            break
                        cells += bool(text)
                        values.append(text)
                    line = "\t".join(values).rstrip("\t")
                    if line:
                        lines.append(line)
                    if reasons:
                        break
                sections.append(Section("\n".join(lines), f"sheet {sheet.title}"))
                if reasons:
                    break
        finally:
            book.close()
    except RagError:
        raise
    except Exception as exc:  # openpyxl raises many types for broken files
        raise extraction_error(
            path, f"not a readable XLSX file ({type(exc).__name__}: {exc})"
        ) from None
    return Extraction(tuple(sections), truncated="; ".join(reasons) or None)


# --- PPTX -------------------------------------------------------------------------------------


def _shape_texts(shapes: Iterable[Any]) -> Iterable[str]:
    for shape in shapes:
        if getattr(shape, "shapes", None) is not None and not shape.has_text_frame:
            yield from _shape_texts(shape.shapes)  # a group
        elif shape.has_text_frame:
            yield shape.text_frame.text.replace("\v", "\n")
        elif getattr(shape, "has_table", False):
            for row in shape.table.rows:
                cells = [" ".join(cell.text.split()) for cell in row.cells]
                yield "\t".join(cells).rstrip("\t")


def extract_pptx(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """One section per slide (``slide 3: Title``): every shape's text, then the notes; with
    ``vision_all`` (the tool's ``vision: true``), what the vision model sees on each
    (:func:`~.libreoffice.look_at_slides`).

    Needs the ``office`` extra (python-pptx).
    """
    try:
        import pptx
    except ImportError:
        raise ExtractorDependencyMissingError("PPTX extraction", "office") from None
    check_zip(data, path, "PPTX", scan_xml=True)
    sections: list[Section] = []
    truncated = None
    try:
        slides = list(pptx.Presentation(io.BytesIO(data)).slides)
        for number, slide in enumerate(slides, start=1):
            if number > options.max_slides:
                truncated = cut_reason(options.max_slides, len(slides), "slides", "maxSlides")
                break
            title_shape = slide.shapes.title
            title = title_shape.text_frame.text if title_shape is not None else ""
            title = " ".join(title.split())
            parts = [text for text in _shape_texts(slide.shapes) if text.strip()]
            if slide.has_notes_slide:
                frame = slide.notes_slide.notes_text_frame
                if frame is not None and frame.text.strip():
                    parts.append("Notes: " + frame.text.replace("\v", "\n"))
            label = f"slide {number}: {title}" if title else f"slide {number}"
            sections.append(Section("\n".join(parts), label))
    except RagError:
        raise
    except Exception as exc:  # python-pptx raises many types for broken files
        raise extraction_error(
            path, f"not a readable PPTX file ({type(exc).__name__}: {exc})"
        ) from None
    extraction = Extraction(tuple(sections), truncated=truncated)
    return look_at_slides(extraction, data, path, options, source=".pptx")


# --- registration -----------------------------------------------------------------------------


def register(register: RegisterExtractor) -> None:
    """Register this module's extractors (called by the default plugin's hook)."""
    register(
        (XLSX_MIME, XLSM_MIME),
        extract_xlsx,
        extensions=(".xlsx", ".xlsm"),
        name="vancetope.xlsx",
        takes_options=("max_sheets", "max_cells"),
    )
    register(
        (PPTX_MIME,),
        extract_pptx,
        extensions=(".pptx",),
        name="vancetope.pptx",
        takes_options=("max_slides",),
    )
    extract_odf.register(register)
