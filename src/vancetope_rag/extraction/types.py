"""What extraction speaks: sections, options and the OCR backend's configuration, what an
extractor returns, the extracted text, and how a recorded error code is raised again as its
class (the named errors themselves live in :mod:`vancetope_rag.errors`). Plain values, no I/O.

Everything here is re-exported by :mod:`vancetope_rag.extraction.registry` (and the public names by
``vancetope_rag``); import it from there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from vancetope_rag.domain import limits
from vancetope_rag.domain.texts import one_line
from vancetope_rag.errors import (
    ExtractionError,
    ExtractionTimeoutError,
    ExtractorDependencyMissingError,
    ExtractorProgramMissingError,
    ExtractorUnavailableError,
    MissingDependencyError,
    NoTextError,
    NoTextLayerError,
    RagError,
    UnsupportedTypeError,
)

#: The character budget of an extraction when none is given.
DEFAULT_MAX_CHARS = limits.MAX_TEXT_CHARS
#: Longest section title kept (a sheet name, a slide title); longer ones are cut.
MAX_SECTION_TITLE = 120


@dataclass(frozen=True)
class Section:
    """One part of a file: a page, a sheet, a slide, a chapter. Chunks never span two sections,
    and a chunk's citation label names its section (``reports/q3.xlsx — sheet Maintenance``).

    Attributes:
        text: The section's text.
        title: What the label shows, e.g. ``"page 3"``, ``"sheet Maintenance"``,
            ``"slide 2: Roadmap"``; ``None`` for a file without parts.
    """

    text: str
    title: str | None = None


@dataclass(frozen=True)
class ExtractOptions:
    """The budgets (and OCR backend) one extraction runs with; extractors registered with
    ``takes_options=True`` receive it as a third argument.

    Attributes:
        max_chars: Characters kept in all; text past it is cut (and reported truncated).
        max_pages: PDF pages read.
        max_slides: Slides of a presentation read.
        max_sheets: Sheets of a workbook read.
        max_cells: Non-empty cells of a workbook read, over all sheets.
        max_frames: Video frames sampled (each one a vision call when vision is on).
        max_legacy_office_bytes: Largest ``.doc``/``.xls``/``.ppt`` converted with LibreOffice.
        max_video_bytes: Largest video read with ffmpeg.
        ocr: The OCR/vision backend for pages and images without a text layer, or ``None``
            (such files then fail with "no text layer").
        timeout_s: The extraction's wall-time limit: an extractor that runs a program
            (LibreOffice, ffmpeg) stops its whole process tree at it, also where no worker
            process is there to be killed (an extraction in the calling process).

        first_page: The first page (or TIFF frame) read, 1-based: ``files_visualize``
            continues a file at a page range; an import always reads from page 1. An
            extractor that reads ``max_pages`` starts there (the tool relies on it); the
            tool picks the sections of any other type itself.
        vision_all: Send every page with content to the OCR/vision backend, text layer or
            not (``files_visualize`` with ``vision: true``: the page's look, not only its
            text); an import never sets it.
    """

    max_chars: int = DEFAULT_MAX_CHARS
    max_pages: int = limits.EXTRACT_MAX_PAGES
    max_slides: int = limits.EXTRACT_MAX_SLIDES
    max_sheets: int = limits.EXTRACT_MAX_SHEETS
    max_cells: int = limits.EXTRACT_MAX_CELLS
    max_frames: int = limits.EXTRACT_MAX_FRAMES
    max_legacy_office_bytes: int = limits.EXTRACT_MAX_LEGACY_OFFICE_BYTES
    max_video_bytes: int = limits.EXTRACT_MAX_VIDEO_BYTES
    ocr: OcrConfig | None = None
    timeout_s: float = limits.EXTRACT_TIMEOUT_S

    first_page: int = 1
    vision_all: bool = False


#: The budgets of :class:`ExtractOptions` an extractor may depend on (its fingerprint's part).
BUDGETS = (
    "max_pages",
    "max_slides",
    "max_sheets",
    "max_cells",
    "max_frames",
    "max_legacy_office_bytes",
    "max_video_bytes",
)


@dataclass(frozen=True)
class OcrConfig:
    """Which OCR/vision backend reads page images (``rag.extract.ocr`` and its settings).

    ``engine`` is ``"tesseract"`` (local, ``tesseract-ocr`` + the ``ocr`` extra) or
    ``"vision"`` (an OpenAI-compatible chat-completions model that reads images).
    ``vision_model`` is the model vision calls use: the scan model for ``vision``, the
    fallback's for ``tesseract`` with ``fallback`` (pages Tesseract finds no text on go to
    it). ``frame_model`` describes a video's frames: the RAG's vision model, since the
    dedicated OCR model reads receipts and scans only (second specification). ``api_key`` is
    a secret: it is left out of :meth:`fingerprint` and of ``repr``.
    """

    engine: str
    language: str = limits.EXTRACT_OCR_LANGUAGE
    vision_model: str | None = None
    #: The model that describes video frames (``vision`` only; None: frames are not described).
    frame_model: str | None = None
    vision_base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    #: Pages (or images) of one document sent to the backend at most.
    max_pages: int = limits.EXTRACT_VISION_MAX_PAGES
    #: Requests to a vision backend in flight at once, per extraction.
    concurrency: int = limits.EXTRACT_VISION_CONCURRENCY
    #: Seconds one vision request may take.
    request_timeout_s: float = 60.0
    #: ``tesseract`` first, then the vision model for what it found no text in.
    fallback: bool = False
    #: The ``tesseract`` program as the calling process found it on its PATH (the worker
    #: process runs that one); None: look it up where the OCR runs.
    tesseract_cmd: str | None = None
    #: The calling process found no ``tesseract`` program: a page that needs it fails at once
    #: as ``EXTRACT_PROGRAM_MISSING`` naming the package, as a missing LibreOffice or ffmpeg
    #: does (retried later). Not part of the fingerprint: it says nothing of the text.
    tesseract_missing: bool = False
    #: Why the backend cannot read anything now (the vision model is paused after failing):
    #: a page that needs it fails at once, retried later, with no call made. Not part of the
    #: fingerprint: it says nothing of the text.
    unavailable: str | None = None

    #: The setting that bounds ``max_pages``, named where it cut a file (the tool has its own).
    limit_setting: str = "rag.extract.vision.maxPages"

    def for_frames(self) -> OcrConfig | None:
        """This backend as it describes a video's frames (the frame model in the vision
        model's place), or None when it describes none."""
        if self.engine != "vision" or not self.frame_model:
            return None
        return dataclasses.replace(self, vision_model=self.frame_model)

    def fingerprint(self, *, frames: bool = False) -> str:
        """What of the configuration changes an OCR result (the key excluded). A vision
        model and URL count only where a vision call is made (``vision``, or the fallback);
        for a file whose frames are described (``frames``: a video), the frame model."""
        uses_vision = self.engine == "vision" or self.fallback
        model = self.frame_model if frames else self.vision_model
        parts = [
            self.engine,
            self.language,
            (model or "") if uses_vision else "",
            (self.vision_base_url or "") if uses_vision else "",
            str(self.max_pages),
        ]
        if self.engine != "vision" and self.fallback:
            parts.append("fallback")
        return "|".join(parts)


