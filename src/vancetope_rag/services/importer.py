"""Importing files as project documents: walk, size cap, text extraction, upsert, and a
summary that says which files were skipped and why.

The CLI's ``import`` runs :meth:`DocumentImporter.import_directory`; a surface that receives
files another way (an upload) hands them to :meth:`DocumentImporter.import_sources`. Text is
extracted through the app's extractor registry, so file types that plugins register are
imported like the built-in ones. One file's failure is recorded and skipped; it never stops
or undoes the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vancetope_rag.domain.eligibility import guess_mime_type, is_textual
from vancetope_rag.domain.texts import has_lone_surrogate
from vancetope_rag.errors import ExtractionError, RagError
from vancetope_rag.extract import HARD_MAX_CHARS, ExtractorRegistry, extract_text
from vancetope_rag.services.documents import DocumentService

#: Files larger than this are skipped (a document is held in memory whole).
MAX_IMPORT_BYTES = 50 * 1024 * 1024


@dataclass(frozen=True)
class ImportSource:
    """One file offered for import, under its path relative to the import root.

    Exactly one of ``file`` (read from disk, size checked first), ``data`` (already in memory)
    or ``skip_reason`` (not importable, e.g. a symbolic link) is set.
    """

    path: str
    file: Path | None = None
    data: bytes | None = None
    skip_reason: str | None = None

    def read(self, max_bytes: int) -> bytes:
        """The file's bytes; refuses files over ``max_bytes`` before reading them."""
        size = len(self.data) if self.data is not None else None
        if size is None and self.file is not None:
            size = self.file.stat().st_size
        if size is None:
            raise ExtractionError(self.skip_reason or "nothing to read")
        if size > max_bytes:
            raise ExtractionError(f"larger than {max_bytes // (1024 * 1024)} MiB")
        if self.data is not None:
            return self.data
        assert self.file is not None
        return self.file.read_bytes()


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass
class ImportSummary:
    """What an import did: per-action counts and the skipped files with their reasons."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped_files: list[SkippedFile] = field(default_factory=list)
    #: Imported files whose text is longer than the text limit: indexed only up to it.
    over_limit: list[str] = field(default_factory=list)
    #: The text limit (characters) the import was measured against.
    max_text_chars: int = 0

    @property
    def skipped(self) -> int:
        return len(self.skipped_files)

    def to_json(self) -> dict[str, object]:
        return {
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "skippedFiles": [{"path": s.path, "reason": s.reason} for s in self.skipped_files],
            "overLimit": list(self.over_limit),
            "maxTextChars": self.max_text_chars,
        }


def walk_directory(root: Path) -> Iterator[ImportSource]:
    """Every file under ``root``, sorted; hidden entries left out, symlinks not followed."""
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
                yield ImportSource(rel, file=full)


class DocumentImporter:
    """Creates or updates one document per imported file (unchanged files cost nothing)."""

    def __init__(
        self,
        documents: DocumentService,
        extractors: ExtractorRegistry,
        *,
        max_text_chars: int,
        max_bytes: int = MAX_IMPORT_BYTES,
    ) -> None:
        self.documents = documents
        self.extractors = extractors
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
        """Import ``sources`` one by one; a file that fails is skipped with its reason.
        ``on_file`` is called after each one (a progress bar)."""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        summary = ImportSummary(max_text_chars=self.max_text_chars)
        for source in sources:
            self._import_source(tenant_id, project_id, source, prefix, summary)
            if on_file is not None:
                on_file(source)
        return summary

    def _import_source(
        self,
        tenant_id: str,
        project_id: str,
        source: ImportSource,
        prefix: str,
        summary: ImportSummary,
    ) -> None:
        if source.skip_reason is not None:
            summary.skipped_files.append(SkippedFile(source.path, source.skip_reason))
            return
        try:
            action, over = self._import_one(tenant_id, project_id, source, prefix + source.path)
        except (RagError, OSError) as exc:
            reason = exc.message if isinstance(exc, RagError) else str(exc)
            summary.skipped_files.append(SkippedFile(source.path, reason or "unknown"))
            return
        setattr(summary, action, getattr(summary, action) + 1)
        if over:
            summary.over_limit.append(source.path)

    def _import_one(
        self, tenant_id: str, project_id: str, source: ImportSource, path: str
    ) -> tuple[str, bool]:
        """Import one file; returns the action and whether its text is over the limit."""
        mime = guess_mime_type(source.path)
        # The document is the file's whole text (up to the extraction's hard cap); the
        # indexer indexes it up to the text limit and marks it truncated.
        extracted = extract_text(
            source.read(self.max_bytes),
            path=source.path,
            mime_type=mime,
            max_chars=HARD_MAX_CHARS,
            registry=self.extractors,
        )
        # Extracted text (a PDF's, a notebook's) is stored as text; the indexer reads text.
        stored_mime = mime if is_textual(mime) else "text/plain"
        result = self.documents.upsert_by_path(
            tenant_id, project_id, path, extracted.text, mime_type=stored_mime
        )
        return result.action, extracted.truncated or extracted.chars > self.max_text_chars
