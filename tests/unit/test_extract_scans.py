"""PDFs page by page and scans through OCR: the text layer, budgets, hostile page trees,
encryption, images, and the two OCR backends (a real HTTP vision server on 127.0.0.1, and the
tesseract binary where it is installed).

Every fixture is generated here: PDFs with a text layer are written by hand, scans are text
rendered onto a Pillow image and saved as PDF, PNG or TIFF.
"""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from PIL import Image, ImageDraw, ImageFont
from pypdf import PdfReader, PdfWriter

from fakes import default_extractors
from filemakers import build_pdf, titles
from vancetope_rag.default_plugins import extractors
from vancetope_rag.default_plugins.extractors import scans as extract_scans
from vancetope_rag.errors import ExtractionError, ExtractorUnavailableError
from vancetope_rag.extraction.registry import (
    ExtractedText,
    ExtractOptions,
    ExtractorDependencyMissing,
    NoTextLayerError,
    OcrConfig,
    extract_text,
)
from vision_server import KEY, MODEL, TRANSCRIPTION, VisionServer, serve_vision

BUILTINS = default_extractors()  # never changed by a test
NEEDS_OCR = "configure an OCR/vision extractor (rag.extract.ocr = tesseract or vision)"
needs_tesseract = pytest.mark.skipif(
    shutil.which("tesseract") is None, reason="the tesseract binary is not installed"
)


def extract(data: bytes, path: str, **options: Any) -> ExtractedText:
    """:func:`extract_text` with the default plugins' extractors and these options."""
    return extract_text(data, path=path, registry=BUILTINS, options=ExtractOptions(**options))


# --- fixtures: PDFs and images ------------------------------------------------------------


def text_stream(text: str) -> bytes:
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    return b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"


def text_pdf(*pages: str) -> bytes:
    """A PDF with a text layer: one page per text (objects 1 catalog, 2 pages, 3 font)."""
    first = 4
    kids = b" ".join(b"%d 0 R" % (first + 2 * i) for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (first + 2 * i + 1)
        )
        objects.append(text_stream(text))
    return build_pdf(objects)


def huge_pdf(pages: int) -> bytes:
    """``pages`` small page objects sharing one content stream, all kids of one /Pages."""
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    return build_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            text_stream("Repeated page of a very long manual"),
            *[page] * pages,
        ]
    )


