"""Importing files as project documents: walk, size cap, text extraction, upsert, and a
summary that says, per file type, what was done, and every failure with its reason.

The CLI's ``import`` runs :meth:`DocumentImporter.import_directory`; a surface that receives
files another way (an upload) hands them to :meth:`DocumentImporter.import_sources`. Text is
extracted through the app's :class:`~vancetope_rag.extraction.service.ExtractionService`
(the app's extractor registry, budgets and time limit), so file types that plugins register
are imported like the built-in ones. A file that cannot be read (a scan without OCR, an
encrypted or corrupt file, a missing extra, past the time limit) becomes a document in state
``failed`` with the reason, so the status, the REST API and the UI show it; it never stops or
undoes the others. Files that are no document at all (symlinks, unsupported types) are
skipped with their reason.

A directory is listed first and read afterwards (the CLI counts the files for its progress
bar), so what is read may no longer be what was listed. Each file is read through the
workspace module's race-free walk (:func:`~vancetope_rag.tools.workspace.open_below`: every
component opened relative to its parent, no symlink followed, ``fstat`` of what was opened)
and bounded read (:func:`~vancetope_rag.tools.workspace.read_open_file`: never more than the
size limit plus one byte, one version only): a file that became a symlink, a FIFO or a
device, or vanished, is skipped with its reason; one that kept changing while it was read
fails with ``EXTRACT_CHANGED_WHILE_READ``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vancetope_rag.domain.eligibility import guess_mime_type, is_textual
from vancetope_rag.domain.texts import has_lone_surrogate
from vancetope_rag.errors import (
    DocumentNotFoundError,
    ExtractionError,
    FileChangedWhileReadError,
    FileTooLargeError,
    PathNotAllowedError,
    RagError,
)
from vancetope_rag.extraction.records import ExtractionRecord, file_hash
from vancetope_rag.extraction.registry import ExtractorRegistry, UnsupportedTypeError
from vancetope_rag.extraction.service import ExtractionPlan, ExtractionService, FileExtraction
from vancetope_rag.services.documents import DocumentService, check_path
from vancetope_rag.tools.workspace import WalkRules, open_below, read_open_file

#: Files larger than this are skipped (a document is held in memory whole).
MAX_IMPORT_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class ImportSource:
    """One file offered for import, under its path relative to the import root.

    Exactly one of ``root`` (read from disk: the regular file ``path`` names below ``root``),
    ``data`` (already in memory) or ``skip_reason`` (not importable, e.g. a symbolic link) is
    set.
    """

    path: str
    root: Path | None = None
    data: bytes | None = None
    skip_reason: str | None = None

    def read(self, max_bytes: int) -> bytes:
        """The file's bytes: at most ``max_bytes + 1`` are read, so a larger file is refused
        (:class:`FileTooLargeError`) without reading it; one that changed while it was read,
        also the second time, is refused (:class:`FileChangedWhileReadError`). A file no longer
        the regular file listed (a symlink, FIFO or device now) or gone is another
        :class:`RagError`: skipped, not a failed document."""
        if self.data is not None:
            if len(self.data) > max_bytes:
                raise _too_large(max_bytes)
            return self.data
        if self.root is None:
            raise ExtractionError(self.skip_reason or "nothing to read")
        fd, _, _ = open_below(self.root, self.path.split("/"), _LISTED_FILE)
        try:
            return read_open_file(
                fd, max_bytes, too_large=lambda: _too_large(max_bytes), changed=_changed
            )
        finally:
            os.close(fd)


#: How the import reads a file it listed: no symlink followed anywhere on its path (the
#: listing skipped symlinks; one there now was swapped in), hard links allowed as listed.
_LISTED_FILE = WalkRules(
    refuse=PathNotAllowedError,
    not_found=lambda: DocumentNotFoundError("it vanished after it was listed"),
    follow_symlinks=False,
    single_link=False,
)


def _too_large(max_bytes: int) -> FileTooLargeError:
    mib = 1024 * 1024
    limit = f"{max_bytes // mib} MiB" if max_bytes % mib == 0 else f"{max_bytes:,} bytes"
    return FileTooLargeError(f"larger than {limit} (the import's size limit)")


def _changed() -> FileChangedWhileReadError:
    return FileChangedWhileReadError(
        "it changed while it was read, also when read again (its size or modification time); "
        "import it again once it is no longer being written"
    )


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass
class TypeCounts:
    """What an import did with the files of one type."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class ImportSummary:
    """What an import did: per-action and per-type counts, the files that failed (documents
    in state ``failed``), were truncated, or were skipped (not documents), with reasons."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_files: list[SkippedFile] = field(default_factory=list)
    #: Imported files whose text is longer than the text limit: indexed only up to it.
    over_limit: list[str] = field(default_factory=list)
    #: The text limit (characters) the import was measured against.
    max_text_chars: int = 0
    #: Files that could not be read: documents in state ``failed``, with the reason.
    failed_files: list[SkippedFile] = field(default_factory=list)
    #: Files read only in part (a page, slide, sheet or cell budget), with the reason.
    truncated_files: list[SkippedFile] = field(default_factory=list)
    #: Counts by file type (the extension, else the MIME type).
    by_type: dict[str, TypeCounts] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        return len(self.skipped_files)

    @property
    def failed(self) -> int:
        return len(self.failed_files)

    def count(self, kind: str, action: str) -> None:
        counts = self.by_type.setdefault(kind, TypeCounts())
        setattr(counts, action, getattr(counts, action) + 1)
        if action in ("created", "updated", "unchanged"):
            setattr(self, action, getattr(self, action) + 1)

    def to_json(self) -> dict[str, object]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "failed": self.failed,
            "skipped": self.skipped,
            "failedFiles": [{"path": s.path, "reason": s.reason} for s in self.failed_files],
            "truncatedFiles": [{"path": s.path, "reason": s.reason} for s in self.truncated_files],
            "skippedFiles": [{"path": s.path, "reason": s.reason} for s in self.skipped_files],
            "byType": {k: v.to_json() for k, v in sorted(self.by_type.items())},
            "overLimit": list(self.over_limit),
            "maxTextChars": self.max_text_chars,
        }


def file_type(path: str, mime: str) -> str:
    """What the per-type summary counts a file as: its extension, else its MIME type."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot + 1 :].lower() if dot > 0 else mime


