"""Importing files as project documents: walk, size cap, text extraction, upsert, and a
summary that says, per file type, what was done, and every failure with its reason.

The CLI's ``import`` runs :meth:`DocumentImporter.import_directory`, a sync of the folder:
every document it writes remembers the import it came from (:func:`import_origin`: the
resolved folder and the prefix), and a re-import of that key deletes the documents whose file
is gone (their chunks at once) and moves the document of a renamed file (same bytes, or same
text: the path changes, its chunks come from the embedding cache). It never touches a
document of another key, nor one the host or a tool wrote; documents imported before imports
recorded their origin are pruned only when adopted. A run that would delete more than half of
a key's documents (an emptied or unmounted folder?) deletes none unless told ``yes``; a dry
run reads everything and writes nothing. A surface that receives
files another way (an upload) hands them to :meth:`DocumentImporter.import_sources`. Text is
extracted through the app's :class:`~vancetope_rag.services.extraction.ExtractionService`
(the app's extractor registry, budgets and time limit), so file types that plugins register
are imported like the built-in ones. A file that cannot be read (a scan without OCR, an
encrypted or corrupt file, a missing extra, past the time limit) becomes a document in state
``failed`` with the reason, so the status, the REST API and the UI show it; it never stops or
undoes the others. Files that are no document at all (symlinks, unsupported types) are
skipped with their reason.

A directory is listed first and read afterwards (the CLI counts the files for its progress
bar), so what is read may no longer be what was listed. Each file is read through the
workspace module's race-free walk (:func:`~vancetope_rag.services.workspace.open_below`: every
component opened relative to its parent, no symlink followed, ``fstat`` of what was opened)
and bounded read (:func:`~vancetope_rag.services.workspace.read_open_file`: never more than the
size limit plus one byte, one version only): a file that became a symlink, a FIFO or a
device, or vanished, is skipped with its reason; one that kept changing while it was read
fails with ``EXTRACT_CHANGED_WHILE_READ``.

A read that failed for the machine's sake (the ``tesseract`` program missing, the vision model
unreachable, the time limit: :data:`~vancetope_rag.extraction.records.RETRIED_FAILURES`) is
retried by every import, and in between by :meth:`DocumentImporter.retry_due`, which the
background indexer calls each tick: it reads the file again from the folder its import
recorded (:func:`import_origin`) once its back-off (:class:`RetryPolicy`) is over. A failure
of the file (corrupt, encrypted, no text) waits until the file changes. Either way a document
that held the text of a readable version keeps it meanwhile.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
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
from vancetope_rag.extraction.records import ExtractionRecord, RetryPolicy, file_hash
from vancetope_rag.extraction.registry import ExtractorRegistry, UnsupportedTypeError
from vancetope_rag.services.documents import DocumentService, check_path, upsert_action
from vancetope_rag.services.extraction import ExtractionPlan, ExtractionService, FileExtraction
from vancetope_rag.services.workspace import WalkRules, open_below, read_open_file
from vancetope_rag.store.port.shared import content_hash
from vancetope_rag.store.port.types import ImportHead

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
    moved: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass(frozen=True)
class MovedFile:
    """A renamed file: its document moved from ``old`` to ``new`` (both document paths)."""

    old: str
    new: str


@dataclass
class ImportSummary:
    """What an import did: per-action and per-type counts, the files that failed (could not
    be read), were truncated, or were skipped (not documents), with reasons; what a sync
    moved and deleted. A dry run's counts say what the import would do."""

    created: int = 0
    updated: int = 0
    moved: int = 0
    unchanged: int = 0
    skipped_files: list[SkippedFile] = field(default_factory=list)
    #: Imported files whose text is longer than the text limit: indexed only up to it.
    over_limit: list[str] = field(default_factory=list)
    #: The text limit (characters) the import was measured against.
    max_text_chars: int = 0
    #: Files that could not be read, with the reason: documents in state ``failed``, or
    #: kept from an earlier readable version ("needs attention"); a file that vanished
    #: after it was listed changes no document.
    failed_files: list[SkippedFile] = field(default_factory=list)
    #: Files read only in part (a page, slide, sheet or cell budget), with the reason.
    truncated_files: list[SkippedFile] = field(default_factory=list)
    #: Counts by file type (the extension, else the MIME type).
    by_type: dict[str, TypeCounts] = field(default_factory=dict)
    #: Renamed files whose document moved to the new path.
    moved_files: list[MovedFile] = field(default_factory=list)
    #: Documents deleted because their file is gone (a dry run: would be deleted).
    deleted_paths: list[str] = field(default_factory=list)
    #: Documents whose file is gone but that no import recorded as its own (imported before
    #: imports recorded their origin): deleted only by an import that adopts them.
    unadopted: int = 0
    #: Why the documents whose files are gone were not deleted (too many: ``yes`` needed).
    refused: str | None = None
    #: Nothing was written: the counts say what the import would do.
    dry_run: bool = False
    #: Video frames the vision model described (each one call to it; a dry run makes them
    #: too, since it reads every file).
    vision_frames: int = 0

    @property
    def skipped(self) -> int:
        return len(self.skipped_files)

    @property
    def failed(self) -> int:
        return len(self.failed_files)

    @property
    def deleted(self) -> int:
        return 0 if self.refused else len(self.deleted_paths)

    def count(self, kind: str, action: str) -> None:
        counts = self.by_type.setdefault(kind, TypeCounts())
        setattr(counts, action, getattr(counts, action) + 1)
        if action in ("created", "updated", "moved", "unchanged"):
            setattr(self, action, getattr(self, action) + 1)

    def to_json(self) -> dict[str, object]:
        def listed(files: list[SkippedFile]) -> list[dict[str, str]]:
            return [{"path": s.path, "reason": s.reason} for s in files]

        return {
            "dryRun": self.dry_run,
            "created": self.created,
            "updated": self.updated,
            "moved": self.moved,
            "deleted": self.deleted,
            "unchanged": self.unchanged,
            "failed": self.failed,
            "skipped": self.skipped,
            "failedFiles": listed(self.failed_files),
            "truncatedFiles": listed(self.truncated_files),
            "skippedFiles": listed(self.skipped_files),
            "movedFiles": [{"from": m.old, "to": m.new} for m in self.moved_files],
            "deletedPaths": [] if self.refused else list(self.deleted_paths),
            "notDeleted": list(self.deleted_paths) if self.refused else [],
            "refused": self.refused,
            "unadopted": self.unadopted,
            "byType": {k: v.to_json() for k, v in sorted(self.by_type.items())},
            "overLimit": list(self.over_limit),
            "maxTextChars": self.max_text_chars,
            "visionFrames": self.vision_frames,
        }