def rendered(*lines: str, width: int = 1275, height: int = 1650) -> Image.Image:
    """Black text on white, big and clear, as a scanner would deliver it."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=48)
    for i, line in enumerate(lines):
        draw.text((100, 200 + 90 * i), line, fill="black", font=font)
    return image


def scanned_pdf(*images: Image.Image) -> bytes:
    """A PDF of page images and nothing else: no text layer."""
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", resolution=150, save_all=True, append_images=list(images[1:]))
    return buffer.getvalue()


def image_bytes(image: Image.Image, fmt: str = "PNG", **kwargs: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def merged(*pdfs: bytes) -> bytes:
    """The pages of several PDFs, in order, in one PDF."""
    writer = PdfWriter()
    for pdf in pdfs:
        for page in PdfReader(io.BytesIO(pdf)).pages:
            writer.add_page(page)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def encrypted(pdf: bytes, user_password: str, algorithm: str = "AES-256") -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password="owner-pw", algorithm=algorithm)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


SENTENCE = ("The turbine inspection", "interval is ninety days.")
SCAN = rendered(*SENTENCE)


def finishes_within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result (or its exception, raised), failing if it runs past ``seconds``: a
    guard against a hang, so ``seconds`` is at least 10x what the call takes on a quiet
    machine (a busy one stretches the wall clock several times)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds}s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


# --- the fake vision model ----------------------------------------------------------------
# --- the fake vision model (tests/vision_server.py) ----------------------------------------


@pytest.fixture
def vision() -> Iterator[VisionServer]:
    with serve_vision() as server:
        yield server


# --- PDF text layer -----------------------------------------------------------------------


def test_pdf_pages_are_sections_titled_page_n() -> None:
    pdf = text_pdf("Alpha page text", "Bravo page text", "Charlie page text")
    result = extract(pdf, "manual.pdf")
    assert result.text == "Alpha page text\n\nBravo page text\n\nCharlie page text"
    assert titles(result) == ["page 1", "page 2", "page 3"]
    assert [s.text for s in result.section_texts()] == [
        "Alpha page text",
        "Bravo page text",
        "Charlie page text",
    ]
    assert not result.truncated and not result.ocr
    assert result.extractor == "vancetope.pdf@2"


def test_the_pdf_extractor_is_still_importable_from_extractors() -> None:
    assert extractors.extract_pdf is extract_scans.extract_pdf
    assert BUILTINS.find("application/pdf", "a.pdf") is extract_scans.extract_pdf
    assert BUILTINS.find(None, "a.PDF") is extract_scans.extract_pdf
    out = extractors.extract_pdf(text_pdf("Called the old way"), "a.pdf")
    assert [s.text for s in out.sections] == ["Called the old way"]


def test_max_pages_budget_on_a_10000_page_pdf() -> None:
    pdf = huge_pdf(10_000)
    started = time.process_time()  # CPU: another process cannot stretch it
    result = extract(pdf, "huge.pdf", max_pages=25)
    assert time.process_time() - started < 5
    assert titles(result) == [f"page {n}" for n in range(1, 26)]
    assert result.truncated
    assert result.truncated_reason == (
        "only the first 25 of 10,000 pages were read (rag.extract.maxPages)"
    )


def test_default_page_budget_ends_fast_too() -> None:
    result = finishes_within(120, lambda: extract(huge_pdf(10_000), "huge.pdf"))
    assert len(result.sections) == 2_000
    assert "only the first 2,000 of 10,000 pages" in (result.truncated_reason or "")


@pytest.mark.parametrize(
    "kids",
    [
        b"[3 0 R 2 0 R]",  # the root lists itself
        b"[3 0 R 5 0 R]",  # a child node lists the root and itself
        b"[3 0 R 5 0 R 5 0 R 3 0 R]",  # shared nodes and pages
    ],
)
def test_a_page_tree_that_loops_ends(kids: bytes) -> None:
    pdf = build_pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids %s /Count 1000000 >>" % kids,
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 6 0 R >> >> /Contents 4 0 R >>",
            text_stream("The only real page"),
            b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 5 0 R 3 0 R] /Count 5 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )
    result = finishes_within(60, lambda: extract(pdf, "loop.pdf"))
    assert result.text == "The only real page"
    assert titles(result) == ["page 1"]


def test_a_page_tree_nested_past_the_depth_limit_is_refused() -> None:
    depth = 200
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1 >>" % (level + 3))
    objects.append(b"<< /Type /Page /MediaBox [0 0 612 792] >>")
    pdf = build_pdf(objects)
    with pytest.raises(ExtractionError, match="nests too deeply"):
        finishes_within(60, lambda: extract(pdf, "deep.pdf"))


def test_broken_and_empty_pdfs() -> None:
    with pytest.raises(ExtractionError, match="not a readable PDF"):
        extract(b"%PDF-1.4 garbage", "b.pdf")
    empty = build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] >>"])
    with pytest.raises(ExtractionError, match="holds no pages"):
        extract(empty, "empty.pdf")


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_a_password_protected_pdf_is_refused(algorithm: str) -> None:
    pdf = encrypted(text_pdf("Secret minutes"), "s3cret", algorithm)
    with pytest.raises(ExtractionError) as info:
        extract(pdf, "locked.pdf")
    assert str(info.value) == (
        "cannot extract text from 'locked.pdf': the PDF is encrypted (password-protected); "
        "save it without a password"
    )


def test_a_pdf_encrypted_with_an_empty_user_password_is_read() -> None:
    pdf = encrypted(text_pdf("Open minutes", "Second page"), "")
    result = extract(pdf, "restricted.pdf")
    assert result.text == "Open minutes\n\nSecond page"
    assert titles(result) == ["page 1", "page 2"]


def test_pdf_without_pypdf_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(text_pdf("x"), "a.pdf")
    assert info.value.extra == "pdf"


# --- scanned PDF pages --------------------------------------------------------------------


def test_a_scanned_pdf_without_ocr_has_no_text_layer() -> None:
    with pytest.raises(NoTextLayerError) as info:
        extract(scanned_pdf(SCAN), "scans/report.pdf")
    assert str(info.value) == (
        f"cannot extract text from 'scans/report.pdf': no text layer — {NEEDS_OCR}"
    )
    assert info.value.code == "EXTRACT_NO_TEXT_LAYER"


def test_a_mixed_pdf_without_ocr_keeps_its_text_pages() -> None:
    pdf = merged(text_pdf("Typed cover page"), scanned_pdf(SCAN), text_pdf("Typed appendix"))
    result = extract(pdf, "mixed.pdf")
    assert result.text == "Typed cover page\n\nTyped appendix"
    assert titles(result) == ["page 1", "page 3"]
    assert result.ocr  # a later OCR configuration re-extracts it
    assert result.truncated_reason == (
        "1 page had no text layer and was left out: OCR is not configured "
        "(rag.extract.ocr = tesseract or vision)"
    )


def test_blank_pages_are_not_scans() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf("Before the blank page"))))
    writer.add_blank_page(612, 792)
    buffer = io.BytesIO()
    writer.write(buffer)
    result = extract(buffer.getvalue(), "blank.pdf")
    assert result.text == "Before the blank page"
    assert not result.ocr and not result.truncated


def test_a_scanned_pdf_through_the_vision_model(vision: VisionServer) -> None:
    pages = (rendered("first", width=600, height=900), rendered("second", width=900))
    pdf = merged(text_pdf("Typed cover page"), scanned_pdf(*pages))
    result = extract(pdf, "scan.pdf", ocr=vision.config())
    assert titles(result) == ["page 1", "page 2", "page 3"]
    texts = [s.text for s in result.section_texts()]
    assert texts[0] == "Typed cover page"
    # 600 px at 150 dpi is 288 pt, rendered at 200 dpi: 800 px; 900 px: 1200 px.
    assert texts[1:] == [f"{TRANSCRIPTION} (800px)", f"{TRANSCRIPTION} (1200px)"]
    assert result.ocr and not result.truncated
    assert len(vision.requests) == 2


def test_large_pages_are_rendered_no_larger_than_the_cap(vision: VisionServer) -> None:
    poster = scanned_pdf(rendered("poster", width=9000, height=3000))  # 60 x 20 inches
    result = extract(poster, "poster.pdf", ocr=vision.config())
    assert result.text == f"{TRANSCRIPTION} ({extract_scans.MAX_IMAGE_SIDE}px)"


def test_vision_max_pages_bounds_the_pages_sent(vision: VisionServer) -> None:
    pdf = scanned_pdf(*[rendered(f"scan {n}", width=600, height=800) for n in range(4)])
    result = extract(pdf, "scan.pdf", ocr=vision.config(max_pages=2))
    assert len(vision.requests) == 2
    assert titles(result) == ["page 1", "page 2"]
    assert result.truncated_reason is not None
    assert "only 2 of the 4 pages without a text layer were read by OCR" in (
        result.truncated_reason
    )
    assert "rag.extract.vision.maxPages" in result.truncated_reason


def test_requests_in_flight_stay_within_the_concurrency(vision: VisionServer) -> None:
    vision.delay = 0.15
    pdf = scanned_pdf(*[rendered(f"scan {n}", width=400, height=500) for n in range(6)])
    result = extract(pdf, "scan.pdf", ocr=vision.config(concurrency=2))
    assert len(result.sections) == 6 and len(vision.requests) == 6
    assert vision.max_in_flight == 2


def test_a_refused_key_is_named_but_never_shown(vision: VisionServer) -> None:
    vision.status = 401
    vision.error_body = json.dumps(
        {"error": {"message": f"Incorrect API key provided: {KEY}"}}
    ).encode()
    with pytest.raises(ExtractionError) as info:
        extract(scanned_pdf(SCAN), "scan.pdf", ocr=vision.config())
    message = str(info.value)
    assert "the vision model refused the API key (rag.extract.vision.apiKey)" in message
    assert KEY not in message and KEY[:12] not in message


def test_a_server_error_names_status_and_url_with_the_key_redacted(
    vision: VisionServer,
) -> None:
    vision.status = 500
    vision.error_body = json.dumps({"error": {"message": f"upstream failed for {KEY}"}}).encode()
    with pytest.raises(ExtractionError) as info:
        extract(image_bytes(SCAN), "scan.png", ocr=vision.config())
    message = str(info.value)
    assert "HTTP 500" in message and vision.base_url in message
    assert "upstream failed for ****" in message
    assert KEY not in message


def test_not_a_chat_completion(vision: VisionServer) -> None:
    vision.raw_answer = b"<html>proxy login</html>"
    with pytest.raises(ExtractionError, match="did not answer with a chat completion"):
        extract(image_bytes(SCAN), "scan.png", ocr=vision.config())


def test_a_slow_vision_model_times_out(vision: VisionServer) -> None:
    vision.delay = 2.0
    with pytest.raises(ExtractionError, match=r"did not answer within 0\.3s"):
        config = vision.config(request_timeout_s=0.3)
        finishes_within(60, lambda: extract(image_bytes(SCAN), "a.png", ocr=config))


def test_no_vision_model_configured() -> None:
    config = OcrConfig(engine="vision", vision_base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ExtractionError, match=r"set rag\.extract\.vision\.model"):
        extract(image_bytes(SCAN), "scan.png", ocr=config)


def test_an_unreachable_vision_model() -> None:
    config = OcrConfig(engine="vision", vision_model=MODEL, vision_base_url="http://127.0.0.1:9")
    with pytest.raises(ExtractionError, match=r"cannot reach the vision model at http://127"):
        extract(image_bytes(SCAN), "scan.png", ocr=config)


@pytest.mark.parametrize(
    ("base_url", "said"),
    [
        ("ftp://vision.example/v1", "not an http(s) URL"),
        ("vision.example:8080", "not an http(s) URL"),
        ("http://127.0.0.1:http/v1", "port"),
        ("http://127.0.0.1:99999/v1", "port"),
    ],
)
def test_a_vision_base_url_that_cannot_be_called_is_refused_naming_the_setting(
    base_url: str, said: str
) -> None:
    """Before, a port that is no number or out of range was tried (and the refusal named
    another URL than the one set)."""
    config = OcrConfig(engine="vision", vision_model=MODEL, vision_base_url=base_url)
    with pytest.raises(ExtractionError, match=r"rag\.extract\.vision\.baseUrl") as refused:
        extract(image_bytes(SCAN), "scan.png", ocr=config)
    assert said in str(refused.value)


@pytest.mark.parametrize(
    ("status", "machine"),
    [(500, True), (503, True), (429, True), (401, True), (404, True), (400, False), (413, False)],
)
def test_whose_failure_a_vision_answer_is(vision: VisionServer, status: int, machine: bool) -> None:
    """Down, overloaded or refusing the settings: the machine's failure, read again later;
    a refusal of this image: the file's."""
    vision.status = status
    with pytest.raises(ExtractionError) as info:
        extract(image_bytes(SCAN), "scan.png", ocr=vision.config())
    assert isinstance(info.value, ExtractorUnavailableError) is machine
    assert info.value.code == ("EXTRACT_BACKEND_UNAVAILABLE" if machine else "EXTRACTION_FAILED")


