"""The cascade settings of text extraction: budgets, the time limit, OCR/vision.

Set at tenant or project scope like every other setting; an import reads them once.
"""

from __future__ import annotations

from vancetope_rag.domain import limits
from vancetope_rag.domain.settings.kinds import SettingKind, SettingSpec

__all__ = ["EXTRACT_SETTINGS"]

EXTRACT_SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        "rag.extract.timeoutSeconds",
        SettingKind.FLOAT,
        limits.EXTRACT_TIMEOUT_S,
        minimum=0.5,
        maximum=3600.0,
        description="Wall time one file's extraction may take; past it the file is stopped "
        "and recorded as failed (a hostile file never hangs an import or a tool call).",
    ),
    SettingSpec(
        "rag.extract.maxPages",
        SettingKind.INT,
        limits.EXTRACT_MAX_PAGES,
        minimum=1,
        maximum=1_000_000,
        description="PDF pages read per file; the rest is left out and the document marked "
        "truncated.",
    ),
    SettingSpec(
        "rag.extract.maxSlides",
        SettingKind.INT,
        limits.EXTRACT_MAX_SLIDES,
        minimum=1,
        maximum=1_000_000,
        description="Slides read per presentation (PPTX, ODP).",
    ),
    SettingSpec(
        "rag.extract.maxSheets",
        SettingKind.INT,
        limits.EXTRACT_MAX_SHEETS,
        minimum=1,
        maximum=100_000,
        description="Sheets read per workbook (XLSX, ODS).",
    ),
    SettingSpec(
        "rag.extract.maxCells",
        SettingKind.INT,
        limits.EXTRACT_MAX_CELLS,
        minimum=1,
        maximum=100_000_000,
        description="Non-empty cells read per workbook, over all its sheets.",
    ),
    SettingSpec(
        "rag.extract.maxFrames",
        SettingKind.INT,
        limits.EXTRACT_MAX_FRAMES,
        minimum=1,
        maximum=1_000,
        description="Frames sampled per video (MP4, MKV, WebM, MOV), one every max(10 s, "
        "duration / this) across the whole video; each is one call to the vision model, made "
        "only when rag.extract.ocr is vision (subtitles are read always).",
    ),
    SettingSpec(
        "rag.extract.maxLegacyOfficeBytes",
        SettingKind.INT,
        limits.EXTRACT_MAX_LEGACY_OFFICE_BYTES,
        minimum=1,
        maximum=2**31,
        description="Largest legacy Office file (.doc, .xls, .ppt) converted with LibreOffice "
        "(Debian's libreoffice-*-nogui); a larger one fails with EXTRACT_TOO_LARGE.",
    ),
    SettingSpec(
        "rag.extract.maxVideoBytes",
        SettingKind.INT,
        limits.EXTRACT_MAX_VIDEO_BYTES,
        minimum=1,
        maximum=2**34,
        description="Largest video read with ffmpeg (Debian's ffmpeg); a larger one fails "
        "with EXTRACT_TOO_LARGE (an import also refuses files over its own size limit).",
    ),
    SettingSpec(
        "rag.extract.ocr",
        SettingKind.CHOICE,
        "none",
        choices=("none", "tesseract", "vision"),
        description="What reads scans (PDF pages without a text layer) and images first: "
        "none (they fail with 'no text layer' unless the vision fallback is on), tesseract "
        "(local OCR, the 'ocr' extra) or vision (an OpenAI-compatible vision model, "
        "rag.extract.vision.*).",
    ),
    SettingSpec(
        "rag.extract.ocrLanguage",
        SettingKind.STRING,
        limits.EXTRACT_OCR_LANGUAGE,
        description="Tesseract language(s), e.g. 'eng' or 'deu+eng' (installed language packs).",
    ),
    SettingSpec(
        "rag.extract.vision.model",
        SettingKind.STRING,
        None,
        nullable=True,
        description="The RAG's vision model (chat-completions format): it reads scans and "
        "images when rag.extract.ocr is vision or the vision fallback is on. Empty: "
        "DOC_VISION_MODEL.",
    ),
    SettingSpec(
        "rag.extract.vision.ocrModel",
        SettingKind.STRING,
        None,
        nullable=True,
        description="A dedicated vision model for scans (PDF pages without a text layer, "
        "images); empty inherits rag.extract.vision.model. Choosing one turns the vision "
        "fallback on for scans even when rag.extract.vision.fallback is off.",
    ),
    SettingSpec(
        "rag.extract.vision.fallback",
        SettingKind.BOOL,
        None,
        nullable=True,
        description="Vision fallback: what the local reading (text layer, Tesseract) leaves "
        "without text goes to the vision model. Empty: DOC_VISION_FALLBACK_ENABLED (off).",
    ),
    SettingSpec(
        "rag.extract.vision.baseUrl",
        SettingKind.URL,
        None,
        nullable=True,
        description="Base URL of the OpenAI-compatible vision endpoint; empty means "
        "api.openai.com.",
    ),
    SettingSpec(
        "rag.extract.vision.apiKey",
        SettingKind.STRING,
        None,
        secret=True,
        nullable=True,
        description="API key of the vision endpoint (write-only, never shown).",
    ),
    SettingSpec(
        "rag.extract.vision.maxPages",
        SettingKind.INT,
        limits.EXTRACT_VISION_MAX_PAGES,
        minimum=1,
        maximum=10_000,
        description="Pages or images of one document sent to OCR/vision at most.",
    ),
    SettingSpec(
        "rag.extract.vision.concurrency",
        SettingKind.INT,
        limits.EXTRACT_VISION_CONCURRENCY,
        minimum=1,
        maximum=16,
        description="Vision requests in flight at once for one document.",
    ),
)