def import_origin(root: Path, prefix: str) -> str:
    """The key a folder import records on its documents (:attr:`Document.import_origin`):
    the folder's resolved path and the prefix, as JSON (ASCII: a folder name that is not
    valid UTF-8 keeps its escapes)."""
    return json.dumps([os.path.realpath(root), _slashed(prefix)])


def _slashed(prefix: str) -> str:
    return prefix + "/" if prefix and not prefix.endswith("/") else prefix


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


@dataclass
class _Sync:
    """One folder sync: the documents of its key under the prefix, and those whose file
    the listing no longer holds (deleted at the end, unless a renamed file took one)."""

    #: Documents of the key (and, adopting, those without a recorded origin), by path.
    members: dict[str, ImportHead]
    #: Members whose file is not listed, by path: deleted unless moved.
    gone: dict[str, ImportHead]
    #: Documents without a recorded origin whose file is gone, not adopted.
    unadopted: int

    @classmethod
    def start(
        cls,
        heads: Sequence[ImportHead],
        origin: str,
        prefix: str,
        listed: Sequence[ImportSource],
        *,
        adopt: bool,
    ) -> _Sync:
        # a listed file that is skipped (now a symlink, say) still counts as there: a sync
        # deletes only what it is sure is gone
        present = {prefix + s.path for s in listed}
        # Only a document an import wrote has a record of reading a file: the host's and a
        # tool's have none, so adopting never takes one of them.
        imported_unowned = [h for h in heads if h.import_origin is None and h.extraction]
        members = {h.path: h for h in heads if h.import_origin == origin}
        if adopt:
            members.update((h.path, h) for h in imported_unowned)
        gone = {p: h for p, h in members.items() if p not in present}
        unadopted = 0 if adopt else sum(h.path not in present for h in imported_unowned)
        return cls(members, gone, unadopted)

    def take(self, match: Callable[[ImportHead], bool]) -> ImportHead | None:
        """The first gone document that ``match`` accepts, no longer gone (it moves)."""
        for path, head in self.gone.items():
            if match(head):
                del self.gone[path]
                return head
        return None