def test_unreachable_or_slow_is_the_machines_failure(vision: VisionServer) -> None:
    config = OcrConfig(engine="vision", vision_model=MODEL, vision_base_url="http://127.0.0.1:9")
    with pytest.raises(ExtractorUnavailableError):
        extract(image_bytes(SCAN), "scan.png", ocr=config)
    vision.delay = 2.0
    with pytest.raises(ExtractorUnavailableError):
        extract(image_bytes(SCAN), "a.png", ocr=vision.config(request_timeout_s=0.3))


def test_ocr_known_unavailable_fails_at_once_without_a_call(vision: VisionServer) -> None:
    config = dataclasses.replace(vision.config(), unavailable="the program is missing")
    with pytest.raises(ExtractorUnavailableError, match="the program is missing"):
        extract(image_bytes(SCAN), "scan.png", ocr=config)
    assert vision.requests == []


def test_ocr_that_finds_no_text(vision: VisionServer) -> None:
    vision.answer = "  \n"
    with pytest.raises(NoTextLayerError, match="OCR found no text"):
        extract(image_bytes(SCAN), "blank.png", ocr=vision.config())
    with pytest.raises(NoTextLayerError, match="OCR found no text"):
        extract(scanned_pdf(SCAN), "blank.pdf", ocr=vision.config())


