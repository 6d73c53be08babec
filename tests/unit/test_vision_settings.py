"""The OCR/vision settings of the second specification (pure rules): the RAG vision model, the
dedicated OCR model for scans and the vision fallback, over the DOC_VISION_* environment
defaults; what reads scans for each combination; the fingerprint; the retry back-off."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.settings.registry import SETTINGS, resolve_setting
from vancetope_rag.extraction.records import ExtractionRecord, RetryPolicy, retry_delay_s
from vancetope_rag.extraction.types import OcrConfig
from vancetope_rag.extraction.vision import VisionDefaults, resolve_vision, scan_ocr_config

NONE = VisionDefaults()


def effective(**values: Any) -> dict[str, Any]:
    """Every default, with ``values`` (``vision__model``: ``rag.extract.vision.model``)."""
    eff = {key: resolve_setting(key) for key in SETTINGS}
    for name, value in values.items():
        key = "rag.extract." + name.replace("__", ".")
        assert key in SETTINGS, key
        eff[key] = value
    return eff


def test_nothing_configured_reads_no_scans() -> None:
    assert scan_ocr_config(effective(), NONE) is None


def test_the_environment_defaults_apply_where_the_settings_are_empty() -> None:
    env = VisionDefaults(fallback=True, model="env-model")
    ocr = scan_ocr_config(effective(), env)
    assert ocr is not None and (ocr.engine, ocr.vision_model) == ("vision", "env-model")
    # the tenant's (or project's) values win
    assert scan_ocr_config(effective(vision__fallback=False), env) is None
    ocr = scan_ocr_config(effective(vision__model="tenant-model"), env)
    assert ocr is not None and ocr.vision_model == "tenant-model"


def test_a_chosen_ocr_model_turns_the_fallback_on_for_scans_and_wins() -> None:
    eff = effective(vision__model="general", vision__ocrModel="scans", vision__fallback=False)
    choice = resolve_vision(eff, NONE)
    assert (choice.model, choice.scan_model, choice.fallback) == ("general", "scans", False)
    assert choice.scan_fallback
    ocr = scan_ocr_config(eff, NONE)
    assert ocr is not None and (ocr.engine, ocr.vision_model) == ("vision", "scans")
    inherits = resolve_vision(effective(vision__model="general"), NONE)
    assert inherits.scan_model == "general" and not inherits.scan_fallback


def test_tesseract_reads_first_and_the_fallback_reads_what_it_leaves() -> None:
    local = scan_ocr_config(effective(ocr="tesseract", vision__model="general"), NONE)
    assert local is not None and not local.fallback and local.vision_model is None
    both = scan_ocr_config(effective(ocr="tesseract", vision__ocrModel="scans"), NONE)
    assert both is not None and both.fallback and both.vision_model == "scans"
    assert both.engine == "tesseract"


def test_vision_first_uses_the_scan_model() -> None:
    eff = effective(ocr="vision", vision__model="general", vision__ocrModel="scans")
    ocr = scan_ocr_config(eff, NONE)
    assert ocr is not None and ocr.vision_model == "scans" and not ocr.fallback


def test_the_fingerprint_holds_what_reads_the_scans_and_nothing_else() -> None:
    vision = OcrConfig("vision", vision_model="a", vision_base_url="http://h/v1")
    # as before the OCR model existed: no scan is read again after an upgrade
    assert vision.fingerprint() == f"vision|eng|a|http://h/v1|{vision.max_pages}"
    assert dataclasses.replace(vision, vision_model="b").fingerprint() != vision.fingerprint()
    local = OcrConfig("tesseract", vision_model="a")
    assert local.fingerprint() == dataclasses.replace(local, vision_model="b").fingerprint()
    fallback = dataclasses.replace(local, fallback=True)
    assert fallback.fingerprint() != local.fingerprint()
    assert fallback.fingerprint() != dataclasses.replace(fallback, vision_model="b").fingerprint()
    # what the machine has is not part of it
    found = dataclasses.replace(local, tesseract_cmd="/usr/bin/tesseract", unavailable="gone")
    assert found.fingerprint() == local.fingerprint()


def test_the_env_names_of_the_spec_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOC_VISION_FALLBACK_ENABLED", "true")
    monkeypatch.setenv("DOC_VISION_MODEL", "qwen2.5-vl")
    config = EngineConfig()
    assert config.doc_vision_fallback_enabled and config.doc_vision_model == "qwen2.5-vl"
    monkeypatch.delenv("DOC_VISION_FALLBACK_ENABLED")
    assert not EngineConfig().doc_vision_fallback_enabled  # off by default


# -- retries --------------------------------------------------------------------------------


def failure(code: str, **kwargs: Any) -> ExtractionRecord:
    return ExtractionRecord(file_hash="h", config="c", error_code=code, error="no", **kwargs)


def test_machine_failures_back_off_and_stop_after_their_attempts() -> None:
    policy = RetryPolicy(base_s=60, max_s=300, max_attempts=4)
    assert [retry_delay_s(n, 60, 300) for n in (1, 2, 3, 4, 5)] == [60, 120, 240, 300, 300]
    previous = None
    at = []
    for _ in range(5):
        previous = policy.schedule(
            failure("EXTRACT_BACKEND_UNAVAILABLE"), previous, 1000.0, can_retry=True
        )
        at.append(previous.retry_at)
    assert at == [1060, 1120, 1240, 1300, None]
    assert previous is not None and previous.retries == 5
    assert previous.error is not None and previous.error.endswith("read again by the next import")
    assert "read again at" in (
        policy.schedule(failure("EXTRACT_TIMEOUT"), None, 0, can_retry=True).error or ""
    )


def test_a_changed_file_starts_counting_again_and_a_file_failure_is_left_alone() -> None:
    policy = RetryPolicy()
    earlier = failure("EXTRACT_TIMEOUT", retries=3, retry_at=5.0)
    changed = dataclasses.replace(failure("EXTRACT_TIMEOUT"), file_hash="other")
    assert policy.schedule(changed, earlier, 0, can_retry=True).retries == 1
    corrupt = failure("EXTRACTION_FAILED")
    assert policy.schedule(corrupt, earlier, 0, can_retry=True) == corrupt
    # no folder to read it from again (an upload): only the next import reads it
    upload = policy.schedule(failure("EXTRACT_TIMEOUT"), None, 0, can_retry=False)
    assert upload.retry_at is None and upload.retries == 1
    assert policy.due(dataclasses.replace(upload, retry_at=10.0), 10.0)
    assert not policy.due(dataclasses.replace(upload, retry_at=10.0), 9.0)
    assert not policy.due(dataclasses.replace(corrupt, retry_at=1.0), 10.0)


def test_the_retry_state_survives_the_record_json() -> None:
    scheduled = failure("EXTRACT_BACKEND_UNAVAILABLE", retries=2, retry_at=1234.5)
    assert ExtractionRecord.from_json(scheduled.to_json()) == scheduled
    plain = failure("EXTRACTION_FAILED")
    assert "retryAt" not in plain.to_json()  # records of older versions read alike
    assert ExtractionRecord.from_json(plain.to_json()) == plain
