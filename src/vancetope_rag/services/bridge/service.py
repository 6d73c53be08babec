"""BridgeService: ``files_visualize``, a bounded, text-first reading of one file on demand,
without indexing it (the spec's MM-Bridge).

A workspace file is read through the path jail's race-free walk (dotfiles, dot-directories and
the engine's runtime state refused after canonical resolution), then extracted by the same
registry and sandbox an import uses, so every registered type is served, a plugin's included.
It is read twice at most: first with no OCR/vision backend at all — text types, and pages with a
text layer, never reach a model — and only when that reading left pages without a text layer,
or the caller asked for ``vision``, once more with the backend, bounded by
``rag.bridge.visionMaxPages`` and behind the vision endpoint's circuit. A video is the
exception: its frames are what a vision model is for, so with one configured it is read with
the backend at once (its subtitles come with it), at most ``rag.bridge.maxFrames`` frames; without
one, its subtitles alone. The result is cached by
the file's hash and the effective configuration, so asking again (or for the next offset)
pays for no extraction and no vision call. A stored document is answered from its stored text
and recorded sections, with no model call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vancetope_rag.domain.bridge import (
    BridgeLimits,
    PageRange,
    Window,
    bridge_error,
    resolve_limits,
    window,
)
from vancetope_rag.domain.eligibility import guess_mime_type
from vancetope_rag.domain.records import Document
from vancetope_rag.errors import (
    BridgeError,
    BridgeLimitError,
    BridgeVisionNotConfiguredError,
    BridgeVisionUnavailableError,
    ExtractionError,
    FileChangedWhileReadError,
    FileTooLargeError,
    InvalidInputError,
    PathNotAllowedError,
    ProviderUnavailableError,
    RagError,
)
from vancetope_rag.extraction.records import ExtractionRecord, file_hash
from vancetope_rag.extraction.registry import (
    ExtractedText,
    ExtractOptions,
    OcrConfig,
    sections_of,
)
from vancetope_rag.services.bridge.cache import BridgeCache, cache_key
from vancetope_rag.services.documents import DocumentService
from vancetope_rag.services.extraction import ExtractionPlan, ExtractionService
from vancetope_rag.services.providers.circuits import Endpoint, ProviderCircuits
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.services.workspace import read_workspace_file, resolve_workspace_path
from vancetope_rag.store.port.shared import content_hash

__all__ = ["BridgeRequest", "BridgeService"]

#: Largest workspace file the tool reads (as ``rag_add_workspace_file``).
MAX_FILE_BYTES = 20 * 1024 * 1024
_LIMIT_SETTING = "rag.bridge.visionMaxPages"
_FRAMES_SETTING = "rag.bridge.maxFrames"
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


@dataclass(frozen=True)
class BridgeRequest:
    """What one call asks for beyond the file.

    Attributes:
        offset: Where in the file's text the answer starts (a previous answer's ``next``).
        pages: Pages (PDF pages, TIFF frames; or the file's sections in order for other
            types) to read, or None for the whole file.
        vision: Send the pages to the vision model even where they have a text layer.
    """

    offset: int = 0
    pages: PageRange | None = None
    vision: bool = False

    @classmethod
    def of(
        cls, offset: object = None, pages: object = None, vision: object = None
    ) -> BridgeRequest:
        """A request from a caller's values, checked.

        Raises:
            InvalidInputError: A negative or non-integer offset, a malformed page range, a
                non-boolean vision.
        """
        if offset is None:
            offset = 0
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be a whole number from 0, got {offset!r}")
        if vision is not None and not isinstance(vision, bool):
            raise InvalidInputError(f"vision must be true or false, got {vision!r}")
        chosen = None if pages in (None, "") else PageRange.parse(pages)
        return cls(offset, chosen, bool(vision))


class _VisionCallFailed(ExtractionError):
    """A vision phase's failure as the provider circuit reads it: the HTTP status the
    backend answered, or a transport failure (chained) when it was not reached."""

    def __init__(self, cause: ExtractionError, status: int | None) -> None:
        super().__init__(cause.message)
        self.status_code = status
        self.cause = cause


@dataclass(eq=False, repr=False, kw_only=True)
class BridgeService:
    """Answers ``files_visualize``; see the module docstring."""

    extraction: ExtractionService
    settings: SettingsService
    documents: DocumentService
    circuits: ProviderCircuits
    cache: BridgeCache
    environment: dict[str, int | None]
    max_text_chars: int
    #: Paths of the engine's runtime state (the store file and its journals, caches, export
    #: and extraction folders), made canonical: never read, even inside a workspace.
    runtime_paths: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.runtime_paths = tuple(os.path.realpath(p) for p in self.runtime_paths)

    @staticmethod
    def request(
        offset: object = None, pages: object = None, vision: object = None
    ) -> BridgeRequest:
        """:meth:`BridgeRequest.of`, for surfaces that hold only the service."""
        return BridgeRequest.of(offset, pages, vision)

    def limits(self, tenant_id: str, project_id: str) -> BridgeLimits:
        """The limits the project's calls apply now."""
        tenant, project = self.settings.scopes(tenant_id, project_id)
        return resolve_limits(project, tenant, self.environment)

    # -- a stored document -------------------------------------------------------------------

    def read_document(
        self, tenant_id: str, project_id: str, document_id: str, request: BridgeRequest
    ) -> dict[str, Any]:
        """The document's stored text in its recorded sections: no extraction, no model."""
        if request.vision:
            raise InvalidInputError(
                "vision applies to a workspace file; a document is answered from its stored "
                "text (give filePath to look at the file itself)"
            )
        doc = self.documents.get(tenant_id, project_id, document_id)
        if not doc.content.strip():
            raise _empty_document(doc)
        limits = self.limits(tenant_id, project_id)
        record = ExtractionRecord.from_json(doc.extraction)
        spans: tuple[tuple[str, int, int], ...] = ()
        if record is not None and record.applies_to(content_hash(doc.content)):
            spans = record.sections
        text, spans = _chosen_sections(doc.content, spans, request.pages)
        answer = _answer(text, spans, request, limits)
        answer.update(
            {
                "source": "document",
                "documentId": doc.id,
                "path": doc.path,
                "mimeType": doc.mime_type,
                "truncatedReason": _joined(
                    answer["truncatedReason"], record.truncated if record else None
                ),
                "vision": {"used": False, "pages": []},
                "cached": False,
            }
        )
        return answer

    # -- a workspace file --------------------------------------------------------------------

    def read_file(
        self,
        tenant_id: str,
        project_id: str,
        root: Path,
        user_path: str,
        request: BridgeRequest,
    ) -> dict[str, Any]:
        """A bounded reading of the workspace file ``user_path`` (relative to ``root``).

        Raises:
            PathNotAllowedError: The jail refuses the path, or it is the engine's runtime state.
            DocumentNotFoundError: No such file.
            BridgeError: The file cannot be read (an ``MM_BRIDGE_*`` code, the cause named).
            InvalidInputError: A bad offset or page range.
        """
        self._refuse_runtime_state(root, user_path)
        try:
            rel, data = read_workspace_file(root, user_path, max_bytes=MAX_FILE_BYTES)
        except FileChangedWhileReadError as exc:
            raise bridge_error(exc, vision_configured=False) from None
        except ExtractionError as exc:  # the jail's only other one: over the size limit
            raise BridgeLimitError(exc.message, cause=FileTooLargeError.code) from None
        limits = self.limits(tenant_id, project_id)
        plan = self.extraction.plan(tenant_id, project_id, max_chars=self.max_text_chars)
        backend = plan.options.ocr
        vision = backend if backend is not None and backend.engine == "vision" else None
        if request.vision and vision is None:
            raise BridgeVisionNotConfiguredError(
                f"vision was asked for {rel!r}, but no vision model is configured: set "
                "rag.extract.ocr to vision and rag.extract.vision.model",
                cause=None,
            )
        mime = guess_mime_type(rel)
        entry = self.extraction.registry.find_entry(mime, rel)
        # an extractor that reads pages itself (PDF, TIFF) starts at the range's first page
        paged = entry is not None and "max_pages" in entry.budgets
        # one that samples frames (a video) shows them to the vision model
        framed = entry is not None and "max_frames" in entry.budgets
        base = dataclasses.replace(plan.options, ocr=None, max_frames=limits.max_frames)
        if paged and request.pages is not None:
            base = dataclasses.replace(
                base, first_page=request.pages.first, max_pages=request.pages.count
            )
        ocr = _bounded(backend, limits, framed=framed)
        key = cache_key(
            file_hash(data),
            f"{entry.name}@{entry.version}" if entry else "none",
            repr(dataclasses.replace(base, ocr=None)),
            ocr.fingerprint() if ocr is not None else "none",
            f"vision={request.vision}",
            f"pages={request.pages}",
            f"timeout={plan.timeout_s}",
        )
        cached = self.cache.get(tenant_id, project_id, key)
        if cached is None:
            look = request.vision or (framed and vision is not None)
            cached = self._extract(rel, data, mime, plan, base, ocr, request, look=look)
            self.cache.put(tenant_id, project_id, key, cached)
            was_cached = False
        else:
            was_cached = True
        text = str(cached["text"])
        spans = tuple((str(t), int(a), int(b)) for t, a, b in cached["sections"])
        if not paged:
            text, spans = _chosen_sections(text, spans, request.pages)
        answer = _answer(text, spans, request, limits)
        left = [int(p) for p in cached.get("ocrLeft") or ()]
        if answer["next"] is None:
            answer["next"] = _next_pages(cached, spans, request.pages, left, limits)
        answer.update(
            {
                "source": "workspace",
                "path": rel,
                "mimeType": cached["mimeType"],
                "extractor": cached["extractor"],
                "truncatedReason": _joined(answer["truncatedReason"], cached.get("truncated")),
                "vision": {
                    "used": bool(cached.get("visionPages") or cached.get("visionFrames")),
                    "pages": cached.get("visionPages") or [],
                    "pagesLeft": left,
                    "frames": int(cached.get("visionFrames") or 0),
                    "model": _model_of(vision, framed=framed),
                },
                "cached": was_cached,
            }
        )
        answer["truncated"] = bool(answer["truncated"] or answer["truncatedReason"])
        return answer

    def _refuse_runtime_state(self, root: Path, user_path: str) -> None:
        """The store file, its journals and the engine's folders are never read, whatever
        name (or symlink) leads to them: compared after the jail's canonical resolution."""
        if not self.runtime_paths:
            return
        target = os.path.realpath(resolve_workspace_path(root, user_path))
        for state in self.runtime_paths:
            if target == state or target.startswith(state.rstrip(os.sep) + os.sep):
                raise PathNotAllowedError(
                    f"workspace path {user_path!r:.100} refused: it is the engine's runtime "
                    "state (the store file, its journal, a cache or an export/extraction "
                    "folder), which the tool never reads"
                )

    def _extract(
        self,
        rel: str,
        data: bytes,
        mime: str,
        plan: ExtractionPlan,
        base: ExtractOptions,
        ocr: OcrConfig | None,
        request: BridgeRequest,
        *,
        look: bool,
    ) -> dict[str, Any]:
        """Text first, the model only where it is needed (``look``: at once); the cache
        entry of the result."""
        local = ExtractionPlan(base, plan.timeout_s)
        first = None if look else self.extraction.extract(data, path=rel, mime=mime, plan=local)
        needs_backend = look or (
            first is not None
            and (
                (first.text is None and first.record.ocr)
                or (first.text is not None and bool(first.text.ocr_left))
            )
        )
        result = first
        if needs_backend and ocr is not None:
            looked = ExtractionPlan(
                dataclasses.replace(base, ocr=ocr, vision_all=request.vision), plan.timeout_s
            )
            with self._circuit(ocr):
                result = self.extraction.extract(data, path=rel, mime=mime, plan=looked)
                if result.text is None and result.error is not None and ocr.engine == "vision":
                    raise _for_circuit(result.error)
        assert result is not None
        if result.text is None:
            raise bridge_error(
                result.error or ExtractionError(f"cannot extract text from {rel!r}"),
                vision_configured=ocr is not None and ocr.engine == "vision",
            )
        return _entry(result.text, vision=ocr is not None and ocr.engine == "vision")

    @contextmanager
    def _circuit(self, ocr: OcrConfig) -> Iterator[None]:
        """Behind the vision endpoint's circuit (Tesseract is local: no circuit); a failure
        of the endpoint comes out as ``MM_BRIDGE_VISION_UNAVAILABLE``, the file's own as
        what it was."""
        if ocr.engine != "vision":
            yield
            return
        key = ocr.api_key or ""
        endpoint = Endpoint(
            "vision",
            (ocr.vision_base_url or "").rstrip("/"),
            hashlib.sha256(key.encode()).hexdigest()[:16] if key else "",
        )
        try:
            with self.circuits.guard(endpoint, ocr.vision_model or ""):
                yield
        except _VisionCallFailed as exc:  # the file's failure, as the backend said
            raise bridge_error(exc.cause, vision_configured=True) from None
        except ExtractionError as exc:  # neither HTTP nor transport (paused, a bad answer)
            raise bridge_error(exc, vision_configured=True) from None
        except ProviderUnavailableError as exc:
            raise BridgeVisionUnavailableError(
                f"the vision model at {endpoint.base_url or 'its default endpoint'} is "
                f"unavailable or refuses the settings; no call is made until it is tried "
                f"again in {exc.retry_in_s:.0f}s",
                cause=exc.code,
            ) from None