def test_scanned_pdf_without_pypdfium2_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, vision: VisionServer
) -> None:
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(scanned_pdf(SCAN), "scan.pdf", ocr=vision.config())
    assert info.value.extra == "pdf"


def test_a_scan_encrypted_with_an_empty_password_is_rendered(vision: VisionServer) -> None:
    result = extract(encrypted(scanned_pdf(SCAN), ""), "scan.pdf", ocr=vision.config())
    assert result.text.startswith(TRANSCRIPTION)


# --- images -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "path"), [("PNG", "a.png"), ("JPEG", "a.jpg"), ("WEBP", "a.webp"), ("GIF", "a.gif")]
)
def test_an_image_through_the_vision_model(vision: VisionServer, fmt: str, path: str) -> None:
    result = extract(image_bytes(SCAN, fmt), path, ocr=vision.config())
    assert result.text == f"{TRANSCRIPTION} (1275px)"
    assert result.sections == () and result.ocr
    assert result.mime_type.startswith("image/")


def test_an_image_without_ocr_has_no_text_layer() -> None:
    with pytest.raises(NoTextLayerError) as info:
        extract(image_bytes(SCAN), "photos/board.png")
    assert str(info.value) == (
        f"cannot extract text from 'photos/board.png': an image has no text layer — {NEEDS_OCR}"
    )