@dataclass(eq=False, repr=False, kw_only=True)
class DocumentImporter:
    """Creates or updates one document per imported file; a file whose bytes and extraction
    settings are unchanged since it was last read costs a hash, not an extraction."""

    documents: DocumentService
    extractors: ExtractorRegistry
    extraction: ExtractionService
    max_text_chars: int
    max_bytes: int = MAX_IMPORT_BYTES
    #: When machine-side failures are read again in the background.
    retries: RetryPolicy = field(default_factory=RetryPolicy)
    #: Wall clock (epoch seconds) of retry times; replaceable in tests.
    clock: Callable[[], float] = time.time

    def import_directory(
        self,
        tenant_id: str,
        project_id: str,
        root: Path,
        *,
        prefix: str = "documents/",
        sources: Iterable[ImportSource] | None = None,
        prune: bool = True,
        adopt: bool = False,
        yes: bool = False,
        dry_run: bool = False,
        on_file: Callable[[ImportSource], None] | None = None,
    ) -> ImportSummary:
        """Sync the files under ``root`` to the documents ``<prefix><relative path>``.

        Args:
            sources: the listing of ``root`` (:func:`walk_directory`; the CLI lists first
                to size its progress bar); listed here when None.
            prune: delete the documents of this import whose file is gone and move those
                of renamed files; False imports only (what ``import`` did before).
            adopt: count documents without a recorded origin under the prefix (imported
                before imports recorded it) as this import's.
            yes: delete also when that is more than half of this import's documents.
            dry_run: read everything, write nothing: the summary says what would change.
            on_file: called after each file (a progress bar).
        """
        prefix = _slashed(prefix)
        listed = list(walk_directory(root) if sources is None else sources)
        origin = import_origin(root, prefix)
        sync = None
        if prune:
            heads = self.documents.import_heads(tenant_id, project_id, path_prefix=prefix)
            sync = _Sync.start(heads, origin, prefix, listed, adopt=adopt)
        summary = self._run(
            tenant_id, project_id, listed, prefix, origin, sync, dry_run=dry_run, on_file=on_file
        )
        if sync is not None:
            self._prune(tenant_id, project_id, root, prefix, sync, summary, yes=yes)
        return summary

    def import_sources(
        self,
        tenant_id: str,
        project_id: str,
        sources: Iterable[ImportSource],
        *,
        prefix: str = "documents/",
        on_file: Callable[[ImportSource], None] | None = None,
        dry_run: bool = False,
    ) -> ImportSummary:
        """Import ``sources`` one by one (files received another way than from a folder:
        no origin recorded, nothing pruned). A file that cannot be read becomes a document
        in state ``failed`` with the reason; one that is no document at all (a symlink, an
        unsupported type) is skipped with its reason. ``on_file`` is called after each one
        (a progress bar)."""
        return self._run(
            tenant_id,
            project_id,
            sources,
            _slashed(prefix),
            None,
            None,
            dry_run=dry_run,
            on_file=on_file,
        )

    def _run(
        self,
        tenant_id: str,
        project_id: str,
        sources: Iterable[ImportSource],
        prefix: str,
        origin: str | None,
        sync: _Sync | None,
        *,
        dry_run: bool,
        on_file: Callable[[ImportSource], None] | None,
    ) -> ImportSummary:
        summary = ImportSummary(max_text_chars=self.max_text_chars, dry_run=dry_run)
        plan = self.extraction.plan(tenant_id, project_id)
        run = _Run(tenant_id, project_id, prefix, origin, sync, plan, summary, dry_run)
        for source in sources:
            self._import_source(run, source)
            if on_file is not None:
                on_file(source)
        return summary

    def retry_due(self, tenant_id: str, project_id: str) -> RetrySummary:
        """Read again the files whose last read failed for the machine's sake and whose
        back-off is over, each from the folder its import recorded; no new import needed.

        A file read now replaces its document's text (or the kept text, and the document
        is indexed again); one that fails again backs off further; one no longer there (or
        whose folder is gone) stops being retried until an import: its document is kept,
        and the next import of the folder prunes it. Never raises for one file.
        """
        now = self.clock()
        due = [
            head
            for head in self.documents.read_failures(tenant_id, project_id)
            if head.import_origin is not None
            and self.retries.due(ExtractionRecord.from_json(head.extraction), now)
        ]
        result = RetrySummary()
        if not due:
            return result
        plan = self.extraction.plan(tenant_id, project_id)
        for head in due:
            source = _origin_source(head)
            if source is None:
                continue
            root, prefix = source
            run = _Run(
                tenant_id, project_id, prefix, head.import_origin, None, plan, result.summary, False
            )
            rel = head.path[len(prefix) :]
            seen = len(result.summary.failed_files) + len(result.summary.skipped_files)
            self._import_source(run, ImportSource(rel, root=root))
            result.tried += 1
            listed = [*result.summary.failed_files, *result.summary.skipped_files]
            reasons = [f.reason for f in listed[seen:]]
            self._stop_if_unread(tenant_id, project_id, head, reasons, result)
        return result

    def _stop_if_unread(
        self,
        tenant_id: str,
        project_id: str,
        head: ImportHead,
        reasons: list[str],
        result: RetrySummary,
    ) -> None:
        """The retry wrote nothing (the file or its folder is gone, or no longer a regular
        file): retried no more in the background, so no tick reads it again and again."""
        doc = self.documents.get_by_path(tenant_id, project_id, head.path)
        if doc is None or doc.extraction != head.extraction:
            return
        record = ExtractionRecord.from_json(doc.extraction)
        if record is None:
            return
        reason = reasons[0] if reasons else "the file cannot be read from its folder"
        stopped = dataclasses.replace(record, retry_at=None)
        error = f"{record.error or ''}; not read again in the background: {reason}"
        self.documents.replace_extraction(doc, stopped.to_json(), error)
        result.stopped += 1

    def _prune(
        self,
        tenant_id: str,
        project_id: str,
        root: Path,
        prefix: str,
        sync: _Sync,
        summary: ImportSummary,
        *,
        yes: bool,
    ) -> None:
        """Delete the documents whose file is gone (not taken by a move), their chunks at
        once; refuse when that is more than half of the key's documents and not ``yes``."""
        summary.unadopted = sync.unadopted
        doomed = list(sync.gone.values())
        summary.deleted_paths = [h.path for h in doomed]
        total = len(sync.members)
        if doomed and 2 * len(doomed) > total and not yes:
            summary.refused = (
                f"{len(doomed)} of the {total} documents imported from {str(root)!r} under "
                f"{prefix!r} would be deleted (their files are gone), more than half: nothing "
                "was deleted. Check the folder (unmounted? the wrong one?), see them with "
                "--dry-run, and run again with --yes to delete them"
            )
            return
        if summary.dry_run:
            return
        for head in doomed:
            self.documents.delete(tenant_id, project_id, head.id)

    def _import_source(self, run: _Run, source: ImportSource) -> None:
        mime = guess_mime_type(source.path)
        kind = file_type(source.path, mime)
        if source.skip_reason is not None:
            run.summary.skipped_files.append(SkippedFile(source.path, source.skip_reason))
            run.summary.count(kind, "skipped")
            return
        try:
            self._import_one(run, source, mime, kind)
        except (RagError, OSError) as exc:
            reason = exc.message if isinstance(exc, RagError) else str(exc)
            run.summary.skipped_files.append(SkippedFile(source.path, reason or "unknown"))
            run.summary.count(kind, "skipped")

    def _import_one(self, run: _Run, source: ImportSource, mime: str, kind: str) -> None:
        path = check_path(run.prefix + source.path)
        existing = self.documents.get_by_path(run.tenant_id, run.project_id, path)
        previous = ExtractionRecord.from_json(existing.extraction) if existing else None
        summary = run.summary
        try:
            data = source.read(self.max_bytes)
        except DocumentNotFoundError as exc:  # gone since it was listed: nothing to write
            summary.failed_files.append(
                SkippedFile(source.path, f"{exc.message}; its document, if any, is kept")
            )
            summary.count(kind, "failed")
            return
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
            digest = file_hash(data)
            if existing is not None and self.extraction.is_current(
                previous, digest, mime, source.path, run.plan
            ):
                assert previous is not None
                if not run.dry_run:  # the key's own now; a failure's error kept in view
                    self.documents.record_import(
                        existing,
                        import_origin=run.origin,
                        extraction_error=(
                            (existing.extraction_error or previous.error or previous.error_code)
                            if previous.failed
                            else None
                        ),
                    )
                self._note(source.path, kind, previous, summary, "unchanged")
                if len(existing.content) > self.max_text_chars:
                    summary.over_limit.append(source.path)
                return
            moved = None if existing else self._moved_same_bytes(run, source, path, mime, digest)
            if moved is not None:
                self._note(source.path, kind, moved, summary, "moved")
                return
            read = self.extraction.extract(data, path=source.path, mime=mime, plan=run.plan)
            if read.text is not None:
                summary.vision_frames += read.text.vision_frames
            if isinstance(read.error, UnsupportedTypeError):
                raise read.error
        if read.text is None:
            record = self.retries.schedule(
                read.record, previous, self.clock(), can_retry=run.origin is not None
            )
            read = dataclasses.replace(read, record=record)
            if not run.dry_run:
                self.documents.record_unreadable(
                    run.tenant_id,
                    run.project_id,
                    path,
                    mime_type=_stored_mime(mime),
                    extraction=read.record.to_json(),
                    reason=read.record.error or "unreadable",
                    import_origin=run.origin,
                )
            self._note(source.path, kind, read.record, summary, "failed")
            return
        text = read.text.text
        if existing is None and run.sync is not None:
            hashed = content_hash(text)
            head = run.sync.take(lambda h: h.content_hash == hashed)
            if head is not None:
                self._move(run, head, path, mime, read.record.to_json())
                self._note(source.path, kind, read.record, summary, "moved")
                return
        if run.dry_run:
            action = upsert_action(existing, text, _stored_mime(mime))
        else:
            action = self.documents.upsert_by_path(
                run.tenant_id,
                run.project_id,
                path,
                text,
                mime_type=_stored_mime(mime),
                extraction=read.record.to_json(),
                import_origin=run.origin,
            ).action
        self._note(source.path, kind, read.record, summary, action)
        if read.text.chars > self.max_text_chars:
            summary.over_limit.append(source.path)

    def _moved_same_bytes(
        self, run: _Run, source: ImportSource, path: str, mime: str, digest: str
    ) -> ExtractionRecord | None:
        """A new path holding the very bytes a gone document was last read from (and read
        alike here): that document moves, with no extraction; its record is returned."""
        if run.sync is None:
            return None

        def same(head: ImportHead) -> bool:
            record = ExtractionRecord.from_json(head.extraction)
            return (
                record is not None
                and not record.failed
                and self.extraction.is_current(record, digest, mime, source.path, run.plan)
            )

        head = run.sync.take(same)
        if head is None:
            return None
        self._move(run, head, path, mime, head.extraction)
        return ExtractionRecord.from_json(head.extraction)

    def _move(self, run: _Run, head: ImportHead, path: str, mime: str, record: str | None) -> None:
        run.summary.moved_files.append(MovedFile(head.path, path))
        if run.dry_run:
            return
        doc = self.documents.get(run.tenant_id, run.project_id, head.id)
        self.documents.move(
            doc, path, mime_type=_stored_mime(mime), extraction=record, import_origin=run.origin
        )

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