def _next_pages(
    cached: dict[str, Any],
    spans: Sequence[tuple[str, int, int]],
    pages: PageRange | None,
    left: list[int],
    limits: BridgeLimits,
) -> dict[str, str] | None:
    """The page range to call again with: from the first page the vision model did not
    read, or, for a page range the file went on past (it was cut, and its last page was
    read), the range after it, of the same size."""
    if left:
        return {"pages": str(PageRange(left[0], left[0] + limits.vision_max_pages - 1))}
    if pages is None or not cached.get("truncated") or not spans:
        return None
    if spans[-1][0] != f"page {pages.last}":
        return None
    return {"pages": str(PageRange(pages.last + 1, pages.last + pages.count))}


def _for_circuit(error: ExtractionError) -> ExtractionError:
    """The vision phase's failure, as the circuit can sort it: the vision backend's messages
    (``default_plugins/extractors/ocr.py``) name the HTTP status it answered, or that it could
    not be reached or did not answer in time (a transport failure); anything else is the
    file's."""
    message = error.message
    status = _HTTP_STATUS.search(message)
    if status is not None:
        return _VisionCallFailed(error, int(status.group(1)))
    if "cannot reach the vision model" in message or "did not answer within" in message:
        failed = _VisionCallFailed(error, None)
        failed.__cause__ = ConnectionError(message)
        return failed
    return error


