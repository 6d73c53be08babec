"""Spreadsheets and presentations: XLSX and PPTX (the ``office`` extra), OpenDocument text,
spreadsheets and presentations (standard library).

Every format here is a zip: :func:`check_zip` refuses zip bombs and encrypted (OLE) files
before any library sees the bytes; the books module shares it. Workbooks are read within the
sheet and cell budgets, presentations within the slide budget; each sheet and slide is a
:class:`~vancetope_rag.extract.Section`.
"""

from __future__ import annotations

import datetime
import io
import warnings
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

from vancetope_rag.errors import RagError
from vancetope_rag.extract import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissing,
    RegisterExtractor,
    Section,
    extraction_error,
)

XLSX_MIME = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
XLSM_MIME = "application/vnd.ms-excel.sheet.macroEnabled.12"
PPTX_MIME = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODF_MIME = "application/vnd.oasis.opendocument."
#: Total unpacked size of a zip's members at most (zip-bomb guard).
MAX_UNPACKED_BYTES = 200 * 1024 * 1024
#: A member bigger than :data:`RATIO_MIN_BYTES` may unpack to this many times its packed size.
MAX_RATIO = 200
RATIO_MIN_BYTES = 10 * 1024 * 1024
MAX_MEMBERS = 20_000
#: Largest XML part (``content.xml``) read, after decompression.
MAX_XML_BYTES = 50 * 1024 * 1024
#: Cells visited in a workbook, empty ones included (a sparse or hostile sheet's grid).
MAX_GRID = 20_000_000
#: Columns of a spreadsheet row kept (the widest sheets Excel and LibreOffice make).
MAX_COLUMNS = 16_384
OLE_MAGIC = b"\xd0\xcf\x11\xe0"
ENCRYPTED = "the file is encrypted (password-protected); save it without a password"


# --- zip helpers (shared with extract_books) --------------------------------------------------


def check_zip(data: bytes, path: str, kind: str = "zip", *, scan_xml: bool = False) -> None:
    """Refuse what no extractor should unpack: encrypted OOXML, broken zips, zip bombs.

    Args:
        data: The file content.
        path: The file's path, for messages.
        kind: The format's name for messages (``"XLSX"``).
        scan_xml: Also refuse a DTD or entity declaration at the start of any XML part (the
            parts a library, not this module, parses).

    Raises:
        ExtractionError: The file is encrypted, not a zip, or unpacks to too much.
    """
    if data.startswith(OLE_MAGIC):
        # Password-protected OOXML (and ODF exported that way) is an OLE compound file.
        raise extraction_error(path, ENCRYPTED)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise extraction_error(path, f"the {kind} has over {MAX_MEMBERS} parts")
            total = 0
            for info in infos:
                total += info.file_size
                ratio = info.file_size / max(1, info.compress_size)
                if total > MAX_UNPACKED_BYTES or (
                    info.file_size > RATIO_MIN_BYTES and ratio > MAX_RATIO
                ):
                    raise extraction_error(
                        path,
                        f"looks like a zip bomb ({info.filename!r} unpacks to "
                        f"{info.file_size:,} bytes; at most {MAX_UNPACKED_BYTES:,} in all and "
                        f"{MAX_RATIO}x its packed size are read)",
                    )
            if scan_xml:
                for info in infos:
                    if info.filename.endswith((".xml", ".rels")):
                        with archive.open(info) as member:
                            refuse_dtd(member.read(65_536), path, info.filename)
    except RagError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError,
            EOFError, ValueError) as exc:  # fmt: skip
        raise extraction_error(path, f"not a readable {kind} file ({exc})") from None


def read_member(
    archive: zipfile.ZipFile, name: str, path: str, limit: int = MAX_XML_BYTES
) -> bytes:
    """A zip member's bytes, at most ``limit`` of them (the header's size is not trusted).

    Raises:
        ExtractionError: The member is missing or bigger than ``limit`` unpacked.
    """
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise extraction_error(path, f"the file has no {name}") from None
    if info.file_size > limit:
        raise extraction_error(path, f"{name} is larger than {limit} bytes unpacked")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise extraction_error(path, f"{name} is larger than {limit} bytes unpacked")
    return data


