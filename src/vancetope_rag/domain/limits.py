"""The engine's limits and budgets, each defined once: the engine configuration, the cascade
settings, the extraction options and the services read them from here.

Pure values, no I/O and no imports of this package, so every layer (down to an extraction
worker process) may import it.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AUTOINJECT_MAX_TOKENS",
    "AUTOINJECT_MAX_TOKENS_MAX",
    "AUTOINJECT_MAX_TOKENS_MIN",
    "BRIDGE_HARD_MAX_CHARS",
    "BRIDGE_HARD_MAX_FRAMES",
    "BRIDGE_HARD_VISION_PAGES",
    "BRIDGE_MAX_CHARS",
    "BRIDGE_MAX_FRAMES",
    "BRIDGE_VISION_MAX_PAGES",
    "EXTRACT_MAX_CELLS",
    "EXTRACT_MAX_FRAMES",
    "EXTRACT_MAX_LEGACY_OFFICE_BYTES",
    "EXTRACT_MAX_PAGES",
    "EXTRACT_MAX_SHEETS",
    "EXTRACT_MAX_SLIDES",
    "EXTRACT_MAX_VIDEO_BYTES",
    "EXTRACT_OCR_LANGUAGE",
    "EXTRACT_TIMEOUT_S",
    "EXTRACT_VISION_CONCURRENCY",
    "EXTRACT_VISION_MAX_PAGES",
    "HARD_MAX_TEXT_CHARS",
    "HOST_METADATA_MAX_CHARS",
    "HOST_METADATA_MAX_KEYS",
    "MAX_PER_DOCUMENT_MAX",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_CHARS_MIN",
    "TOP_K_MAX",
]

MAX_TEXT_CHARS: Final[int] = 2_000_000
"""The longest text taken anywhere when none is configured (``EngineConfig.max_text_chars``,
``VANCETOPE_RAG_MAX_TEXT_CHARS``), and the character budget of an extraction given none: the
tools and the REST API refuse longer text, a longer document is indexed up to it."""

MAX_TEXT_CHARS_MIN: Final[int] = 1000
"""The smallest text limit the engine configuration accepts."""

HARD_MAX_TEXT_CHARS: Final[int] = 10_000_000
"""The text no extraction ever keeps more of, whatever budget it is given; the largest text
limit the engine configuration accepts."""

AUTOINJECT_MAX_TOKENS: Final[int] = 1500
"""The token budget (cl100k_base) of the ``<rag-context>`` block when neither a recipe nor
``rag.autoInject.maxTokens`` says (``EngineConfig.autoinject_max_tokens``'s default)."""

AUTOINJECT_MAX_TOKENS_MIN: Final[int] = 50
"""The smallest token budget of the ``<rag-context>`` block a setting or the configuration
accepts."""

AUTOINJECT_MAX_TOKENS_MAX: Final[int] = 100_000
"""The largest token budget of the ``<rag-context>`` block a setting or the configuration
accepts."""

TOP_K_MAX: Final[int] = 100
"""The most hits one query may ask for (``rag.topK``, ``EngineConfig.retrieval_top_k``)."""

HOST_METADATA_MAX_KEYS: Final[int] = 32
"""The most keys of the metadata a host saves with a document (``document_saved``); every
chunk of the document carries them."""

HOST_METADATA_MAX_CHARS: Final[int] = 4096
"""The most characters (as JSON, keys and values) of the metadata a host saves with a
document: it is copied into every chunk of the document."""

MAX_PER_DOCUMENT_MAX: Final[int] = 100
"""The most hits from one document a query may allow (``rag.maxPerDocument``,
``EngineConfig.retrieval_max_per_doc``)."""

EXTRACT_MAX_PAGES: Final[int] = 2_000
"""PDF pages one extraction reads by default (``rag.extract.maxPages``)."""

EXTRACT_MAX_SLIDES: Final[int] = 1_000
"""Slides of a presentation one extraction reads by default (``rag.extract.maxSlides``)."""

EXTRACT_MAX_SHEETS: Final[int] = 100
"""Sheets of a workbook one extraction reads by default (``rag.extract.maxSheets``)."""

EXTRACT_MAX_CELLS: Final[int] = 1_000_000
"""Non-empty cells of a workbook, over all its sheets, one extraction reads by default
(``rag.extract.maxCells``)."""

EXTRACT_MAX_FRAMES: Final[int] = 6
"""Video frames one extraction samples (and sends to the vision model) by default
(``rag.extract.maxFrames``): one every max(10 s, duration / this) across the video."""

EXTRACT_MAX_LEGACY_OFFICE_BYTES: Final[int] = 20 * 1024 * 1024
"""Largest legacy Office file (``.doc``, ``.xls``, ``.ppt``) converted with LibreOffice by
default (``rag.extract.maxLegacyOfficeBytes``): a conversion costs seconds per megabyte."""

EXTRACT_MAX_VIDEO_BYTES: Final[int] = 50 * 1024 * 1024
"""Largest video read with ffmpeg by default (``rag.extract.maxVideoBytes``)."""

EXTRACT_TIMEOUT_S: Final[float] = 120.0
"""Wall time one file's extraction may take by default (``rag.extract.timeoutSeconds``)."""

EXTRACT_OCR_LANGUAGE: Final[str] = "eng"
"""The Tesseract language(s) by default (``rag.extract.ocrLanguage``)."""

EXTRACT_VISION_MAX_PAGES: Final[int] = 50
"""Pages or images of one document sent to OCR/vision at most by default
(``rag.extract.vision.maxPages``)."""

EXTRACT_VISION_CONCURRENCY: Final[int] = 2
"""Vision requests in flight at once for one document by default
(``rag.extract.vision.concurrency``)."""

BRIDGE_MAX_CHARS: Final[int] = 40_000
"""Characters one ``files_visualize`` answer returns by default (``rag.bridge.maxChars``,
``MM_BRIDGE_MAX_CHARS``): the spec's MM-Bridge budget."""

BRIDGE_VISION_MAX_PAGES: Final[int] = 2
"""Pages (or images) one ``files_visualize`` answer sends to the vision model by default
(``rag.bridge.visionMaxPages``, ``DOC_VISION_MAX_PAGES``)."""

BRIDGE_MAX_FRAMES: Final[int] = 6
"""Video frames one ``files_visualize`` answer describes by default (``rag.bridge.maxFrames``,
``MM_BRIDGE_MAX_FRAMES``)."""

BRIDGE_HARD_MAX_CHARS: Final[int] = 120_000
"""Characters one ``files_visualize`` answer returns at most, whatever is asked."""

BRIDGE_HARD_VISION_PAGES: Final[int] = 6
"""Pages one ``files_visualize`` answer sends to vision at most, whatever is asked."""

BRIDGE_HARD_MAX_FRAMES: Final[int] = 12
"""Video frames one ``files_visualize`` answer describes at most, whatever is asked."""