def _model_of(vision: OcrConfig | None, *, framed: bool) -> str | None:
    """The model that reads this file: a video's frames go to the RAG's vision model, pages
    and images to the scan model (the dedicated OCR model when one is chosen)."""
    if vision is None:
        return None
    return vision.frame_model if framed else vision.vision_model


def _bounded(backend: OcrConfig | None, limits: BridgeLimits, *, framed: bool) -> OcrConfig | None:
    """The OCR/vision backend within the tool's budgets: pages and images at most
    ``rag.bridge.visionMaxPages``; a video's images are its frames, which
    ``rag.bridge.maxFrames`` alone bounds (the video extractor bounds its frames by the
    backend's page budget too, which for an import is ``rag.extract.vision.maxPages``)."""
    if backend is None:
        return None
    if framed:
        return dataclasses.replace(
            backend, max_pages=limits.max_frames, limit_setting=_FRAMES_SETTING
        )
    return dataclasses.replace(
        backend, max_pages=limits.vision_max_pages, limit_setting=_LIMIT_SETTING
    )


def _entry(text: ExtractedText, *, vision: bool) -> dict[str, Any]:
    return {
        "text": text.text,
        "sections": [list(s) for s in text.sections],
        "mimeType": text.mime_type,
        "extractor": text.extractor,
        "truncated": text.truncated_reason,
        "visionPages": list(text.ocr_pages) if vision else [],
        "visionFrames": text.vision_frames if vision else 0,
        "ocrPages": list(text.ocr_pages),
        "ocrLeft": list(text.ocr_left),
    }