def refuse_dtd(xml: bytes, path: str, name: str, *, html: bool = False) -> None:
    """Refuse XML with a DTD or entity declaration (entity bombs, external entities).

    Args:
        xml: The XML, or its start.
        path: The file's path, for messages.
        name: The part's name, for messages.
        html: XHTML: a document type declaration is allowed, an entity declaration is not.
    """
    upper = xml.upper()
    if b"<!ENTITY" in upper or (not html and b"<!DOCTYPE" in upper):
        raise extraction_error(path, f"{name} contains a DTD or entity declaration, refused")


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


def _cut(read: int, total: int, unit: str, key: str) -> str:
    return f"only the first {read} of {total} {unit} were read (rag.extract.{key})"


def _grid_cut(read: int, total: int) -> str:
    return f"only {read} of {total} sheets were read: they span over {MAX_GRID:,} cells"


def _cells_cut(limit: int) -> str:
    return f"only the first {limit:,} non-empty cells were read (rag.extract.maxCells)"


def extract_xlsx(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """One section per worksheet (``sheet Name``): rows as lines, cells tab-separated.

    Cached formula results are read, not formulas; empty rows and trailing empty cells are
    dropped. Needs the ``office`` extra (openpyxl).
    """
    try:
        import openpyxl
    except ImportError:
        raise ExtractorDependencyMissing("XLSX extraction", "office") from None
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
                    reasons.append(_cut(index, len(sheets), "sheets", "maxSheets"))
                    break
                sheet.reset_dimensions()  # a hostile <dimension> would pad every row
                lines: list[str] = []
                for row in sheet.iter_rows(max_row=1_048_576, values_only=True):
                    grid += len(row) + 1
                    if grid > MAX_GRID:
                        reasons.append(_grid_cut(index + 1, len(sheets)))
                        break
                    values: list[str] = []
                    for value in row[:MAX_COLUMNS]:
                        text = _cell_text(value)
                        if text and cells == options.max_cells:
                            reasons.append(_cells_cut(cells))
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
    """One section per slide (``slide 3: Title``): every shape's text, then the notes.

    Needs the ``office`` extra (python-pptx).
    """
    try:
        import pptx
    except ImportError:
        raise ExtractorDependencyMissing("PPTX extraction", "office") from None
    check_zip(data, path, "PPTX", scan_xml=True)
    sections: list[Section] = []
    truncated = None
    try:
        slides = list(pptx.Presentation(io.BytesIO(data)).slides)
        for number, slide in enumerate(slides, start=1):
            if number > options.max_slides:
                truncated = _cut(options.max_slides, len(slides), "slides", "maxSlides")
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
    return Extraction(tuple(sections), truncated=truncated)


# --- OpenDocument -----------------------------------------------------------------------------

_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_PRES = "{urn:oasis:names:tc:opendocument:xmlns:presentation:1.0}"
_BODIES = {
    f"{_OFFICE}text": "text",
    f"{_OFFICE}spreadsheet": "sheet",
    f"{_OFFICE}presentation": "slide",
    f"{_OFFICE}drawing": "slide",
}
_PARTS = {"sheet": f"{_TABLE}table", "slide": f"{_DRAW}page"}
#: What an element's start does (see :class:`_OdfText`).
_STARTS = {
    f"{_TEXT}p": "p", f"{_TEXT}h": "p", f"{_TEXT}s": "s", f"{_TEXT}tab": "\t",
    f"{_TEXT}line-break": "\n", f"{_TABLE}table-row": "row", f"{_TABLE}table-cell": "cell",
    f"{_TABLE}covered-table-cell": "cell", f"{_PRES}notes": "notes",
    f"{_OFFICE}annotation": "skip", f"{_TEXT}tracked-changes": "skip",
}  # fmt: skip
_TITLE_CLASS = f"{_PRES}class"


class _Stop(Exception):
    """Raised inside the parser's callbacks when the cell budget is spent."""


def _int(attrs: dict[str, str], name: str) -> int:
    try:
        return max(1, int(attrs.get(name, "1")))
    except ValueError:
        return 1


@dataclass(slots=True)
class _Row:
    repeat: int
    cells: list[str] = field(default_factory=list)
    empty: int = 0  # empty cells since the last value, not written yet


class _OdfText:
    """An ElementTree parser target turning ``content.xml`` into sections in one pass,
    without building a tree. Tables become tab-separated rows; a spreadsheet's repeated
    cells and rows are expanded only where they hold text, and within the budgets.

    Each element open in the body has a code on :attr:`stack` saying what its end does:
    ``p`` ends a line, ``cell``/``row``/``notes``/``title``/``part`` close what they opened,
    ``skip`` (annotations, parts over the budget) hides its text and its children's.
    """

    def __init__(self, options: ExtractOptions) -> None:
        self.options = options
        self.sections: list[Section] = []
        self.truncated: str | None = None
        self.kind = ""  # "text", "sheet" or "slide" once the body opened
        self.stack: list[str] = []
        self.parts = self.cells = 0  # sheets or slides seen; non-empty cells read
        self.out: list[list[str]] = []  # text sinks: the part, then open cells and notes
        self.rows: list[_Row] = []
        self.part = ""  # the tag of a sheet or slide
        self.repeats: list[int] = []  # each open cell's column repeat
        self.title: str | None = None
        self.title_start = 0
        self.notes: list[str] | None = None

    @property
    def limit(self) -> int:
        """How many sheets or slides may be read."""
        return self.options.max_sheets if self.kind == "sheet" else self.options.max_slides

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.stack:
            self.stack.append(self._open(tag, attrs))
        elif tag in _BODIES and not self.kind:
            self.kind = _BODIES[tag]
            self.out = [[]] if self.kind == "text" else []
            self.part = _PARTS.get(self.kind, "")
            self.stack.append("body")

    def _open(self, tag: str, attrs: dict[str, str]) -> str:
        if self.stack[-1] == "skip":
            return "skip"
        if tag == self.part and len(self.stack) == 1:
            self.parts += 1
            if self.parts > self.limit:
                return "skip"
            self.out, self.rows, self.repeats, self.notes = [[]], [], [], None
            sheet = self.kind == "sheet"
            self.title = f"sheet {attrs.get(f'{_TABLE}name', self.parts)}" if sheet else None
            return "part"
        if not self.out:
            return "skip"
        code = _STARTS.get(tag, "")
        if code in ("p", "skip", "") and not (code == "" and _TITLE_CLASS in attrs):
            return code
        if code == "s":
            self.out[-1].append(" " * min(_int(attrs, f"{_TEXT}c"), 100))
        elif code in ("\t", "\n"):
            self.out[-1].append(code)
        elif code == "row":
            sheet = self.kind == "sheet"
            self.rows.append(_Row(_int(attrs, f"{_TABLE}number-rows-repeated") if sheet else 1))
            return "row"
        elif code == "cell" and self.rows:
            sheet = self.kind == "sheet"
            self.repeats.append(_int(attrs, f"{_TABLE}number-columns-repeated") if sheet else 1)
            self.out.append([])
            return "cell"
        elif code == "notes" and self.notes is None:
            self.notes = []
            self.out.append(self.notes)
            return "notes"
        elif attrs.get(_TITLE_CLASS) == "title" and self.title is None:
            self.title_start = len(self.out[-1])
            return "title"
        return ""

    def end(self, tag: str) -> None:
        code = self.stack.pop() if self.stack else ""
        if code == "p":
            self.out[-1].append("\n")
        elif code == "cell":
            self._close_cell()
        elif code == "row":
            self._close_row()
        elif code == "notes":
            self.out.pop()
        elif code == "title":
            self.title = " ".join("".join(self.out[-1][self.title_start :]).split()) or None
        elif code == "part" or (code == "body" and self.kind == "text"):
            self.close_part()

    def data(self, text: str) -> None:
        if self.out and self.stack and self.stack[-1] != "skip":
            self.out[-1].append(text)

    def _close_cell(self) -> None:
        repeat = self.repeats.pop()
        value = " ".join("".join(self.out.pop()).split())
        row = self.rows[-1]
        room = MAX_COLUMNS - len(row.cells)
        if not value or room <= 0:
            row.empty = min(row.empty + repeat * (not value), MAX_COLUMNS)
            return
        empty = min(row.empty, room - 1)  # a value past a huge empty run still lands
        repeat = min(repeat, room - empty)
        if self.kind == "sheet":
            fit = min(repeat, self.options.max_cells - self.cells)
            if fit < repeat:
                self.truncated = _cells_cut(self.options.max_cells)
            repeat = fit
            self.cells += fit
        if empty:
            row.cells.extend([""] * empty)
            row.empty = 0
        row.cells.extend([value] * repeat)
        if self.truncated:
            self._close_row()  # keep the row read so far; raises _Stop

    def _close_row(self) -> None:
        row = self.rows.pop()
        repeat = row.repeat
        if row.cells:
            if repeat > 1:  # only spreadsheets repeat rows
                filled = sum(1 for c in row.cells if c)
                times = min(repeat - 1, max(0, self.options.max_cells - self.cells) // filled)
                self.cells += times * filled
                if times < repeat - 1:
                    self.truncated = _cells_cut(self.options.max_cells)
                repeat = times + 1
            line = "\t".join(row.cells).rstrip("\t")
            self.out[-1].append(f"{line}\n" * repeat)
        if self.truncated:
            raise _Stop

    def close_part(self) -> None:
        """End the open sheet, slide or text: it becomes a section."""
        if not self.out:
            return
        text = "".join(self.out[0])
        if self.notes and "".join(self.notes).strip():
            text = f"{text.rstrip()}\nNotes: {''.join(self.notes).strip()}"
        title = self.title
        if self.kind == "slide":
            title = f"slide {self.parts}: {title}" if title else f"slide {self.parts}"
        lines = (line.rstrip() for line in text.split("\n"))
        self.sections.append(Section("\n".join(line for line in lines if line), title))
        self.out, self.rows, self.repeats = [], [], []


def extract_odf(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    """OpenDocument text (one section), spreadsheet (a section per ``sheet Name``) or
    presentation (a section per ``slide N: Title``, notes included), read from
    ``content.xml`` with the standard library; DTDs and entities are refused."""
    check_zip(data, path, "OpenDocument")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if "META-INF/manifest.xml" in archive.NameToInfo:
                manifest = read_member(archive, "META-INF/manifest.xml", path, 4 << 20)
                if b"encryption-data" in manifest:
                    raise extraction_error(path, ENCRYPTED)
            xml = read_member(archive, "content.xml", path)
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError) as exc:
        raise extraction_error(path, f"not a readable OpenDocument file ({exc})") from None
    refuse_dtd(xml, path, "content.xml")
    target = _OdfText(options)
    parser = ElementTree.XMLParser(target=target)
    try:
        parser.feed(xml)
        parser.close()
    except _Stop:
        target.close_part()
    except ElementTree.ParseError as exc:
        raise extraction_error(path, f"content.xml is not well-formed XML ({exc})") from None
    if not target.kind:
        raise extraction_error(path, "not an OpenDocument text, spreadsheet or presentation")
    truncated = target.truncated
    if target.parts > target.limit:
        unit, key = ("sheets", "maxSheets") if target.kind == "sheet" else ("slides", "maxSlides")
        truncated = _cut(target.limit, target.parts, unit, key)
    return Extraction(tuple(target.sections) or (Section(""),), truncated=truncated)


# --- registration -----------------------------------------------------------------------------


#: The budgets each OpenDocument type reads (its files' fingerprint).
_ODF_BUDGETS: dict[str, tuple[str, ...]] = {
    "odt": (),
    "ods": ("max_sheets", "max_cells"),
    "odp": ("max_slides",),
}


def register(register: RegisterExtractor) -> None:
    """Register this module's extractors (called by the default plugin's hook)."""
    register((XLSX_MIME, XLSM_MIME), extract_xlsx, extensions=(".xlsx", ".xlsm"),
             name="vancetope.xlsx", takes_options=("max_sheets", "max_cells"))  # fmt: skip
    register((PPTX_MIME,), extract_pptx, extensions=(".pptx",), name="vancetope.pptx",
             takes_options=("max_slides",))  # fmt: skip
    for kind, ext in (("text", "odt"), ("spreadsheet", "ods"), ("presentation", "odp")):
        register((ODF_MIME + kind,), extract_odf, extensions=(f".{ext}",),
                 name=f"vancetope.{ext}", takes_options=_ODF_BUDGETS[ext])  # fmt: skip
