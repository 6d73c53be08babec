"""OpenDocument text, spreadsheets and presentations (ODT, ODS, ODP) with the standard
library: one streaming pass over ``content.xml``, within the sheet, cell and slide budgets;
each sheet and slide is a :class:`~vancetope_rag.extraction.registry.Section`.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from xml.etree import ElementTree

from vancetope_rag.default_plugins.extractors.guards import (
    ENCRYPTED,
    MAX_COLUMNS,
    cells_cut_reason,
    check_zip,
    cut_reason,
    read_member,
    refuse_dtd,
)
from vancetope_rag.default_plugins.extractors.libreoffice import look_at_slides
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    RegisterExtractor,
    Section,
    extraction_error,
)

ODF_MIME = "application/vnd.oasis.opendocument."

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
    f"{_TEXT}p": "p",
    f"{_TEXT}h": "p",
    f"{_TEXT}s": "s",
    f"{_TEXT}tab": "\t",
    f"{_TEXT}line-break": "\n",
    f"{_TABLE}table-row": "row",
    f"{_TABLE}table-cell": "cell",
    f"{_TABLE}covered-table-cell": "cell",
    f"{_PRES}notes": "notes",
    f"{_OFFICE}annotation": "skip",
    f"{_TEXT}tracked-changes": "skip",
}
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
                self.truncated = cells_cut_reason(self.options.max_cells)
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
                    self.truncated = cells_cut_reason(self.options.max_cells)
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
    presentation (a section per ``slide N: Title``, notes included; with ``vision_all``, what
    the vision model sees on each), read from ``content.xml`` with the standard library; DTDs
    and entities are refused."""
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
        truncated = cut_reason(target.limit, target.parts, unit, key)
    extraction = Extraction(tuple(target.sections) or (Section(""),), truncated=truncated)
    if target.kind != "slide":
        return extraction
    return look_at_slides(extraction, data, path, options, source=".odp")


# --- registration -----------------------------------------------------------------------------


#: The budgets each OpenDocument type reads (its files' fingerprint).
_ODF_BUDGETS: dict[str, tuple[str, ...]] = {
    "odt": (),
    "ods": ("max_sheets", "max_cells"),
    "odp": ("max_slides",),
}


def register(register: RegisterExtractor) -> None:
    """Register the OpenDocument extractor for text, spreadsheets and presentations."""
    for kind, ext in (("text", "odt"), ("spreadsheet", "ods"), ("presentation", "odp")):
        register(
            (ODF_MIME + kind,),
            extract_odf,
            extensions=(f".{ext}",),
            name=f"vancetope.{ext}",
            takes_options=_ODF_BUDGETS[ext],
        )