def test_transparent_images_are_read_on_white(vision: VisionServer) -> None:
    image = Image.new("RGBA", (600, 200), (0, 0, 0, 0))
    ImageDraw.Draw(image).text((20, 50), "Ink", fill=(0, 0, 0, 255))
    assert extract(image_bytes(image), "a.png", ocr=vision.config()).text.startswith(TRANSCRIPTION)
    flattened = extract_scans._flattened(image)
    assert flattened.mode == "RGB" and flattened.getpixel((0, 0)) == (255, 255, 255)


def test_each_tiff_frame_is_a_page_within_the_budget(vision: VisionServer) -> None:
    frames = [rendered(f"frame {n}", width=500 + 100 * n, height=700) for n in range(4)]
    tiff = image_bytes(frames[0], "TIFF", save_all=True, append_images=frames[1:])
    result = extract(tiff, "fax.tiff", ocr=vision.config())
    assert titles(result) == ["page 1", "page 2", "page 3", "page 4"]
    assert result.section_texts()[2].text == f"{TRANSCRIPTION} (700px)"
    budgeted = extract(tiff, "fax.tif", ocr=vision.config(), max_pages=2)
    assert titles(budgeted) == ["page 1", "page 2"]
    assert budgeted.truncated_reason == (
        "only the first 2 pages of the image were read (rag.extract.maxPages)"
    )


def png_claiming(width: int, height: int) -> bytes:
    """A small PNG whose header claims another size (CRC fixed, so only the size lies)."""
    data = bytearray(image_bytes(Image.new("L", (4, 4), 255)))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("size", [(10_000, 9_000), (100_000, 100_000)])
def test_decompression_bombs_are_refused(size: tuple[int, int], vision: VisionServer) -> None:
    # 90 million pixels: past this extractor's limit (Pillow only warns); 10 billion: Pillow
    # refuses it itself. Either way nothing is decoded, and nothing is sent.
    bomb = png_claiming(*size)
    with pytest.raises(ExtractionError, match="decompression bomb"):
        finishes_within(60, lambda: extract(bomb, "bomb.png", ocr=vision.config()))
    assert not vision.requests


def test_a_broken_image(vision: VisionServer) -> None:
    with pytest.raises(ExtractionError, match="not a readable image"):
        extract(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "img.png", ocr=vision.config())


# --- tesseract ----------------------------------------------------------------------------


def words_read(text: str) -> set[str]:
    return {word.strip(".,:;").lower() for word in text.split()}


@needs_tesseract
def test_tesseract_reads_a_png() -> None:
    result = extract(image_bytes(SCAN), "board.png", ocr=OcrConfig(engine="tesseract"))
    assert {"turbine", "inspection", "ninety"} <= words_read(result.text)
    assert result.ocr


@needs_tesseract
def test_tesseract_reads_a_scanned_pdf_page_among_text_pages() -> None:
    pdf = merged(text_pdf("Typed cover page"), scanned_pdf(SCAN))
    result = extract(pdf, "scan.pdf", ocr=OcrConfig(engine="tesseract"))
    assert titles(result) == ["page 1", "page 2"]
    assert {"turbine", "interval", "days"} <= words_read(result.section_texts()[1].text)


@needs_tesseract
def test_tesseract_without_the_language_names_the_package() -> None:
    config = OcrConfig(engine="tesseract", language="xqz")
    with pytest.raises(ExtractionError, match="tesseract-ocr-xqz"):
        extract(image_bytes(SCAN), "a.png", ocr=config)


def test_tesseract_binary_missing_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    pytesseract = pytest.importorskip("pytesseract")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", "/nonexistent/tesseract")
    with pytest.raises(ExtractionError) as info:
        extract(image_bytes(SCAN), "a.png", ocr=OcrConfig(engine="tesseract", language="deu"))
    assert info.value.code == "EXTRACT_PROGRAM_MISSING"  # retried, as a missing ffmpeg is
    assert "apt-get install tesseract-ocr tesseract-ocr-deu" in str(info.value)


def test_missing_pytesseract_names_the_ocr_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pytesseract", None)
    with pytest.raises(ExtractorDependencyMissing) as info:
        extract(image_bytes(SCAN), "a.png", ocr=OcrConfig(engine="tesseract"))
    assert info.value.extra == "ocr"
    assert "pip install 'vancetope-rag[ocr]'" in str(info.value)


def test_an_unknown_engine() -> None:
    with pytest.raises(ExtractionError, match="unknown OCR engine 'abbyy'"):
        extract(image_bytes(SCAN), "a.png", ocr=OcrConfig(engine="abbyy"))
