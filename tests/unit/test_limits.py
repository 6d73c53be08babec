"""Each limit and budget has one source, :mod:`vancetope_rag.domain.limits`: the engine
configuration, the cascade settings and the extraction options all agree with it."""

from __future__ import annotations

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain import limits
from vancetope_rag.domain.settings.registry import SETTINGS
from vancetope_rag.extraction.registry import (
    DEFAULT_MAX_CHARS,
    HARD_MAX_CHARS,
    ExtractOptions,
    OcrConfig,
)


def test_the_text_limit_and_the_hard_cap() -> None:
    config = EngineConfig()
    assert config.max_text_chars == limits.MAX_TEXT_CHARS == DEFAULT_MAX_CHARS == 2_000_000
    assert HARD_MAX_CHARS == limits.HARD_MAX_TEXT_CHARS == 10_000_000
    assert ExtractOptions().max_chars == limits.MAX_TEXT_CHARS


def test_the_context_block_budget_and_its_bounds() -> None:
    assert EngineConfig().autoinject_max_tokens == limits.AUTOINJECT_MAX_TOKENS == 1500
    spec = SETTINGS["rag.autoInject.maxTokens"]
    assert (spec.minimum, spec.maximum) == (
        limits.AUTOINJECT_MAX_TOKENS_MIN,
        limits.AUTOINJECT_MAX_TOKENS_MAX,
    )


def test_the_extraction_budgets_default_to_the_settings_defaults() -> None:
    options, ocr = ExtractOptions(), OcrConfig("tesseract")
    pairs = {
        "rag.extract.maxPages": options.max_pages,
        "rag.extract.maxSlides": options.max_slides,
        "rag.extract.maxSheets": options.max_sheets,
        "rag.extract.maxCells": options.max_cells,
        "rag.extract.ocrLanguage": ocr.language,
        "rag.extract.vision.maxPages": ocr.max_pages,
        "rag.extract.vision.concurrency": ocr.concurrency,
    }
    for key, value in pairs.items():
        assert SETTINGS[key].default == value, key
