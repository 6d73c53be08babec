"""ExtractionService: a file's bytes → the text a document stores, with budgets, a time limit
and a record that says what was done.

Imports and ``rag_add_workspace_file`` read files through it. It takes the budgets and the
OCR/vision backend from the cascade settings (``rag.extract.*``, over the environment's
``DOC_VISION_*`` defaults), runs the extractor in a worker process it can stop
(:mod:`vancetope_rag.extraction.sandbox`), and produces an
:class:`~vancetope_rag.extraction.records.ExtractionRecord`, which the document keeps, so the
next import can tell whether reading the file again could change anything.

What the machine has is found here, in the calling process, when a plan is made: the
``tesseract`` program on this process's PATH (the worker runs that one), and whether the vision
model's circuit is open (:class:`~vancetope_rag.services.providers.ProviderCircuits`, one per
endpoint: a vision model that failed is not called again until its wait is over). Either way
a file that needs OCR fails at once as the machine's failure and is read again later.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain.settings.registry import SETTINGS
from vancetope_rag.errors import ExtractionError, ExtractorUnavailableError
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
from vancetope_rag.extraction.vision import VisionDefaults, scan_ocr_config
from vancetope_rag.secrets import error_text, register_secret
from vancetope_rag.services.providers import Endpoint, ProviderCircuits
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store.port.shared import content_hash

__all__ = ["ExtractionPlan", "ExtractionService", "FileExtraction", "vision_circuits"]


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
        ocr_backend = self.options.ocr
        frames = "max_frames" in entry.budgets  # a video: its frames' model counts
        backend = ocr_backend.fingerprint(frames=frames) if ocr_backend is not None else "none"
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
        vision_defaults: VisionDefaults | None = None,
        circuits: ProviderCircuits | None = None,
    ) -> None:
        self.registry = registry
        self.settings = settings
        self._sandbox = sandbox
        self.isolate = isolate
        #: ``DOC_VISION_MODEL`` / ``DOC_VISION_FALLBACK_ENABLED`` beneath the settings.
        self.vision_defaults = vision_defaults or VisionDefaults()
        #: The vision models' circuits: an outage found by one file spares the next ones.
        self.circuits = circuits or vision_circuits()

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
        register_secret(eff["rag.extract.vision.apiKey"])
        ocr = scan_ocr_config(eff, self.vision_defaults)
        if ocr is not None:
            ocr = self._on_this_machine(ocr)
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

    @staticmethod
    def _on_this_machine(ocr: OcrConfig) -> OcrConfig:
        """``ocr`` with what this machine has: the ``tesseract`` program found on the PATH,
        or that it is missing (a missing program, named as LibreOffice and ffmpeg are)."""
        if ocr.engine != "tesseract":
            return ocr
        found = shutil.which("tesseract")
        if found is None:
            return dataclasses.replace(ocr, tesseract_missing=True)
        return dataclasses.replace(ocr, tesseract_cmd=found)

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
        backend = plan.options.ocr
        if backend is not None and entry is not None and "max_frames" in entry.budgets:
            backend = backend.for_frames()  # a video's frames: the vision model's circuit
        vision = _vision_endpoint(backend)
        paused = vision is not None and self._paused(*vision)
        if paused:
            assert vision is not None and plan.options.ocr is not None
            ocr = dataclasses.replace(plan.options.ocr, unavailable=paused)
            plan = dataclasses.replace(plan, options=dataclasses.replace(plan.options, ocr=ocr))
        result = self._extract(data, entry, digest, path, mime, plan)
        if vision is not None and not paused:
            self._report(*vision, result.record)
        return result

    def _paused(self, endpoint: Endpoint, model: str) -> str | None:
        """Why the vision model is not called now (its circuit is open), or None."""
        state = self.circuits.state(endpoint, model)
        if state is None or state.retry_in_s <= 0:
            return None
        return (
            f"the vision model {model!r} ({endpoint.describe()}) is paused after failing "
            f"since {state.since_iso()}; next try in {state.retry_in_s:.0f}s"
        )

    def _report(self, endpoint: Endpoint, model: str, record: ExtractionRecord) -> None:
        """The vision model failed (its circuit opens, or stays open longer) or answered."""
        if record.error_code == ExtractorUnavailableError.code:
            self.circuits.failed(endpoint, model, ConnectionError(record.error or "down"))
        elif record.ocr:
            self.circuits.succeeded(endpoint, model)

    def _extract(
        self,
        data: bytes,
        entry: ExtractorEntry | None,
        digest: str,
        path: str,
        mime: str,
        plan: ExtractionPlan,
    ) -> FileExtraction:
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


def vision_circuits(retry_s: float = 2.0, retry_max_s: float = 30.0) -> ProviderCircuits:
    """Circuits for vision models (``VANCETOPE_RAG_PROVIDER_RETRY_S`` and ``_MAX_S``)."""
    return ProviderCircuits(
        retry_s=retry_s,
        retry_max_s=retry_max_s,
        label="vision model",
        pauses="files that need it fail at once, read again later",
        fix="rag.extract.vision.apiKey, rag.extract.vision.baseUrl or rag.extract.vision.model",
    )


def _vision_endpoint(ocr: OcrConfig | None) -> tuple[Endpoint, str] | None:
    """The endpoint and model a vision-first OCR calls (its circuit's key), or None. A
    Tesseract-first one is left alone: Tesseract still reads while its fallback is down."""
    if ocr is None or ocr.engine != "vision" or not ocr.vision_model:
        return None
    return Endpoint.keyed("vision", ocr.vision_base_url, ocr.api_key), ocr.vision_model
