"""Office extractors on real bytes: XLSX, PPTX, OpenDocument; budgets, zip bombs, encrypted
files and the missing ``office`` extra. Every fixture is generated here.
"""

from __future__ import annotations

import io
import struct
import sys
import time
import zipfile
from typing import Any

import pytest

from fakes import default_extractors
from filemakers import section, titles
from vancetope_rag.errors import ExtractionError, MissingDependencyError
from vancetope_rag.extraction.registry import (
    ExtractedText,
    ExtractOptions,
    ExtractorDependencyMissing,
    extract_text,
)

openpyxl = pytest.importorskip("openpyxl")
pptx = pytest.importorskip("pptx")

BUILTINS = default_extractors()  # never changed by a test

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
}


def extract(data: bytes, **kwargs: Any) -> ExtractedText:
    """:func:`extract_text` with the default plugins' extractors."""
    return extract_text(data, registry=BUILTINS, **kwargs)


# --- fixtures -----------------------------------------------------------------------------


def make_xlsx(sheets: dict[str, list[list[Any]]]) -> bytes:
    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for r, row in enumerate(rows, start=1):
            for c, value in enumerate(row, start=1):
                if value is not None:
                    sheet.cell(row=r, column=c, value=value)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def make_pptx(slides: int = 2) -> bytes:
    from pptx.util import Inches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # "Title Only"
    slide.shapes.title.text = "Quarterly Roadmap"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
    box.text_frame.text = "The falcon launch moves to October."
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    for (r, c), text in {(0, 0): "Team", (0, 1): "Owner", (1, 0): "Rockets", (1, 1): "Ada"}.items():
        table.cell(r, c).text = text
    slide.notes_slide.notes_text_frame.text = "Remind everyone about the budget freeze."
    for n in range(2, slides + 1):
        other = deck.slides.add_slide(deck.slide_layouts[6])  # "Blank"
        group = other.shapes.add_group_shape()
        inner = group.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1))
        inner.text_frame.text = f"Grouped shape text on slide {n}."
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def make_odf(kind: str, body: str, *, manifest: str = "") -> bytes:
    xmlns = " ".join(f'xmlns:{prefix}="{uri}"' for prefix, uri in NS.items())
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<office:document-content {xmlns} office:version="1.3">'
        "<office:automatic-styles/>"
        f"<office:body><office:{kind}>{body}</office:{kind}></office:body>"
        "</office:document-content>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), f"application/vnd.oasis.opendocument.{kind}")
        archive.writestr("content.xml", content)
        archive.writestr("META-INF/manifest.xml", manifest or "<manifest:manifest/>")
    return buffer.getvalue()


def ods_table(name: str, rows: str) -> str:
    return f'<table:table table:name="{name}">{rows}</table:table>'


def cell(text: str, repeat: int = 1) -> str:
    attr = f' table:number-columns-repeated="{repeat}"' if repeat > 1 else ""
    return f"<table:table-cell{attr}><text:p>{text}</text:p></table:table-cell>"


def claimed_size(data: bytes, size: int) -> bytes:
    """``data`` (a zip) with every central-directory entry claiming ``size`` bytes unpacked."""
    out = bytearray(data)
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        struct.pack_into("<I", out, at + 24, size)
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


