"""The extraction record and the rule for reading a file again: pure values."""

from __future__ import annotations

import dataclasses

from fakes import default_extractors
from vancetope_rag.extraction.records import ExtractionRecord, file_hash
from vancetope_rag.extraction.registry import ExtractOptions, OcrConfig
from vancetope_rag.services.extraction import ExtractionPlan, ExtractionService

PDF, XLSX, MD = (
    "application/pdf",
    ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    "text/markdown",
)


def plan(**options: object) -> ExtractionPlan:
    return ExtractionPlan(ExtractOptions(**options), timeout_s=10)  # type: ignore[arg-type]


def record_for(svc: ExtractionService, mime: str, path: str, p: ExtractionPlan, **kw: object):
    entry = svc.registry.find_entry(mime, path)
    ocr = bool(kw.get("ocr", False))
    base = ExtractionRecord(file_hash=file_hash(b"x"), config=p.fingerprint(entry, ocr=ocr))
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_the_record_round_trips_and_bad_json_is_no_record() -> None:
    record = ExtractionRecord(
        file_hash="ab",
        config="cd",
        extractor="vancetope.pdf@2",
        sections=(("page 1", 0, 4),),
        ocr=True,
        truncated="only 1 of 2 pages",
        error_code=None,
    )
    assert ExtractionRecord.from_json(record.to_json()) == record
    assert ExtractionRecord.from_json("{not json") is None
    assert ExtractionRecord.from_json(None) is None


def test_only_the_budgets_an_extractor_reads_change_its_fingerprint() -> None:
    svc = ExtractionService(registry=default_extractors())
    pdf = svc.registry.find_entry(PDF, "a.pdf")
    xlsx = svc.registry.find_entry(XLSX, "a.xlsx")
    md = svc.registry.find_entry(MD, "a.md")
    base, sheets, pages = plan(), plan(max_sheets=3), plan(max_pages=3)
    assert base.fingerprint(pdf, ocr=False) == sheets.fingerprint(pdf, ocr=False)
    assert base.fingerprint(pdf, ocr=False) != pages.fingerprint(pdf, ocr=False)
    assert base.fingerprint(xlsx, ocr=False) != sheets.fingerprint(xlsx, ocr=False)
    assert base.fingerprint(md, ocr=False) == pages.fingerprint(md, ocr=False)


def test_the_ocr_backend_counts_only_for_files_that_need_it() -> None:
    svc = ExtractionService(registry=default_extractors())
    off = plan()
    on = plan(ocr=OcrConfig("vision", vision_model="m", api_key="sk-secret-key-1234567890"))
    text_pdf = record_for(svc, PDF, "a.pdf", off, ocr=False)
    scan = record_for(svc, PDF, "s.pdf", off, ocr=True, error_code="EXTRACT_NO_TEXT_LAYER")
    digest = file_hash(b"x")
    assert svc.is_current(text_pdf, digest, PDF, "a.pdf", on)
    assert not svc.is_current(scan, digest, PDF, "s.pdf", on)
    assert svc.is_current(scan, digest, PDF, "s.pdf", off)
    # the key is not part of the fingerprint: a new key re-reads nothing
    other_key = plan(ocr=dataclasses.replace(on.options.ocr, api_key="sk-other-key-0987654321"))  # type: ignore[type-var]
    assert on.fingerprint(svc.registry.find_entry(PDF, "s.pdf"), ocr=True) == other_key.fingerprint(
        svc.registry.find_entry(PDF, "s.pdf"), ocr=True
    )


def test_changed_bytes_and_machine_failures_are_read_again() -> None:
    svc = ExtractionService(registry=default_extractors())
    p = plan()
    ok = record_for(svc, MD, "a.md", p)
    assert svc.is_current(ok, file_hash(b"x"), MD, "a.md", p)
    assert not svc.is_current(ok, file_hash(b"y"), MD, "a.md", p)
    assert not svc.is_current(None, file_hash(b"x"), MD, "a.md", p)
    for code in ("EXTRACT_DEPENDENCY_MISSING", "EXTRACT_TIMEOUT", "EXTRACT_BACKEND_UNAVAILABLE"):
        failed = dataclasses.replace(ok, error_code=code, error="later")
        assert not svc.is_current(failed, file_hash(b"x"), MD, "a.md", p)
    corrupt = dataclasses.replace(ok, error_code="EXTRACTION_FAILED", error="broken")
    assert svc.is_current(corrupt, file_hash(b"x"), MD, "a.md", p)  # the file's own fault