@dataclass(frozen=True)
class Extraction:
    """What an extractor returns when it has more to say than one text.

    Attributes:
        sections: The file's parts in order (a file without parts: one untitled section).
        truncated: Why only part of the file was read (a page, slide, sheet or cell budget),
            or ``None``; the character budget is applied after the extractor returns.
        ocr: Some of the file has no text layer: its text came (or would have come) from the
            OCR/vision backend. A change of that backend re-extracts such files only.
        encoding: The text encoding the file was decoded from (``utf-8``, ``cp1252``…), for
            a text file; ``None`` for other formats.
        vision_frames: Video frames the vision model described (each one call), which an
            import's summary counts.

        ocr_pages: The pages (1-based) whose text the OCR/vision backend read.
        ocr_left: Pages without a text layer the backend did not read (its page limit, or
            no backend): where a bounded reader such as ``files_visualize`` continues.
    """

    sections: tuple[Section, ...]
    truncated: str | None = None
    ocr: bool = False
    encoding: str | None = None
    vision_frames: int = 0

    ocr_pages: tuple[int, ...] = ()
    ocr_left: tuple[int, ...] = ()

    @classmethod
    def of(cls, text: str) -> Extraction:
        return cls((Section(text),))


#: The name :class:`~vancetope_rag.errors.ExtractorDependencyMissingError` had before it moved
#: to :mod:`vancetope_rag.errors`; plugins written against it keep working.
ExtractorDependencyMissing = ExtractorDependencyMissingError