def _chosen_sections(
    text: str, spans: Sequence[tuple[str, int, int]], pages: PageRange | None
) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """Sections ``pages`` (1-based, in order) of a text, re-joined; all without a range."""
    if pages is None:
        return text, tuple(spans)
    parts = sections_of(text, spans)
    chosen = parts[pages.first - 1 : pages.last]
    if not chosen:
        raise InvalidInputError(
            f"pages {pages}: the file has {len(parts)} section(s); ask for pages 1-{len(parts)}"
        )
    out: list[str] = []
    new: list[tuple[str, int, int]] = []
    at = 0
    for part in chosen:
        if out:
            out.append("\n\n")
            at += 2
        out.append(part.text)
        new.append((part.title or "", at, at + len(part.text)))
        at += len(part.text)
    return "".join(out), tuple(new) if any(t for t, _, _ in new) else ()


def _answer(
    text: str,
    spans: Sequence[tuple[str, int, int]],
    request: BridgeRequest,
    limits: BridgeLimits,
) -> dict[str, Any]:
    seen: Window = window(text, spans, offset=request.offset, max_chars=limits.max_chars)
    cut = (
        f"only characters {seen.offset:,}-{seen.end:,} of {seen.total_chars:,} were returned "
        f"(rag.bridge.maxChars {limits.max_chars:,}); continue with offset {seen.end}"
        if seen.more
        else None
    )
    return {
        "sections": [s.to_json() for s in seen.sections],
        "offset": seen.offset,
        "chars": seen.chars,
        "totalChars": seen.total_chars,
        "truncated": seen.more,
        "truncatedReason": cut,
        "next": {"offset": seen.end} if seen.more else None,
        "pages": str(request.pages) if request.pages else None,
        "limits": limits.to_json(),
    }


def _joined(*reasons: str | None) -> str | None:
    return "; ".join(r for r in reasons if r) or None


def _empty_document(doc: Document) -> RagError:
    why = doc.extraction_error or "it holds no text"
    return BridgeError(f"document {doc.path!r} has no text to show: {why}", cause="EXTRACT_NO_TEXT")
