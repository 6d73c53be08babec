"""PDFs (text layer per page, scanned pages through OCR) and images (through OCR).

A PDF is read page by page with ``pypdf`` (the ``pdf`` extra), one section ``page N`` each,
within ``rag.extract.maxPages``: the page tree is walked by hand, so pages past the budget are
never parsed and a page tree that loops ends. Pages without a text layer are scans: with
``rag.extract.ocr`` set they are rendered with ``pypdfium2`` and read by the OCR/vision backend
(:mod:`.ocr`); without it the file is reported as needing OCR.
Images (PNG, JPEG, TIFF, WebP, GIF) have no text layer at all and always need the backend.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from vancetope_rag.default_plugins.extractors.ocr import has_text as _has_text
from vancetope_rag.default_plugins.extractors.ocr import recognize
from vancetope_rag.errors import ExtractionError, RagError
from vancetope_rag.extraction.registry import (
    Extraction,
    ExtractOptions,
    ExtractorDependencyMissingError,
    NoTextLayerError,
    OcrConfig,
    RegisterExtractor,
    Section,
    extraction_error,
)
from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

PDF_MIMES = ("application/pdf", "application/x-pdf")
IMAGE_TYPES = {
    "image/png": (".png",),
    "image/jpeg": (".jpg", ".jpeg", ".jpe", ".jfif"),
    "image/tiff": (".tif", ".tiff"),
    "image/webp": (".webp",),
    "image/gif": (".gif",),
}
#: Resolution scanned PDF pages are rendered at for OCR, and the longest side of any image
#: sent to the backend (larger pages and images are scaled down to it).
RENDER_DPI = 200
MAX_IMAGE_SIDE = 2500
#: Largest image (or TIFF frame) decoded, in pixels: a decompression-bomb guard (~ 9k x 9k;
#: an A4 page scanned at 600 dpi is 35 million).
MAX_IMAGE_PIXELS = 80_000_000
#: Deepest page tree walked; the PDF spec has no limit, real files stay far below it.
MAX_TREE_DEPTH = 64
#: Pages rendered before they go to the backend (bounds the memory held in page images).
OCR_BATCH = 8
_INHERITED = ("/Resources", "/MediaBox", "/CropBox", "/Rotate")
_NEEDS_OCR = "configure an OCR/vision extractor (rag.extract.ocr = tesseract or vision)"


# --- PDF --------------------------------------------------------------------------------------


def extract_pdf(data: bytes, path: str, options: ExtractOptions | None = None) -> Extraction:
    """The text of a PDF, one section ``page N`` per page; scans through the OCR backend.

    Args:
        data: The PDF.
        path: Its path, for messages.
        options: ``max_pages`` bounds the pages read and ``ocr`` the backend for pages
            without a text layer; the defaults when ``None``.

    Raises:
        ExtractorDependencyMissingError: ``pypdf`` (or, for scans, ``pypdfium2``) is missing.
        NoTextLayerError: No page has a text layer and no OCR backend is configured, or OCR
            found no text either.
        ExtractionError: The PDF is broken, or encrypted with a password.
    """
    with _pypdf_quiet(path):
        return _read_pdf(data, path, options or ExtractOptions())


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _pypdf_quiet(path: str) -> Iterator[None]:
    """pypdf's warnings about a damaged but readable file ("incorrect startxref pointer") go
    to our debug log, not to stderr: with no handler configured, logging's last resort
    printed them on the terminal of an ``import``, between its progress lines."""
    logger = logging.getLogger("pypdf")
    collected = _Collected()
    propagate = logger.propagate
    logger.addHandler(collected)
    logger.propagate = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.removeHandler(collected)
        logger.propagate = propagate
        if collected.messages:
            shown = "; ".join(collected.messages[:5])
            log.debug("pypdf reading %r: %s", path, shown)


def _read_pdf(data: bytes, path: str, options: ExtractOptions) -> Extraction:
    try:
        import pypdf  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise ExtractorDependencyMissingError("PDF text extraction", "pdf") from None
    limit = max(1, options.max_pages)
    first = max(1, options.first_page)
    ocr = options.ocr
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            _decrypt(reader, path)
        pages, more, total = _first_pages(reader, limit, path, skip=first - 1)
        texts = [_page_text(page) for page in pages]
        seen = [not _is_blank(page) for page in pages]
        scans = [i for i, text in enumerate(texts) if seen[i] and not _has_text(text)]
        # vision: true reads every page with content, text layer or not (the tool only)
        looked = [i for i in range(len(pages)) if seen[i]] if options.vision_all else scans
    except RagError:
        raise
    except Exception as exc:  # pypdf raises many types for broken files
        raise extraction_error(path, f"not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not pages:
        if first > 1:
            raise extraction_error(path, f"the PDF has no page {first} ({total or 0} pages)")
        raise extraction_error(path, "not a readable PDF (its page tree holds no pages)")
    for index in scans:  # a page number or a stray mark is not the page's text
        texts[index] = ""
    reasons: list[str] = []
    if more:
        of = f"{total:,}" if total and total > limit else "more"
        if first > 1:
            reasons.append(f"only pages {first:,}-{first + limit - 1:,} of {of} were read")
        else:
            reasons.append(
                f"only the first {limit:,} of {of} pages were read (rag.extract.maxPages)"
            )
    done: list[int] = []
    if scans and ocr is None:
        if not any(_has_text(t) for t in texts):
            raise NoTextLayerError(
                f"cannot extract text from {path!r}: no text layer — {_NEEDS_OCR}"
            )
        were = (
            "page had no text layer and was"
            if len(scans) == 1
            else ("pages had no text layer and were")
        )
        reasons.append(
            f"{len(scans):,} {were} left out: OCR is not configured "
            "(rag.extract.ocr = tesseract or vision)"
        )
    elif looked and ocr is not None:
        done = looked[: max(0, ocr.max_pages)]
        for index, text in zip(done, _ocr_pdf_pages(data, done, ocr, path), strict=True):
            layer = texts[index].strip()
            texts[index] = f"{layer}\n\n{text.strip()}" if layer else text.strip()
        if len(done) < len(looked):
            without = "" if options.vision_all else " without a text layer"
            reasons.append(
                f"only {len(done):,} of the {_pages(len(looked))}{without} were read "
                f"by OCR ({ocr.limit_setting}, the OCR page limit)"
            )
        if not any(_has_text(t) for t in texts):
            raise NoTextLayerError(
                f"cannot extract text from {path!r}: no text layer, and OCR found no text "
                "on its pages"
            )
    left = [i for i in scans if i not in set(done)]
    sections = tuple(Section(text, f"page {first + i}") for i, text in enumerate(texts))
    return Extraction(
        sections,
        "; ".join(reasons) or None,
        ocr=bool(scans) or bool(done),
        ocr_pages=tuple(first + i for i in done),
        ocr_left=tuple(first + i for i in left),
    )


def _decrypt(reader: Any, path: str) -> None:
    """Open an encrypted PDF with the empty user password, or refuse it."""
    from pypdf.errors import DependencyError

    try:
        opened = reader.decrypt("")
    except DependencyError:  # AES without the cryptography package
        raise extraction_error(
            path,
            "the PDF is AES-encrypted; reading it needs the cryptography package "
            "(pip install cryptography)",
        ) from None
    except Exception:  # an unknown security handler or a broken /Encrypt dictionary
        opened = 0
    if not opened:
        raise extraction_error(
            path, "the PDF is encrypted (password-protected); save it without a password"
        )


def _first_pages(
    reader: Any, limit: int, path: str, *, skip: int = 0
) -> tuple[list[Any], bool, int | None]:
    """The first ``limit`` pages after the first ``skip``, whether there are more, and the
    page count the PDF claims.

    The page tree is walked with an explicit stack: each node is visited once (a tree that
    loops, or shares a node, ends), and the walk stops at the page after the budget; skipped
    pages are counted, never parsed.
    """
    from pypdf import PageObject
    from pypdf.generic import DictionaryObject, IndirectObject

    root = reader.trailer["/Root"].get_object()
    reference = root.raw_get("/Pages") if "/Pages" in root else None
    tree = reference.get_object() if reference is not None else None
    if not isinstance(tree, DictionaryObject):
        raise extraction_error(path, "not a readable PDF (no page tree)")
    count = _resolved(tree, "/Count")
    total = int(count) if isinstance(count, int) and count >= 0 else None
    pages: list[Any] = []
    skipped = 0
    seen: set[object] = set()
    # Each frame: the /Kids still to visit of one node and the attributes its pages inherit.
    stack: list[tuple[Iterator[Any], dict[str, Any]]] = []

    def enter(node: DictionaryObject, inherit: dict[str, Any]) -> None:
        if len(stack) >= MAX_TREE_DEPTH:
            raise extraction_error(path, "not a readable PDF (the page tree nests too deeply)")
        inherit = {**inherit, **{k: node[k] for k in _INHERITED if k in node}}
        kids = _resolved(node, "/Kids")
        stack.append((iter(kids if isinstance(kids, list) else ()), inherit))

    seen.add(_identity(reference, tree))
    enter(tree, {})
    while stack:
        kids, inherit = stack[-1]
        kid = next(kids, None)
        if kid is None:
            stack.pop()
            continue
        node = kid.get_object()
        key = _identity(kid, node)
        if not isinstance(node, DictionaryObject) or key in seen:
            continue
        seen.add(key)
        if node.get("/Type") == "/Pages" or "/Kids" in node:
            enter(node, inherit)
            continue
        if skipped < skip:
            skipped += 1
            continue
        if len(pages) == limit:
            return pages, True, total
        page = PageObject(reader, kid if isinstance(kid, IndirectObject) else None)
        page.update(node)
        for name, value in inherit.items():
            if name not in page:
                page[name] = value
        pages.append(page)
    return pages, False, total


def _resolved(node: Any, key: str) -> Any:
    value = node.get(key)
    return value.get_object() if value is not None else None


def _identity(reference: Any, node: Any) -> object:
    idnum = getattr(reference, "idnum", None)
    return (idnum, reference.generation) if idnum is not None else id(node)


def _page_text(page: Any) -> str:
    return str(page.extract_text() or "").strip("\n")


def _is_blank(page: Any) -> bool:
    """A page that draws nothing at all (no content stream, or an empty one): not a scan."""
    if page.get("/Contents") is None:
        return True
    contents = page.get_contents()
    return contents is None or not contents.get_data().strip()


def _ocr_pdf_pages(data: bytes, indexes: Sequence[int], config: OcrConfig, path: str) -> list[str]:
    """OCR of the pages at ``indexes`` (0-based): rendered, then read a batch at a time."""
    if not indexes:
        return []
    try:
        import pypdfium2  # type: ignore[import-not-found, unused-ignore]
        from PIL import Image  # noqa: F401  (the render's to_pil needs it)
    except ImportError:
        raise ExtractorDependencyMissingError("OCR of scanned PDF pages", "pdf") from None
    try:
        document = pypdfium2.PdfDocument(data)
    except Exception as exc:
        raise extraction_error(
            path, f"not a renderable PDF ({type(exc).__name__}: {exc})"
        ) from None
    texts: dict[int, str] = {}
    try:
        batch = max(OCR_BATCH, config.concurrency)
        # pdfium may count fewer pages than the walk found in a broken page tree: those stay empty.
        known = [i for i in indexes if i < len(document)]
        for start in range(0, len(known), batch):
            chosen = known[start : start + batch]
            for index, text in zip(
                chosen,
                recognize([render_page(document, i, path) for i in chosen], config, path),
                strict=True,
            ):
                texts[index] = text
    finally:
        document.close()
    return [texts.get(i, "") for i in indexes]


def render_page(document: Any, index: int, path: str) -> bytes:
    """Page ``index`` of a pypdfium2 document as a PNG, at most :data:`MAX_IMAGE_SIDE` a
    side (what the OCR/vision backends receive)."""
    page = document[index]
    try:
        width, height = page.get_size()
        scale = min(RENDER_DPI / 72, MAX_IMAGE_SIDE / max(width, height, 1.0))
        image = page.render(scale=max(scale, 0.01)).to_pil()
    except ExtractionError:
        raise
    except Exception as exc:
        raise extraction_error(
            path, f"page {index + 1} cannot be rendered ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        page.close()
    return _png(image)


def _pages(n: int) -> str:
    return f"{n:,} page" if n == 1 else f"{n:,} pages"


# --- images -----------------------------------------------------------------------------------


def extract_image(data: bytes, path: str, options: ExtractOptions | None = None) -> Extraction:
    """The text in an image, read by the OCR backend; each frame of a TIFF is a page.

    Raises:
        NoTextLayerError: No OCR backend is configured, or it found no text.
        ExtractorDependencyMissingError: Pillow is missing (the ``ocr`` extra).
        ExtractionError: The image is broken or larger than :data:`MAX_IMAGE_PIXELS`.
    """
    options = options or ExtractOptions()
    if options.ocr is None:
        raise NoTextLayerError(
            f"cannot extract text from {path!r}: an image has no text layer — {_NEEDS_OCR}"
        )
    limit = max(1, min(options.max_pages, options.ocr.max_pages))
    first = max(1, options.first_page)
    frames, more = _frames(data, path, limit, skip=first - 1)
    texts = recognize(frames, options.ocr, path)
    if not any(_has_text(t) for t in texts):
        raise NoTextLayerError(
            f"cannot extract text from {path!r}: an image has no text layer, and OCR found no "
            "text in it"
        )
    reason = None
    if more:
        setting = (
            "rag.extract.maxPages"
            if limit == options.max_pages
            else (f"{options.ocr.limit_setting}, the OCR page limit")
        )
        reason = f"only the first {limit:,} pages of the image were read ({setting})"
    read = tuple(range(first, first + len(texts)))
    # the page after the last read: where a bounded reader continues (the count is unknown)
    left = (first + len(texts),) if more else ()
    if len(texts) == 1 and not more and first == 1:
        return Extraction((Section(texts[0].strip()),), ocr=True, ocr_pages=read)
    sections = tuple(Section(t.strip(), f"page {first + i}") for i, t in enumerate(texts))
    return Extraction(sections, reason, ocr=True, ocr_pages=read, ocr_left=left)


def _frames(data: bytes, path: str, limit: int, *, skip: int = 0) -> tuple[list[bytes], bool]:
    """PNGs of the image's first ``limit`` frames after ``skip`` (TIFF pages; one for other
    formats), and whether it has more."""
    try:
        from PIL import Image
    except ImportError:
        raise ExtractorDependencyMissingError("OCR of images", "ocr") from None
    frames: list[bytes] = []
    try:
        with Image.open(io.BytesIO(data)) as image:
            paged = image.format == "TIFF"
            if skip:
                if not paged:
                    _no_such_frame(path, skip)
                try:
                    image.seek(skip)
                except EOFError:
                    _no_such_frame(path, skip)
            while True:
                width, height = image.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise extraction_error(
                        path,
                        f"the image is {width:,} x {height:,} pixels, more than the "
                        f"{MAX_IMAGE_PIXELS:,} read (a decompression bomb, or a scan at a "
                        "needlessly high resolution: scale it down)",
                    )
                if image.format == "JPEG":  # decode at a reduced scale where that suffices
                    image.draft("RGB", (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
                frames.append(_png(_flattened(image)))
                if not paged:
                    return frames, False
                try:
                    image.seek(skip + len(frames))
                except EOFError:
                    return frames, False
                if len(frames) == limit:
                    return frames, True
    except RagError:
        raise
    except Image.DecompressionBombError:
        raise extraction_error(
            path, "the image is too large to decode (a decompression bomb)"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's errors for broken files
        raise extraction_error(
            path, f"not a readable image ({type(exc).__name__}: {exc})"
        ) from None


def _no_such_frame(path: str, skip: int) -> None:
    raise extraction_error(path, f"the image has no page {skip + 1}")


def _flattened(image: Any) -> Any:
    """An RGB (or grayscale) copy of one frame; transparency becomes white."""
    from PIL import Image

    if image.mode in ("1", "L", "RGB"):
        return image.copy()
    if image.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        return image.convert("I").point(lambda v: v / 256).convert("L")
    rgba = image.convert("RGBA")
    out = Image.new("RGB", rgba.size, "white")
    out.paste(rgba, mask=rgba.getchannel("A"))
    return out


def _png(image: Any) -> bytes:
    """The image as PNG, scaled down to :data:`MAX_IMAGE_SIDE` on its longest side."""
    from PIL import ImageOps

    if max(image.size) > MAX_IMAGE_SIDE:
        image = ImageOps.contain(image, (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


# --- registration -----------------------------------------------------------------------------


def register(register: RegisterExtractor) -> None:
    """Register this module's extractors (called by the default plugin's hook)."""
    register(
        PDF_MIMES,
        extract_pdf,
        extensions=(".pdf",),
        name="vancetope.pdf",
        version="2",
        takes_options=("max_pages",),
    )
    register(
        tuple(IMAGE_TYPES),
        extract_image,
        name="vancetope.image",
        takes_options=("max_pages",),
        extensions=tuple(ext for exts in IMAGE_TYPES.values() for ext in exts),
    )
