"""Files the tests write themselves: office files, books, PDFs with and without a text layer,
images with rendered text, and hostile files. No binary fixture comes from elsewhere.

Importable as ``filemakers`` from any test module (the root conftest's folder is on
``sys.path``).
"""

from __future__ import annotations

import io
import zipfile

from vancetope_rag.extraction.registry import ExtractedText


def xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    """A workbook with one sheet per key, rows as given (openpyxl)."""
    from openpyxl import Workbook

    book = Workbook()
    book.remove(book.active)  # type: ignore[arg-type]
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def pptx(slides: list[tuple[str, str, str]]) -> bytes:
    """A presentation: one slide per (title, body, notes) (python-pptx)."""
    from pptx import Presentation

    deck = Presentation()
    for title, body, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title  # type: ignore[union-attr]
        slide.placeholders[1].text = body  # type: ignore[attr-defined]
        if notes:
            slide.notes_slide.notes_text_frame.text = notes  # type: ignore[union-attr]
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"'
)


def odt(paragraphs: list[str]) -> bytes:
    """An OpenDocument text with the given paragraphs."""
    body = "".join(f"<text:p>{p}</text:p>" for p in paragraphs)
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>'
        f"<office:body><office:text>{body}</office:text></office:body>"
        "</office:document-content>"
    )
    return _odf("application/vnd.oasis.opendocument.text", content)


def _odf(mimetype: str, content: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        archive.writestr("content.xml", content, compress_type=zipfile.ZIP_DEFLATED)
        archive.writestr(
            "META-INF/manifest.xml",
            '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest='
            '"urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"/>',
        )
    return buffer.getvalue()


def epub(chapters: list[tuple[str, str]]) -> bytes:
    """An EPUB 3 with one XHTML file per (title, paragraph) chapter, in spine order."""
    buffer = io.BytesIO()
    items = "".join(
        f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in range(len(chapters))
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns='
            '"urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
        )
        archive.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            f"<metadata/><manifest>{items}</manifest><spine>{spine}</spine></package>",
        )
        for i, (title, text) in enumerate(chapters):
            archive.writestr(
                f"OEBPS/c{i}.xhtml",
                '<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE html><html xmlns='
                f'"http://www.w3.org/1999/xhtml"><head><title>{title}</title></head><body>'
                f"<h1>{title}</h1><p>{text}</p></body></html>",
            )
    return buffer.getvalue()


def text_pdf(pages: list[str]) -> bytes:
    """A PDF with a text layer: one page per string (Helvetica, hand-written objects)."""
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
    ]
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font "
            f"<< /F1 {font} 0 R >> >> /Contents {4 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return build_pdf(objects)


def build_pdf(objects: list[bytes], root: int = 1) -> bytes:
    """A PDF of these objects (numbered from 1) with a correct xref table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        root,
        xref,
    )
    return bytes(out)


def many_pages_pdf(count: int) -> bytes:
    """A PDF of ``count`` pages that all share one content stream (small on disk)."""
    stream = b"BT /F1 12 Tf 72 720 Td (One of many pages) Tj ET"
    kids = " ".join(f"{5 + i} 0 R" for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    objects += [page] * count
    return build_pdf(objects)


def looping_pdf() -> bytes:
    """A PDF whose page tree contains itself (a /Pages node among its own kids)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 3 0 R] /Count 2 >>",
    ]
    return build_pdf(objects)


def text_image(text: str, *, fmt: str = "PNG", size: int = 40) -> bytes:
    """An image of ``text`` in black on white, big enough for OCR (Pillow)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    lines = text.split("\n")
    width = max(int(font.getlength(line)) for line in lines) + 80
    image = Image.new("L", (width, (size + 20) * len(lines) + 60), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((40, 30 + i * (size + 20)), line, fill=0, font=font)
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def scanned_pdf(*texts: str) -> bytes:
    """A PDF with one page per text, each an image of it: no text layer (Pillow)."""
    from PIL import Image

    images = [Image.open(io.BytesIO(text_image(t))).convert("RGB") for t in texts]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", resolution=100.0, save_all=True, append_images=images[1:])
    return buffer.getvalue()


def docx(paragraphs: list[str]) -> bytes:
    """A Word document with the given paragraphs (the parts the DOCX reader reads)."""
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr(
            "word/document.xml",
            f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{ns}">'
            f"<w:body>{body}</w:body></w:document>",
        )
    return buffer.getvalue()


def ods(sheets: dict[str, list[str]]) -> bytes:
    """An OpenDocument spreadsheet: per sheet, one cell a row."""
    tables = "".join(
        f'<table:table table:name="{name}">'
        + "".join(
            f"<table:table-row><table:table-cell><text:p>{c}</text:p>"
            "</table:table-cell></table:table-row>"
            for c in cells
        )
        + "</table:table>"
        for name, cells in sheets.items()
    )
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>'
        f"<office:body><office:spreadsheet>{tables}</office:spreadsheet></office:body>"
        "</office:document-content>"
    )
    return _odf("application/vnd.oasis.opendocument.spreadsheet", content)


def encrypted_pdf(text: str, password: str = "s3cret") -> bytes:
    """A text PDF encrypted with a user password (pypdf)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(text_pdf([text]))).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


#: How an encrypted Office file starts: an OLE compound file, not a zip.
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def encrypted_office() -> bytes:
    """What a password-protected DOCX/XLSX looks like from outside: an OLE container."""
    return OLE_MAGIC + b"\x00" * 4088


def zip_bomb(member: str, *, size: int = 1 << 30) -> bytes:
    """A small zip whose ``member`` unpacks to ``size`` zero bytes (written in pieces)."""
    buffer = io.BytesIO()
    piece = b"\x00" * (1 << 20)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open(member, "w", force_zip64=True) as handle:
            for _ in range(size // len(piece)):
                handle.write(piece)
    return buffer.getvalue()


def nested_html(depth: int) -> bytes:
    """An HTML page of ``depth`` nested tags around one sentence."""
    return b"<html><body>" + b"<div>" * depth + b"deep inside" + b"</div>" * depth + b"</body>"


# -- reading what an extraction returned -------------------------------------------------------


def titles(result: ExtractedText) -> list[str]:
    """The section titles of an extraction, in order."""
    return [title for title, _, _ in result.sections]


def section(result: ExtractedText, title: str) -> str:
    """The text of the section titled ``title``."""
    for name, start, end in result.sections:
        if name == title:
            return result.text[start:end]
    raise AssertionError(f"no section {title!r} in {titles(result)}")