def ratio_bomb(name: str, mib: int = 24) -> bytes:
    """A zip whose ``name`` member is ``mib`` MiB of zeros, written in pieces."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(name, "w") as member:
            piece = b"\0" * (1 << 20)
            for _ in range(mib):
                member.write(piece)
    return buffer.getvalue()


# --- XLSX ---------------------------------------------------------------------------------


def test_xlsx_sheets_are_sections() -> None:
    data = make_xlsx(
        {
            "Maintenance": [
                ["Machine", "Interval", None, None],
                ["Press 7", 30, "the hydraulic seals wear out every spring", None],
                [None, None, None],
                [None, 2.5, True],
            ],
            "Budget": [["Item", "EUR"], ["Coffee for the night shift", 1200]],
        }
    )
    result = extract(data, path="reports/q3.xlsx")
    assert result.mime_type == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    assert result.extractor == "vancetope.xlsx@1"
    assert titles(result) == ["sheet Maintenance", "sheet Budget"]
    assert section(result, "sheet Maintenance") == (
        "Machine\tInterval\nPress 7\t30\tthe hydraulic seals wear out every spring\n\t2.5\tTRUE"
    )
    assert section(result, "sheet Budget") == "Item\tEUR\nCoffee for the night shift\t1200"
    assert not result.truncated


def test_xlsm_extension_and_xlsx_budgets() -> None:
    sheets = {f"S{i}": [[f"cell {i}.{j}" for j in range(3)]] for i in range(4)}
    data = make_xlsx(sheets)
    assert "cell 3.2" in extract(data, path="macro.xlsm").text

    result = extract(data, path="a.xlsx", options=ExtractOptions(max_sheets=2))
    assert titles(result) == ["sheet S0", "sheet S1"]
    assert result.truncated
    assert result.truncated_reason == (
        "only the first 2 of 4 sheets were read (rag.extract.maxSheets)"
    )

    result = extract(data, path="a.xlsx", options=ExtractOptions(max_cells=5))
    assert result.text == "cell 0.0\tcell 0.1\tcell 0.2\n\ncell 1.0\tcell 1.1"
    assert titles(result) == ["sheet S0", "sheet S1"]
    assert result.truncated_reason is not None
    assert "rag.extract.maxCells" in result.truncated_reason


def test_xlsx_with_far_away_cell_ends_fast() -> None:
    data = make_xlsx({"Sparse": [["top"]]})
    book = openpyxl.load_workbook(io.BytesIO(data))
    book["Sparse"].cell(row=1_048_576, column=1, value="bottom")
    buffer = io.BytesIO()
    book.save(buffer)
    started = time.process_time()  # CPU: another process cannot stretch it
    result = extract(buffer.getvalue(), path="sparse.xlsx")
    assert time.process_time() - started < 5
    assert result.text == "top\nbottom"


def test_encrypted_ooxml_is_named() -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600
    for name in ("secret.xlsx", "secret.pptx"):
        with pytest.raises(ExtractionError, match=r"encrypted \(password-protected\)"):
            extract(ole, path=name)


def test_broken_xlsx_is_refused() -> None:
    with pytest.raises(ExtractionError, match="not a readable XLSX file"):
        extract(b"PK\x03\x04 no zip at all", path="x.xlsx")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a workbook")
    with pytest.raises(ExtractionError, match="not a readable XLSX file"):
        extract(buffer.getvalue(), path="x.xlsx")


def test_xlsx_part_with_dtd_is_refused() -> None:
    evil = with_dtd(make_xlsx({"S": [["x"]]}), "xl/workbook.xml")
    with pytest.raises(ExtractionError, match="DTD or entity"):
        extract(evil, path="evil.xlsx")


@pytest.mark.parametrize("module", ["openpyxl", "pptx"])
def test_missing_office_extra_is_named(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    path = "a.xlsx" if module == "openpyxl" else "a.pptx"
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(b"PK\x03\x04", path=path)
    assert isinstance(info.value, MissingDependencyError)
    assert info.value.code == "EXTRACT_DEPENDENCY_MISSING"
    assert info.value.extra == "office"


# --- zip bombs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "member"),
    [
        ("bomb.xlsx", "xl/worksheets/sheet1.xml"),
        ("bomb.pptx", "ppt/slides/slide1.xml"),
        ("bomb.odt", "content.xml"),
        ("bomb.ods", "content.xml"),
        ("bomb.epub", "OEBPS/chapter.xhtml"),
    ],
)
def test_zip_bombs_are_refused_quickly(path: str, member: str) -> None:
    started = time.process_time()  # CPU: another process cannot stretch it
    with pytest.raises(ExtractionError, match="looks like a zip bomb"):
        extract(ratio_bomb(member), path=path)
    # The central directory claims 4 GiB for a tiny member.
    small = ratio_bomb(member, mib=0)
    with pytest.raises(ExtractionError, match="looks like a zip bomb"):
        extract(claimed_size(small, 0xFFFF_FFF0), path=path)
    assert time.process_time() - started < 5


def test_docx_claiming_a_huge_member_is_refused_quickly() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    started = time.process_time()  # CPU: another process cannot stretch it
    with pytest.raises(ExtractionError, match="larger than"):
        extract(claimed_size(buffer.getvalue(), 0xFFFF_FFF0), path="bomb.docx")
    assert time.process_time() - started < 5


# --- PPTX ---------------------------------------------------------------------------------


def test_pptx_slides_titles_tables_groups_and_notes() -> None:
    result = extract(make_pptx(), path="deck.pptx")
    assert result.extractor == "vancetope.pptx@1"
    assert titles(result) == ["slide 1: Quarterly Roadmap", "slide 2"]
    first = section(result, "slide 1: Quarterly Roadmap")
    assert "Quarterly Roadmap" in first
    assert "The falcon launch moves to October." in first
    assert "Team\tOwner\nRockets\tAda" in first
    assert first.endswith("Notes: Remind everyone about the budget freeze.")
    assert section(result, "slide 2") == "Grouped shape text on slide 2."


def test_pptx_slide_budget() -> None:
    result = extract(make_pptx(slides=4), path="deck.pptx", options=ExtractOptions(max_slides=2))
    assert titles(result) == ["slide 1: Quarterly Roadmap", "slide 2"]
    assert result.truncated
    assert result.truncated_reason == (
        "only the first 2 of 4 slides were read (rag.extract.maxSlides)"
    )


def test_broken_pptx_is_refused() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a deck")
    with pytest.raises(ExtractionError, match="not a readable PPTX file"):
        extract(buffer.getvalue(), path="x.pptx")


# --- OpenDocument -------------------------------------------------------------------------


def test_odt_paragraphs_headings_lists_tables() -> None:
    body = (
        "<text:h>Field Guide</text:h>"
        '<text:p>Otters<text:s text:c="2"/>hold hands<text:tab/>while sleeping.'
        "<text:line-break/>Second line <text:span>with a span</text:span> and a tail.</text:p>"
        "<text:list><text:list-item><text:p>Listed item about beavers</text:p>"
        "</text:list-item></text:list>"
        "<table:table><table:table-row>" + cell("Animal") + cell("Diet") + "</table:table-row>"
        "<table:table-row>" + cell("Otter") + cell("Fish") + "</table:table-row></table:table>"
        "<office:annotation><text:p>a reviewer comment</text:p></office:annotation>"
        "<text:p>The end.</text:p>"
    )
    result = extract(make_odf("text", body), path="guide.odt")
    assert result.extractor == "vancetope.odt@1"
    assert result.sections == ()
    assert result.text == (
        "Field Guide\nOtters  hold hands\twhile sleeping.\n"
        "Second line with a span and a tail.\nListed item about beavers\n"
        "Animal\tDiet\nOtter\tFish\nThe end."
    )


def test_ods_sheets_repeats_and_budgets() -> None:
    first = ods_table(
        "Inventory",
        "<table:table-row>"
        + cell("Widget")
        + cell("", 3)
        + cell("blue gears")
        + "</table:table-row>"
        '<table:table-row table:number-rows-repeated="2">' + cell("same") + "</table:table-row>"
        '<table:table-row table:number-rows-repeated="5"><table:table-cell/></table:table-row>'
        "<table:table-row>" + cell("x", 2) + "<table:table-cell/></table:table-row>",
    )
    second = ods_table(
        "Notes", "<table:table-row>" + cell("Owls hunt at dusk") + "</table:table-row>"
    )
    third = ods_table("Extra", "<table:table-row>" + cell("never read") + "</table:table-row>")
    data = make_odf("spreadsheet", first + second + third)
    result = extract(data, path="stock.ods")
    assert titles(result) == ["sheet Inventory", "sheet Notes", "sheet Extra"]
    assert section(result, "sheet Inventory") == "Widget\t\t\t\tblue gears\nsame\nsame\nx\tx"
    assert "Owls hunt at dusk" in section(result, "sheet Notes")

    result = extract(data, path="stock.ods", options=ExtractOptions(max_sheets=2))
    assert titles(result) == ["sheet Inventory", "sheet Notes"]
    assert result.truncated_reason == (
        "only the first 2 of 3 sheets were read (rag.extract.maxSheets)"
    )

    result = extract(data, path="stock.ods", options=ExtractOptions(max_cells=3))
    assert result.text == "Widget\t\t\t\tblue gears\nsame"
    assert result.truncated_reason is not None
    assert "rag.extract.maxCells" in result.truncated_reason


def test_ods_with_huge_repeats_ends_fast() -> None:
    rows = (
        '<table:table-row table:number-rows-repeated="1000000">'
        '<table:table-cell table:number-columns-repeated="1000000"/></table:table-row>'
        "<table:table-row>"
        '<table:table-cell table:number-columns-repeated="1000000"/>'
        + cell("after the void")
        + "</table:table-row>"
        '<table:table-row table:number-rows-repeated="1000000">'
        + cell("echo", 1000000)
        + "</table:table-row>"
    )
    started = time.process_time()  # CPU: another process cannot stretch it
    result = extract(
        make_odf("spreadsheet", ods_table("Hostile", rows)),
        path="hostile.ods",
        options=ExtractOptions(max_cells=50_000),
    )
    assert time.process_time() - started < 5
    assert "after the void" in result.text
    assert result.truncated_reason is not None
    assert "rag.extract.maxCells" in result.truncated_reason
    # Empty columns before a value are kept only up to the widest real sheet.
    assert result.text.count("\t", 0, result.text.index("after the void")) == 16_383


def test_odp_slides_titles_and_notes() -> None:
    def page(n: int, title: str, text: str, notes: str) -> str:
        return (
            f'<draw:page draw:name="page{n}">'
            f'<draw:frame presentation:class="title"><draw:text-box><text:p>{title}'
            "</text:p></draw:text-box></draw:frame>"
            f"<draw:frame><draw:text-box><text:p>{text}</text:p></draw:text-box></draw:frame>"
            "<presentation:notes><draw:page-thumbnail/>"
            f'<draw:frame presentation:class="notes"><draw:text-box><text:p>{notes}</text:p>'
            "</draw:text-box></draw:frame></presentation:notes></draw:page>"
        )

    body = (
        page(1, "Migration plan", "Penguins migrate in winter.", "Speak slowly.")
        + '<draw:page draw:name="page2"><draw:custom-shape><text:p>Untitled slide text'
        "</text:p></draw:custom-shape></draw:page>" + page(3, "Wrap-up", "Questions?", "")
    )
    data = make_odf("presentation", body)
    result = extract(data, path="talk.odp")
    assert result.extractor == "vancetope.odp@1"
    assert titles(result) == ["slide 1: Migration plan", "slide 2", "slide 3: Wrap-up"]
    assert section(result, "slide 1: Migration plan") == (
        "Migration plan\nPenguins migrate in winter.\nNotes: Speak slowly."
    )
    assert section(result, "slide 2") == "Untitled slide text"

    result = extract(data, path="talk.odp", options=ExtractOptions(max_slides=1))
    assert titles(result) == ["slide 1: Migration plan"]
    assert result.truncated_reason == (
        "only the first 1 of 3 slides were read (rag.extract.maxSlides)"
    )


def with_dtd(data: bytes, member: str) -> bytes:
    """``data`` (a zip) with an entity declaration in ``member``'s prolog."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(buffer, "w") as target:
        for info in source.infolist():
            body = source.read(info)
            if info.filename == member:
                dtd = b'<!DOCTYPE x [<!ENTITY e "boom">]>'
                head, sep, rest = body.partition(b"?>")
                body = head + sep + dtd + rest if sep else dtd + body
            target.writestr(info, body)
    return buffer.getvalue()


def test_odf_refusals() -> None:
    evil = with_dtd(make_odf("text", "<text:p>x</text:p>"), "content.xml")
    with pytest.raises(ExtractionError, match="DTD or entity"):
        extract(evil, path="evil.odt")

    manifest = "<manifest:manifest><manifest:encryption-data/></manifest:manifest>"
    with pytest.raises(ExtractionError, match="encrypted"):
        extract(make_odf("text", "<text:p>x</text:p>", manifest=manifest), path="locked.odt")

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("content.xml", "<office:document-content>")
    with pytest.raises(ExtractionError, match="not well-formed"):
        extract(buffer.getvalue(), path="broken.ods")
    with pytest.raises(ExtractionError, match=r"no content\.xml"):
        extract(ratio_bomb("other.xml", mib=0), path="empty.odp")