@dataclass(frozen=True)
class ExtractedText:
    """Text extracted from a file.

    Attributes:
        text: The extracted text, cut to the character budget: the sections' texts joined
            by blank lines.
        mime_type: The MIME type the extractor was chosen for (parameters removed).
        truncated: Whether only part of the file was read (``truncated_reason`` says why).
        chars: Number of characters in ``text``.
        max_chars: The effective budget after clamping to :data:`HARD_MAX_CHARS`.
        sections: ``(title, start, end)`` of each section in ``text`` (title ``""`` for an
            untitled one among titled ones); empty when the file has no titled parts.
        truncated_reason: Which budget cut the file, in words a user can act on.
        ocr: Some of the text came (or would have come) from OCR/vision.
        extractor: ``name@version`` of the extractor that read the file.
        encoding: The text encoding the file was decoded from, when the extractor says.
        vision_frames: Video frames the vision model described (each one call).

        ocr_pages: The pages whose text the OCR/vision backend read (see :class:`Extraction`).
        ocr_left: Pages without a text layer the backend did not read.
    """

    text: str
    mime_type: str
    truncated: bool
    chars: int
    max_chars: int = DEFAULT_MAX_CHARS
    sections: tuple[tuple[str, int, int], ...] = ()
    truncated_reason: str | None = None
    ocr: bool = False
    extractor: str = ""
    encoding: str | None = None
    vision_frames: int = 0

    ocr_pages: tuple[int, ...] = ()
    ocr_left: tuple[int, ...] = ()

    def section_texts(self) -> list[Section]:
        """The text cut back into its sections (one untitled section without any)."""
        return sections_of(self.text, self.sections)


def sections_of(text: str, spans: Sequence[tuple[str, int, int]]) -> list[Section]:
    """``text`` cut at ``spans`` (``(title, start, end)``, title ``""`` for an untitled
    part); no span: one untitled section. Spans past the end of ``text`` (a text cut at a
    limit since) are cut with it."""
    if not spans:
        return [Section(text)]
    out: list[Section] = []
    for title, start, end in spans:
        piece = text[max(0, start) : max(0, end)]
        if piece.strip():
            out.append(Section(piece, title or None))
    return out


def clean_title(title: object) -> str | None:
    """A section title fit for a citation label: one line, no control characters, capped."""
    if not isinstance(title, str):
        return None
    return one_line(title, MAX_SECTION_TITLE) or None


def error_from_code(code: str, message: str, extra: str | None = None) -> ExtractionError:
    """The extraction error of class ``code`` (``EXTRACT_NO_TEXT_LAYER``...) with ``message``:
    how a failure recorded or sent from a worker process is raised again as itself."""
    classes: dict[str, type[ExtractionError]] = {
        cls.code: cls
        for cls in (
            ExtractionError,
            ExtractorDependencyMissingError,
            ExtractorProgramMissingError,
            NoTextLayerError,
            NoTextError,
            UnsupportedTypeError,
            ExtractionTimeoutError,
            ExtractorUnavailableError,
        )
    }
    cls = classes.get(code, ExtractionError)
    exc = cls.__new__(cls)
    RagError.__init__(exc, message)
    if isinstance(exc, MissingDependencyError):
        exc.extra = extra or ""
    return exc
