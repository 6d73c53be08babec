"""What an import records of a file's text extraction, and when a file must be read again.

Pure rules, no I/O. The record is kept on the document (JSON in ``Document.extraction``):
the file's hash, the fingerprint of the extractor and the options that shaped its output,
the sections of the stored text, a truncation and its reason, or the failure. An import
reads a file again only when its bytes or that fingerprint changed, or when the last
failure may have been the machine's rather than the file's (a missing dependency, a time
limit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RETRIED_FAILURES", "ExtractionRecord", "config_fingerprint", "file_hash"]

#: Failure codes an import retries even when nothing changed: they depend on the machine
#: (an extra or a program installed since, a busy machine), not on the file.
RETRIED_FAILURES = frozenset(
    {"EXTRACT_DEPENDENCY_MISSING", "EXTRACT_PROGRAM_MISSING", "EXTRACT_TIMEOUT"}
)

_VERSION = 1


def file_hash(data: bytes) -> str:
    """SHA-256 of a file's bytes, hex."""
    return hashlib.sha256(data).hexdigest()


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
            )
        except (ValueError, TypeError, KeyError):
            return None
