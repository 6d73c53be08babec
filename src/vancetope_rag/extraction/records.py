"""What an import records of a file's text extraction, and when a file must be read again.

Pure rules, no I/O. The record is kept on the document (JSON in ``Document.extraction``):
the file's hash, the fingerprint of the extractor and the options that shaped its output,
the sections of the stored text, a truncation and its reason, or the failure. An import
reads a file again only when its bytes or that fingerprint changed, or when the last
failure may have been the machine's rather than the file's (a missing dependency or
program, an unreachable vision model, a time limit). Such a failure also carries when the
background indexer reads the file again (``retry_at``, backing off with ``retries``); a
failure of the file (corrupt, encrypted, no text) waits for the file to change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "RETRIED_FAILURES",
    "ExtractionRecord",
    "RetryPolicy",
    "config_fingerprint",
    "file_hash",
    "retry_delay_s",
    "shown_time",
]

#: Failure codes retried even when nothing changed (by every import, and with back-off by
#: the background indexer): they depend on the machine (an extra or a program installed
#: since, a vision model back up, a busy machine), not on the file.
RETRIED_FAILURES = frozenset(
    {
        "EXTRACT_DEPENDENCY_MISSING",
        "EXTRACT_PROGRAM_MISSING",
        "EXTRACT_TIMEOUT",
        "EXTRACT_BACKEND_UNAVAILABLE",
    }
)

_VERSION = 1


def file_hash(data: bytes) -> str:
    """SHA-256 of a file's bytes, hex."""
    return hashlib.sha256(data).hexdigest()


def retry_delay_s(retries: int, base_s: float, max_s: float) -> float:
    """Seconds before the ``retries``-th background read of a file (1: the first): ``base_s``
    doubling each time, at most ``max_s``."""
    return float(min(max_s, base_s * 2.0 ** min(max(retries - 1, 0), 30)))


def shown_time(epoch_s: float) -> str:
    """A retry time as messages show it (UTC, to the second)."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def config_fingerprint(extractor: str, options: Sequence[str], ocr: str | None) -> str:
    """What shapes an extractor's output: its ``name@version``, the budgets that apply, and
    the OCR/vision backend's fingerprint for files that need it (``None`` for the others, so
    turning OCR on re-reads scans only)."""
    h = hashlib.sha256()
    for item in (extractor, *options, ocr if ocr is not None else "-"):
        h.update(item.encode() + b"\x00")
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class ExtractionRecord:
    """One file's extraction as the document keeps it.

    Attributes:
        file_hash: SHA-256 of the file's bytes.
        config: :func:`config_fingerprint` of the extraction that produced the content.
        extractor: ``name@version`` of the extractor ("" when none handles the type).
        mime_type: The file's MIME type.
        size: The file's size in bytes.
        content_hash: Hash of the stored text the sections index (sections are used only
            while the document still holds that text).
        sections: ``(title, start, end)`` of each section of the stored text.
        ocr: The file has parts without a text layer (its text depends on OCR/vision).
        truncated: Why only part of the file was read, or ``None``.
        error_code: The failure's code (``EXTRACT_NO_TEXT_LAYER``...), or ``None``.
        error: The failure's message, or ``None``.
        encoding: The text encoding the file was decoded from (``utf-8``, ``cp1252``…), for
            a text file; ``None`` for other formats and older records.
        retries: Reads in a row that failed for the machine's sake (0: none).
        retry_at: When the background indexer reads the file again (epoch seconds), or
            ``None``: not before an import (a failure of the file, or retries used up).
    """

    file_hash: str
    config: str
    extractor: str = ""
    mime_type: str = ""
    size: int = 0
    content_hash: str = ""
    sections: tuple[tuple[str, int, int], ...] = field(default=())
    ocr: bool = False
    truncated: str | None = None
    error_code: str | None = None
    error: str | None = None
    encoding: str | None = None
    retries: int = 0
    retry_at: float | None = None

    @property
    def failed(self) -> bool:
        return self.error_code is not None

    def applies_to(self, content_hash: str) -> bool:
        """The record describes this text (its sections and truncation hold for it): the
        document still holds what the import stored, the host has not rewritten it since."""
        return self.content_hash == content_hash

    def retry_anyway(self) -> bool:
        """The last failure may have been the machine's: try the file again."""
        return self.error_code in RETRIED_FAILURES

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "v": _VERSION,
            "fileHash": self.file_hash,
            "config": self.config,
            "extractor": self.extractor,
            "mimeType": self.mime_type,
            "size": self.size,
            "contentHash": self.content_hash,
            "sections": [list(s) for s in self.sections],
            "ocr": self.ocr,
            "truncated": self.truncated,
            "errorCode": self.error_code,
            "error": self.error,
            "encoding": self.encoding,
        }
        if self.retries:
            data["retries"] = self.retries
        if self.retry_at is not None:
            data["retryAt"] = self.retry_at
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | None) -> ExtractionRecord | None:
        """The record, or ``None`` when there is none or it cannot be read (a document from
        an older version, or one the host wrote itself)."""
        if not raw:
            return None
        try:
            data = json.loads(raw)
            sections = tuple((str(t), int(a), int(b)) for t, a, b in data.get("sections") or ())
            return cls(
                file_hash=str(data["fileHash"]),
                config=str(data["config"]),
                extractor=str(data.get("extractor") or ""),
                mime_type=str(data.get("mimeType") or ""),
                size=int(data.get("size") or 0),
                content_hash=str(data.get("contentHash") or ""),
                sections=sections,
                ocr=bool(data.get("ocr")),
                truncated=data.get("truncated"),
                error_code=data.get("errorCode"),
                error=data.get("error"),
                encoding=data.get("encoding"),
                retries=int(data.get("retries") or 0),
                retry_at=None if data.get("retryAt") is None else float(data["retryAt"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(frozen=True)
class RetryPolicy:
    """When a file whose read failed for the machine's sake is read again in the background:
    ``base_s`` after the failure, doubling each time up to ``max_s``, at most
    ``max_attempts`` times; then only an import reads it again."""

    base_s: float = 60.0
    max_s: float = 3600.0
    max_attempts: int = 10

    def schedule(
        self,
        failed: ExtractionRecord,
        previous: ExtractionRecord | None,
        now: float,
        *,
        can_retry: bool,
    ) -> ExtractionRecord:
        """``failed`` with its retry count and time, and its message saying what happens
        next; a failure of the file comes back as it is. ``can_retry``: the file can be
        read again without an import (its import's folder is known)."""
        if not failed.retry_anyway():
            return failed
        again = (
            previous is not None
            and previous.retry_anyway()
            and previous.file_hash == failed.file_hash
        )
        retries = previous.retries + 1 if again and previous is not None else 1
        at = None
        if can_retry and retries <= self.max_attempts:
            at = now + retry_delay_s(retries, self.base_s, self.max_s)
        if at is not None:
            note = f"; this machine's failure, not the file's: read again at {shown_time(at)}"
        else:
            note = "; this machine's failure, not the file's: read again by the next import"
        error = (failed.error or failed.error_code or "") + note
        return dataclasses.replace(failed, retries=retries, retry_at=at, error=error)

    def due(self, record: ExtractionRecord | None, now: float) -> bool:
        """The background read of this file is due."""
        return (
            record is not None
            and record.retry_anyway()
            and record.retry_at is not None
            and record.retry_at <= now
        )