def walk_directory(root: Path) -> Iterator[ImportSource]:
    """Every file under ``root``, sorted; hidden entries left out, symlinks not followed.
    Files are only listed here: :meth:`ImportSource.read` opens each one later, race-free."""
    real_root = Path(os.path.realpath(root))
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if has_lone_surrogate(rel):
                # Undecodable bytes come back from the OS as lone surrogates: such a name
                # cannot be a document path (not text); skip it, show it with \x escapes.
                shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                yield ImportSource(shown, skip_reason="the file name is not valid UTF-8; rename it")
            elif full.is_symlink():
                yield ImportSource(rel, skip_reason="symbolic link (not followed)")
            elif not full.is_file():
                yield ImportSource(rel, skip_reason="not a regular file")
            else:
                yield ImportSource(rel, root=real_root)


class DocumentImporter:
    """Creates or updates one document per imported file; a file whose bytes and extraction
    settings are unchanged since it was last read costs a hash, not an extraction."""

    def __init__(
        self,
        *,
        documents: DocumentService,
        extractors: ExtractorRegistry,
        extraction: ExtractionService,
        max_text_chars: int,
        max_bytes: int = MAX_IMPORT_BYTES,
    ) -> None:
        self.documents = documents
        self.extractors = extractors
        self.extraction = extraction
        self.max_text_chars = max_text_chars
        self.max_bytes = max_bytes

    def import_directory(
        self, tenant_id: str, project_id: str, root: Path, *, prefix: str = "documents/"
    ) -> ImportSummary:
        """Import every file under ``root`` as ``<prefix><relative path>``."""
        return self.import_sources(tenant_id, project_id, walk_directory(root), prefix=prefix)

    def import_sources(
        self,
        tenant_id: str,
        project_id: str,
        sources: Iterable[ImportSource],
        *,
        prefix: str = "documents/",
        on_file: Callable[[ImportSource], None] | None = None,
    ) -> ImportSummary:
        """Import ``sources`` one by one. A file that cannot be read becomes a document in
        state ``failed`` with the reason; one that is no document at all (a symlink, an
        unsupported type) is skipped with its reason. ``on_file`` is called after each one
        (a progress bar)."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        summary = ImportSummary(max_text_chars=self.max_text_chars)
        plan = self.extraction.plan(tenant_id, project_id)
        for source in sources:
            self._import_source(tenant_id, project_id, source, prefix, plan, summary)
            if on_file is not None:
                on_file(source)
        return summary

    def _import_source(
        self,
        tenant_id: str,
        project_id: str,
        source: ImportSource,
        prefix: str,
        plan: ExtractionPlan,
        summary: ImportSummary,
    ) -> None:
        mime = guess_mime_type(source.path)
        kind = file_type(source.path, mime)
        if source.skip_reason is not None:
            summary.skipped_files.append(SkippedFile(source.path, source.skip_reason))
            summary.count(kind, "skipped")
            return
        path = prefix + source.path
        try:
            self._import_one(tenant_id, project_id, source, path, mime, kind, plan, summary)
        except (RagError, OSError) as exc:
            reason = exc.message if isinstance(exc, RagError) else str(exc)
            summary.skipped_files.append(SkippedFile(source.path, reason or "unknown"))
            summary.count(kind, "skipped")

    def _import_one(
        self,
        tenant_id: str,
        project_id: str,
        source: ImportSource,
        path: str,
        mime: str,
        kind: str,
        plan: ExtractionPlan,
        summary: ImportSummary,
    ) -> None:
        existing = self.documents.get_by_path(tenant_id, project_id, check_path(path))
        previous = ExtractionRecord.from_json(existing.extraction) if existing else None
        try:
            data = source.read(self.max_bytes)
        except ExtractionError as exc:  # too large, or changed while read: a document that says so
            record = ExtractionRecord(
                file_hash="",
                config="",
                mime_type=mime,
                error_code=exc.code,
                error=f"cannot import {source.path!r}: {exc.message}",
            )
            read = FileExtraction(record)
        else:
            if existing is not None and self.extraction.is_current(
                previous, file_hash(data), mime, source.path, plan
            ):
                assert previous is not None
                self._note(source.path, kind, previous, summary, "unchanged")
                if len(existing.content) > self.max_text_chars:
                    summary.over_limit.append(source.path)
                return
            read = self.extraction.extract(data, path=source.path, mime=mime, plan=plan)
            if isinstance(read.error, UnsupportedTypeError):
                raise read.error
        if read.text is None:
            self.documents.record_unreadable(
                tenant_id,
                project_id,
                path,
                mime_type=_stored_mime(mime),
                extraction=read.record.to_json(),
                reason=read.record.error or "unreadable",
            )
            self._note(source.path, kind, read.record, summary, "failed")
            return
        result = self.documents.upsert_by_path(
            tenant_id,
            project_id,
            path,
            read.text.text,
            mime_type=_stored_mime(mime),
            extraction=read.record.to_json(),
        )
        self._note(source.path, kind, read.record, summary, result.action)
        if read.text.chars > self.max_text_chars:
            summary.over_limit.append(source.path)

    @staticmethod
    def _note(
        path: str, kind: str, record: ExtractionRecord, summary: ImportSummary, action: str
    ) -> None:
        """Count a file; one that failed (again) or was truncated is listed with its reason,
        also when it was unchanged since the last import."""
        if record.failed:
            summary.count(kind, "failed")
            summary.failed_files.append(SkippedFile(path, record.error or ""))
            return
        summary.count(kind, action)
        if record.truncated:
            summary.truncated_files.append(SkippedFile(path, record.truncated))


def _stored_mime(mime: str) -> str:
    """Extracted text (a PDF's, a notebook's) is stored as text; the indexer reads text."""
    return mime if is_textual(mime) else "text/plain"