@dataclass
class RetrySummary:
    """What one :meth:`DocumentImporter.retry_due` pass did."""

    #: Files read again.
    tried: int = 0
    #: Files no longer retried in the background (gone from their folder).
    stopped: int = 0
    #: The files' outcomes, as an import's summary counts them.
    summary: ImportSummary = field(default_factory=ImportSummary)

    @property
    def read(self) -> int:
        """Files read now (their documents created, updated or unchanged)."""
        return self.summary.created + self.summary.updated + self.summary.unchanged


def _origin_source(head: ImportHead) -> tuple[Path, str] | None:
    """The folder and prefix a document's import recorded, when its path lies under it."""
    try:
        root, prefix = json.loads(head.import_origin or "")
    except (ValueError, TypeError):
        return None
    if not isinstance(root, str) or not isinstance(prefix, str):
        return None
    if not head.path.startswith(prefix) or len(head.path) == len(prefix):
        return None
    return Path(root), prefix


@dataclass(frozen=True)
class _Run:
    """What every file of one import shares."""

    tenant_id: str
    project_id: str
    prefix: str
    origin: str | None
    sync: _Sync | None
    plan: ExtractionPlan
    summary: ImportSummary
    dry_run: bool


def _stored_mime(mime: str) -> str:
    """Extracted text (a PDF's, a notebook's) is stored as text; the indexer reads text."""
    return mime if is_textual(mime) else "text/plain"
