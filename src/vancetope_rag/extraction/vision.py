"""Which model reads scans and images: the RAG's vision model, a dedicated OCR model for
scans, the vision fallback, and their environment defaults beneath the tenant's settings.

Pure rules, no I/O. The cascade (project > tenant) decides first; where both leave a key
empty, the engine configuration's ``DOC_VISION_MODEL`` / ``DOC_VISION_FALLBACK_ENABLED``
(:class:`VisionDefaults`) do, then the built-in default (no model, fallback off). The OCR
model (``rag.extract.vision.ocrModel``) is optional: empty inherits the vision model; one
chosen takes precedence for scans and turns the vision fallback on for them even when the
general toggle is off, so an operator who picks a scan model gets scans read by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vancetope_rag.domain import limits
from vancetope_rag.extraction.types import OcrConfig

__all__ = ["VisionChoice", "VisionDefaults", "resolve_vision", "scan_ocr_config"]


@dataclass(frozen=True)
class VisionDefaults:
    """The environment's defaults (``EngineConfig.doc_vision_*``) beneath the settings."""

    fallback: bool = False
    model: str | None = None


@dataclass(frozen=True)
class VisionChoice:
    """The effective vision settings of one project.

    Attributes:
        model: The RAG's vision model (``rag.extract.vision.model``, else
            ``DOC_VISION_MODEL``), or None.
        ocr_model: The dedicated scan model as chosen (None: inherits ``model``).
        fallback: The general vision fallback toggle (``rag.extract.vision.fallback``,
            else ``DOC_VISION_FALLBACK_ENABLED``).
        base_url: The vision endpoint (None: api.openai.com).
        api_key: Its key (a secret: never shown, left out of ``repr``).
    """

    model: str | None
    ocr_model: str | None
    fallback: bool
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)

    @property
    def scan_model(self) -> str | None:
        """The model that reads scans: the OCR model when chosen, else the vision model."""
        return self.ocr_model or self.model

    @property
    def scan_fallback(self) -> bool:
        """Whether scans go to vision when the local reading leaves them without text."""
        return self.fallback or self.ocr_model is not None


def resolve_vision(effective: Mapping[str, Any], defaults: VisionDefaults) -> VisionChoice:
    """The vision settings of a project's effective cascade values over ``defaults``."""
    fallback = effective.get("rag.extract.vision.fallback")
    return VisionChoice(
        model=effective.get("rag.extract.vision.model") or defaults.model,
        ocr_model=effective.get("rag.extract.vision.ocrModel") or None,
        fallback=defaults.fallback if fallback is None else bool(fallback),
        base_url=effective.get("rag.extract.vision.baseUrl"),
        api_key=effective.get("rag.extract.vision.apiKey"),
    )


def scan_ocr_config(effective: Mapping[str, Any], defaults: VisionDefaults) -> OcrConfig | None:
    """What reads the pages and images without a text layer, or None (they fail with "no
    text layer").

    ``rag.extract.ocr`` picks the first reader: ``vision`` reads with the scan model;
    ``tesseract`` reads locally and, with the scan fallback on, sends what it found no text
    in to the scan model; ``none`` leaves scans unread unless the scan fallback is on, when
    the scan model reads them. What the machine has (``tesseract_cmd``, ``tesseract_missing``,
    ``unavailable``) is the caller's to fill in.
    """
    choice = resolve_vision(effective, defaults)
    engine = str(effective.get("rag.extract.ocr") or "none")
    if engine == "none":
        if not choice.scan_fallback:
            return None
        engine = "vision"
    fallback = engine == "tesseract" and choice.scan_fallback
    vision = engine == "vision" or fallback
    return OcrConfig(
        engine=engine,
        language=str(effective.get("rag.extract.ocrLanguage") or limits.EXTRACT_OCR_LANGUAGE),
        vision_model=choice.scan_model if vision else None,
        # frames are no scans: the RAG's vision model describes them, never the OCR model
        frame_model=choice.model if engine == "vision" else None,
        vision_base_url=choice.base_url if vision else None,
        api_key=choice.api_key if vision else None,
        max_pages=int(
            effective.get("rag.extract.vision.maxPages") or limits.EXTRACT_VISION_MAX_PAGES
        ),
        concurrency=int(
            effective.get("rag.extract.vision.concurrency") or limits.EXTRACT_VISION_CONCURRENCY
        ),
        fallback=fallback,
    )
