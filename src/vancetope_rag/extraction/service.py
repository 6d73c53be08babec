"""ExtractionService: a file's bytes → the text a document stores, with budgets, a time limit
and a record that says what was done.

Imports and ``rag_add_workspace_file`` read files through it. It takes the budgets and the
OCR/vision backend from the cascade settings (``rag.extract.*``), runs the extractor in a
worker process it can stop (:mod:`vancetope_rag.extraction.sandbox`), and produces an
:class:`~vancetope_rag.extraction.records.ExtractionRecord`, which the document keeps, so the
next import can tell whether reading the file again could change anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain.settings import SETTINGS
from vancetope_rag.errors import ExtractionError
from vancetope_rag.extraction.records import ExtractionRecord, config_fingerprint, file_hash
from vancetope_rag.extraction.registry import (
    HARD_MAX_CHARS,
    ExtractedText,
    ExtractOptions,
    ExtractorEntry,
    ExtractorRegistry,
    NoTextError,
    NoTextLayerError,
    OcrConfig,
    extract_text,
    extraction_error,
    run_extractor,
)
from vancetope_rag.extraction.sandbox import ExtractionSandbox, shared_sandbox
from vancetope_rag.secrets import error_text, register_secret
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store.shared import content_hash

__all__ = ["ExtractionPlan", "ExtractionService", "FileExtraction"]


@dataclass(frozen=True)
class ExtractionPlan:
    """The options one import (or tool call) extracts with, read once from the settings."""

    options: ExtractOptions
    timeout_s: float

    def fingerprint(self, entry: ExtractorEntry | None, *, ocr: bool) -> str:
        """:func:`config_fingerprint` for files of ``entry``; the OCR backend counts only
        for files that need it (``ocr``)."""
        if entry is None:
            return config_fingerprint("unsupported", (), None)
        budgets = [f"{name}={getattr(self.options, name)}" for name in entry.budgets]
        backend = self.options.ocr.fingerprint() if self.options.ocr is not None else "none"
        return config_fingerprint(
            f"{entry.name}@{entry.version}", budgets, backend if ocr else None
        )


@dataclass(frozen=True)
class FileExtraction:
    """One file read: the text, or (``text`` None) the error; and the record the document
    keeps."""

    record: ExtractionRecord
    text: ExtractedText | None = None
    error: ExtractionError | None = None

    @property
    def failed(self) -> bool:
        return self.text is None


class ExtractionService:
    """Reads files into document text; see the module docstring."""

    def __init__(
        self,
        *,
        registry: ExtractorRegistry,
        settings: SettingsService | None = None,
        sandbox: ExtractionSandbox | None = None,
        isolate: bool = True,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self._sandbox = sandbox
        self.isolate = isolate

    @property
    def sandbox(self) -> ExtractionSandbox:
        if self._sandbox is None:
            self._sandbox = shared_sandbox()
        return self._sandbox

    def plan(
        self, tenant_id: str, project_id: str, *, max_chars: int = HARD_MAX_CHARS
    ) -> ExtractionPlan:
        """The budgets and OCR backend of the project's effective settings (the defaults
        without a settings service)."""
        eff: dict[str, Any] = (
            self.settings.effective(tenant_id, project_id)
            if self.settings is not None
            else {key: spec.default for key, spec in SETTINGS.items()}
        )
        engine = str(eff["rag.extract.ocr"])
        ocr: OcrConfig | None = None
        if engine != "none":
            key = eff["rag.extract.vision.apiKey"]
            register_secret(key)
            ocr = OcrConfig(
                engine=engine,
                language=str(eff["rag.extract.ocrLanguage"] or "eng"),
                vision_model=eff["rag.extract.vision.model"],
                vision_base_url=eff["rag.extract.vision.baseUrl"],
                api_key=key,
                max_pages=int(eff["rag.extract.vision.maxPages"]),
                concurrency=int(eff["rag.extract.vision.concurrency"]),
            )
        options = ExtractOptions(
            max_chars=min(max_chars, HARD_MAX_CHARS),
            max_pages=int(eff["rag.extract.maxPages"]),
            max_slides=int(eff["rag.extract.maxSlides"]),
            max_sheets=int(eff["rag.extract.maxSheets"]),
            max_cells=int(eff["rag.extract.maxCells"]),
            max_frames=int(eff["rag.extract.maxFrames"]),
            max_legacy_office_bytes=int(eff["rag.extract.maxLegacyOfficeBytes"]),
            max_video_bytes=int(eff["rag.extract.maxVideoBytes"]),
            ocr=ocr,
            timeout_s=float(eff["rag.extract.timeoutSeconds"]),
        )
        return ExtractionPlan(options, options.timeout_s)

    def is_current(
        self,
        previous: ExtractionRecord | None,
        data_hash: str,
        mime: str,
        path: str,
        plan: ExtractionPlan,
    ) -> bool:
        """Reading the file again cannot change anything: same bytes, same extractor and
        options (OCR counted only for files that need it), and the last failure, if any, was
        the file's and not the machine's."""
        if previous is None or previous.file_hash != data_hash or previous.retry_anyway():
            return False
        entry = self.registry.find_entry(mime, path)
        return previous.config == plan.fingerprint(entry, ocr=previous.ocr)

    def extract(self, data: bytes, *, path: str, mime: str, plan: ExtractionPlan) -> FileExtraction:
        """Read one file. Never raises for the file's own faults: a failure is recorded in
        the result (``text`` None, the record's ``error``)."""
        entry = self.registry.find_entry(mime, path)
        digest = file_hash(data)
        try:
            text = self._run(entry, data, path, mime, plan)
            if not text.text.strip():  # read, and nothing in it: fails, never looks indexed
                what = "the file is empty" if not data else "no text found in the file"
                raise NoTextError(extraction_error(path, what).message)
        except ExtractionError as exc:
            scan = isinstance(exc, NoTextLayerError)
            record = ExtractionRecord(
                file_hash=digest,
                config=plan.fingerprint(entry, ocr=scan),
                extractor=f"{entry.name}@{entry.version}" if entry else "",
                mime_type=mime,
                size=len(data),
                ocr=scan,
                error_code=exc.code,
                error=error_text(exc),
            )
            return FileExtraction(record, error=exc)
        record = ExtractionRecord(
            file_hash=digest,
            config=plan.fingerprint(entry, ocr=text.ocr),
            extractor=text.extractor,
            mime_type=mime,
            size=len(data),
            content_hash=content_hash(text.text),
            sections=text.sections,
            ocr=text.ocr,
            truncated=text.truncated_reason,
            encoding=text.encoding,
        )
        return FileExtraction(record, text)

    def _run(
        self,
        entry: ExtractorEntry | None,
        data: bytes,
        path: str,
        mime: str,
        plan: ExtractionPlan,
    ) -> ExtractedText:
        options = plan.options
        if entry is None:  # unsupported, or text sniffing of an unknown type
            return extract_text(
                data,
                path=path,
                registry=self.registry,
                mime_type=mime,
                max_chars=options.max_chars,
                options=options,
            )
        if not entry.isolated or not self.isolate:
            # Linear in its input (strict decoding): nothing to stop, no round trip to pay.
            return run_extractor(entry, data, path, mime, options, options.max_chars)
        return self.sandbox.run(
            entry, data, path, mime, options, options.max_chars, timeout_s=plan.timeout_s
        )
