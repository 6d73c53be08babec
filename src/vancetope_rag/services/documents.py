"""DocumentService: project documents and the dirty-flag maintenance of spec §4.2.

Every change that queues a document for the indexer also re-queues it for a running rebuild
(in the same transaction where the store has them), so the new generation a rebuild fills
never misses an edit made while it runs; a rebuild checks again before it switches.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vancetope_rag.domain.eligibility import guess_mime_type, is_rag_eligible
from vancetope_rag.domain.host_metadata import check_host_metadata
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Document, IndexState, RagState
from vancetope_rag.domain.texts import check_label, has_lone_surrogate
from vancetope_rag.errors import DocumentNotFoundError, InvalidInputError
from vancetope_rag.extraction.records import ExtractionRecord
from vancetope_rag.store.port import ChunkStore, ControlStore, RebuildStore
from vancetope_rag.store.port.types import (
    UNSET,
    DocumentChange,
    ImportHead,
    NewDocument,
    RagScope,
    _Unset,
)

RagOverride = Literal["auto", "on", "off"]
_OVERRIDES: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def parse_override(value: object) -> bool | None:
    """Wire format ``"auto" | "on" | "off"`` (spec §8.1) → ``None | True | False``."""
    if isinstance(value, str) and value.strip().lower() in _OVERRIDES:
        return _OVERRIDES[value.strip().lower()]
    raise InvalidInputError(f"ragEnabled must be 'auto', 'on' or 'off', got {value!r}")


def check_path(path: object) -> str:
    """A document path: relative, '/'-separated, no '..', no empty parts, valid Unicode."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInputError("a document path is required, e.g. documents/notes/topic.md")
    if len(path) > 1024:
        raise InvalidInputError("document path is longer than 1024 characters")
    if "\x00" in path or "\\" in path:
        raise InvalidInputError(f"document path {path!r} contains NUL or backslash")
    if has_lone_surrogate(path):
        raise InvalidInputError(f"document path {path!r} is not valid Unicode (lone surrogate)")
    if path.startswith("/"):
        raise InvalidInputError(f"document path {path!r} must be relative to the project")
    norm = posixpath.normpath(path)
    if norm != path.rstrip("/") or norm.startswith("..") or "/../" in f"/{norm}/":
        raise InvalidInputError(f"document path {path!r} is not normalised; use {norm!r}")
    return path


UpsertAction = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True)
class UpsertResult:
    document: Document
    action: UpsertAction


def upsert_action(existing: Document | None, content: str, mime_type: str | None) -> UpsertAction:
    """What :meth:`DocumentService.upsert_by_path` does with this text (an import's dry run
    asks without writing)."""
    if existing is None:
        return "created"
    same_mime = mime_type is None or mime_type == existing.mime_type
    return "unchanged" if existing.content == content and same_mime else "updated"


class DocumentService:
    """Creates, updates and deletes documents; keeps ``ragDirty`` right (spec §4.2)."""

    def __init__(
        self, *, control: ControlStore, chunks: ChunkStore, rebuild_store: RebuildStore
    ) -> None:
        self.control = control
        self.chunks = chunks
        self.rebuild_store = rebuild_store
        #: Called with (tenant, project) once documents of that project were queued for the
        #: indexer and committed: the app wakes its scheduler, so a saved document is
        #: searchable within seconds, not at the next tick.
        self.on_queued: Callable[[str, str], None] | None = None

    def _queued(self, tenant_id: str, project_id: str) -> None:
        if self.on_queued is not None:
            self.on_queued(tenant_id, project_id)

    def get(self, tenant_id: str, project_id: str, document_id: str) -> Document:
        if not isinstance(document_id, str) or not document_id:
            shown = f"{document_id!r:.80}"
            raise InvalidInputError(f"a document id must be a non-empty string, got {shown}")
        doc = self.control.get_document(tenant_id, project_id, document_id)
        if doc is None:
            raise DocumentNotFoundError(
                f"no document {document_id!r} in project {project_id!r}",
                tenant_id=tenant_id,
                project_id=project_id,
                document_id=document_id,
            )
        return doc

    def get_by_path(self, tenant_id: str, project_id: str, path: str) -> Document | None:
        return self.control.get_document_by_path(tenant_id, project_id, path)

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]:
        return self.control.list_documents(tenant_id, project_id, path_prefix=path_prefix)

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        """The documents under ``path_prefix`` without their texts (an import's sync)."""
        return self.control.import_heads(tenant_id, project_id, path_prefix=path_prefix)

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        """The documents whose file's last read failed, without their texts."""
        return self.control.read_failures(tenant_id, project_id)

    def replace_extraction(self, doc: Document, extraction: str, extraction_error: str) -> Document:
        """Store a new record of a failed read (and its reason) on ``doc``, changing nothing
        else: no text, no state, nothing queued."""
        change = DocumentChange(extraction=extraction, extraction_error=extraction_error)
        return self.control.update_document(doc.tenant_id, doc.project_id, doc.id, change)

    def list_failures(self, tenant_id: str, project_id: str) -> list[Document]:
        """Documents whose last indexing pass failed: failed for good, or waiting to retry."""
        waiting = (IndexState.FAILED, IndexState.PENDING)
        return [
            d
            for d in self.list_documents(tenant_id, project_id)
            if d.index_last_error and d.index_state in waiting
        ]

    @staticmethod
    def is_rag_eligible(doc: Document) -> bool:
        return is_rag_eligible(doc.path, doc.mime_type, doc.rag_enabled)

    def create(
        self,
        tenant_id: str,
        project_id: str,
        path: str,
        content: str,
        *,
        mime_type: str | None = None,
        summary: str | None = None,
        rag_enabled: bool | None = None,
        extraction: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        import_origin: str | None = None,
    ) -> Document:
        path = check_path(path)
        meta = check_host_metadata(metadata)
        if not isinstance(content, str):
            raise InvalidInputError("document content must be text")
        if has_lone_surrogate(content):
            raise InvalidInputError(
                f"the content of {path!r} contains a lone surrogate (an unpaired UTF-16 half), "
                "which is not valid Unicode text"
            )
        if mime_type is not None:
            check_label(mime_type, "mimeType", 255)
        mime = mime_type or guess_mime_type(path)
        dirty = is_rag_eligible(path, mime, rag_enabled)
        with self.control.transaction():
            doc = self.control.insert_document(
                NewDocument(
                    tenant_id=tenant_id,
                    project_id=project_id,
                    path=path,
                    mime_type=mime,
                    content=content,
                    summary=summary,
                    rag_enabled=rag_enabled,
                    rag_dirty=dirty,
                    extraction=extraction,
                    metadata=meta,
                    import_origin=import_origin,
                )
            )
            if dirty:
                self.rebuild_store.requeue_documents(tenant_id, project_id, [doc.id])
        if dirty:
            self._queued(tenant_id, project_id)
        return doc

    def update(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        *,
        content: str | _Unset = UNSET,
        path: str | _Unset = UNSET,
        mime_type: str | _Unset = UNSET,
        summary: str | _Unset | None = UNSET,
        rag_enabled: bool | _Unset | None = UNSET,
        extraction: str | _Unset | None = UNSET,
        metadata: Mapping[str, Any] | _Unset = UNSET,
        import_origin: str | _Unset | None = UNSET,
        extraction_error: str | _Unset | None = UNSET,
    ) -> Document:
        """Update fields; sets ``ragDirty`` when content, path, summary, metadata or override
        change for a document that is (or was) eligible. New content without an
        ``extraction`` record is the host's: the file's record, the import it came from and
        the error of its last read go (no file was read; a folder sync never deletes what the
        host wrote)."""
        if not isinstance(metadata, _Unset):
            metadata = check_host_metadata(metadata)
        if not isinstance(summary, str | _Unset) and summary is not None:
            raise InvalidInputError(
                f"a summary must be text or None (to remove it), got {type(summary).__name__}"
            )
        before = self.get(tenant_id, project_id, document_id)
        if (
            isinstance(extraction, _Unset)
            and not isinstance(content, _Unset)
            and content != before.content
        ):
            extraction = None if before.extraction is not None else UNSET
            import_origin = None if before.import_origin is not None else UNSET
            extraction_error = None if before.extraction_error is not None else UNSET
        if not isinstance(path, _Unset):
            path = check_path(path)
        for name, value in (("content", content), ("summary", summary)):
            if isinstance(value, str) and has_lone_surrogate(value):
                raise InvalidInputError(f"the {name} contains a lone surrogate (not valid Unicode)")
        changed = (
            (not isinstance(content, _Unset) and content != before.content)
            or (not isinstance(path, _Unset) and path != before.path)
            or (not isinstance(mime_type, _Unset) and mime_type != before.mime_type)
            or (not isinstance(summary, _Unset) and summary != before.summary)
            or (not isinstance(metadata, _Unset) and metadata != before.metadata)
            or (not isinstance(rag_enabled, _Unset) and rag_enabled != before.rag_enabled)
        )
        # the last indexing error was about the text the document held: new text (a new
        # read of a scan that failed) waits for its own attempt without it
        new_text = not isinstance(content, _Unset) and content != before.content
        stale_error = None if new_text and before.index_last_error is not None else UNSET
        after_path = before.path if isinstance(path, _Unset) else path
        after_mime = before.mime_type if isinstance(mime_type, _Unset) else mime_type
        after_override = before.rag_enabled if isinstance(rag_enabled, _Unset) else rag_enabled
        relevant = self.is_rag_eligible(before) or is_rag_eligible(
            after_path, after_mime, after_override
        )
        with self.control.transaction():
            doc = self.control.update_document(
                tenant_id,
                project_id,
                document_id,
                DocumentChange(
                    content=content,
                    path=path,
                    mime_type=mime_type,
                    summary=summary,
                    rag_enabled=rag_enabled,
                    mark_dirty=changed and relevant,
                    extraction=extraction,
                    metadata=metadata,
                    import_origin=import_origin,
                    extraction_error=extraction_error,
                    index_last_error=stale_error,
                ),
            )
            if changed and relevant:
                self.rebuild_store.requeue_documents(tenant_id, project_id, [document_id])
        if changed and relevant:
            self._queued(tenant_id, project_id)
        return doc

    def upsert_by_path(
        self,
        tenant_id: str,
        project_id: str,
        path: str,
        content: str,
        *,
        mime_type: str | None,
        extraction: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        import_origin: str | _Unset | None = UNSET,
    ) -> UpsertResult:
        """Create the document at ``path`` or update it if its content (or the host's
        ``metadata``; None keeps the stored one) changed (imports, ``document_saved``).

        ``extraction`` is the import's record of reading the file; it replaces the stored one
        and clears the error of an earlier read. ``import_origin`` is the import it comes
        from (:attr:`Document.import_origin`). Same content under a record whose sections
        differ still queues the document: its chunks carry the sections."""
        if not isinstance(content, str):
            raise InvalidInputError("document content must be text")
        if mime_type is not None:
            check_label(mime_type, "mimeType", 255)
        meta = None if metadata is None else check_host_metadata(metadata)
        existing = self.get_by_path(tenant_id, project_id, check_path(path))
        action = upsert_action(existing, content, mime_type)
        if existing is not None and action == "unchanged" and meta not in (None, existing.metadata):
            action = "updated"  # the host's metadata changed: its chunks carry it
        if existing is None:
            origin = None if isinstance(import_origin, _Unset) else import_origin
            doc = self.create(
                tenant_id,
                project_id,
                path,
                content,
                mime_type=mime_type,
                extraction=extraction,
                metadata=meta,
                import_origin=origin,
            )
            return UpsertResult(doc, action)
        if action == "unchanged":
            if extraction is not None and extraction != existing.extraction:
                doc = self._replace_record(existing, extraction, import_origin)
            else:
                doc = self.record_import(existing, import_origin=import_origin)
            return UpsertResult(doc, action)
        read = extraction is not None
        doc = self.update(
            tenant_id,
            project_id,
            existing.id,
            content=content,
            mime_type=UNSET if mime_type is None else mime_type,
            extraction=extraction if read else UNSET,
            metadata=UNSET if meta is None else meta,
            import_origin=import_origin,
            extraction_error=None if read else UNSET,
        )
        return UpsertResult(doc, action)

    def record_import(
        self,
        doc: Document,
        *,
        import_origin: str | _Unset | None = UNSET,
        extraction_error: str | _Unset | None = UNSET,
    ) -> Document:
        """Note the import a document's file was read by (and the error of that read) when
        either differs from what the document holds; nothing is queued."""
        same_origin = isinstance(import_origin, _Unset) or import_origin == doc.import_origin
        same_error = (
            isinstance(extraction_error, _Unset) or extraction_error == doc.extraction_error
        )
        if same_origin and same_error:
            return doc
        change = DocumentChange(
            import_origin=UNSET if same_origin else import_origin,
            extraction_error=UNSET if same_error else extraction_error,
        )
        return self.control.update_document(doc.tenant_id, doc.project_id, doc.id, change)

    def move(
        self,
        doc: Document,
        path: str,
        *,
        mime_type: str,
        extraction: str | None,
        import_origin: str | None,
    ) -> Document:
        """A renamed file's document: the same document (id, text, summary) at its new path,
        queued so its chunks carry the path; the embedding cache holds their vectors."""
        return self.update(
            doc.tenant_id,
            doc.project_id,
            doc.id,
            path=path,
            mime_type=mime_type,
            extraction=extraction,
            import_origin=import_origin,
            extraction_error=None,
        )

    def _replace_record(
        self, doc: Document, extraction: str, import_origin: str | _Unset | None = UNSET
    ) -> Document:
        """Store a new extraction record for unchanged text (the error of an earlier read
        goes); queue the document when the sections changed (or it was failed: its file is
        readable now)."""
        before = ExtractionRecord.from_json(doc.extraction)
        after = ExtractionRecord.from_json(extraction)
        requeue = (
            before is None
            or after is None
            or before.sections != after.sections
            or doc.index_state is IndexState.FAILED
        ) and self.is_rag_eligible(doc)
        with self.control.transaction():
            updated = self.control.update_document(
                doc.tenant_id,
                doc.project_id,
                doc.id,
                DocumentChange(
                    extraction=extraction,
                    mark_dirty=requeue,
                    import_origin=import_origin,
                    extraction_error=None,
                ),
            )
            if requeue:
                self.rebuild_store.requeue_documents(doc.tenant_id, doc.project_id, [doc.id])
        if requeue:
            self._queued(doc.tenant_id, doc.project_id)
        return updated

    def record_unreadable(
        self,
        tenant_id: str,
        project_id: str,
        path: str,
        *,
        mime_type: str,
        extraction: str,
        reason: str,
        import_origin: str | _Unset | None = UNSET,
    ) -> Document:
        """The document for a file that could not be read, with ``reason`` kept as its
        ``extraction_error`` until an import reads the file again.

        A new document (or one that never had text) is ``failed`` with the reason, no
        content and no chunks, so the status, the REST API and the UI show it. One that
        held the text of an earlier, readable version keeps it, its chunks and its index
        state (a reindex indexes that text): a file caught half-written or replaced by a
        broken copy loses nothing, and the status lists it under "needs attention"."""
        path = check_path(path)
        check_label(mime_type, "mimeType", 255)
        with self.control.transaction():
            existing = self.get_by_path(tenant_id, project_id, path)
            if existing is None:
                return self.control.insert_document(
                    NewDocument(
                        tenant_id=tenant_id,
                        project_id=project_id,
                        path=path,
                        mime_type=mime_type,
                        content="",
                        extraction=extraction,
                        failed_reason=reason,
                        import_origin=None if isinstance(import_origin, _Unset) else import_origin,
                        extraction_error=reason,
                    )
                )
            if not existing.content:
                return self.control.update_document(
                    tenant_id,
                    project_id,
                    existing.id,
                    DocumentChange(
                        mime_type=mime_type,
                        extraction=extraction,
                        failed_reason=reason,
                        import_origin=import_origin,
                        extraction_error=reason,
                    ),
                )
            before = ExtractionRecord.from_json(existing.extraction)
            after = ExtractionRecord.from_json(extraction)
            if before is not None and after is not None:  # the kept text's sections stay
                kept = dataclasses.replace(
                    after, sections=before.sections, content_hash=before.content_hash
                )
                extraction = kept.to_json()
            return self.control.update_document(
                tenant_id,
                project_id,
                existing.id,
                DocumentChange(
                    extraction=extraction,
                    import_origin=import_origin,
                    extraction_error=f"{reason} (the document keeps the text of its last "
                    "readable version)",
                ),
            )

    def set_rag_enabled_override(
        self, tenant_id: str, project_id: str, document_id: str, value: RagOverride | str
    ) -> Document:
        """Spec §8.1 tristate: ``auto`` (filter decides), ``on`` (always), ``off`` (never)."""
        override = parse_override(value)
        self.get(tenant_id, project_id, document_id)
        with self.control.transaction():
            doc = self.control.update_document(
                tenant_id,
                project_id,
                document_id,
                DocumentChange(rag_enabled=override, mark_dirty=True),
            )
            self.rebuild_store.requeue_documents(tenant_id, project_id, [document_id])
        self._queued(tenant_id, project_id)
        return doc

    def set_summary(
        self, tenant_id: str, project_id: str, document_id: str, summary: str | None
    ) -> Document:
        """Store a summary (None removes it) and, when it changed for an eligible document,
        queue the document so its summary chunk is written (spec §4.2), in one step."""
        return self.update(tenant_id, project_id, document_id, summary=summary)

    def set_summary_by_path(
        self, tenant_id: str, project_id: str, path: str, summary: str | None
    ) -> Document:
        """:meth:`set_summary` for the document at ``path`` (the host's ``summary_saved``).

        Raises:
            DocumentNotFoundError: No document has that path (save the document first).
            InvalidInputError: A bad path, or a summary that is not text or None.
        """
        doc = self.get_by_path(tenant_id, project_id, check_path(path))
        if doc is None:
            raise DocumentNotFoundError(
                f"no document at {path!r} in project {project_id!r}: save the document "
                "(document_saved) before its summary",
                tenant_id=tenant_id,
                project_id=project_id,
            )
        return self.set_summary(tenant_id, project_id, doc.id, summary)

    def mark_rag_dirty(self, tenant_id: str, project_id: str, document_id: str) -> Document:
        """Queue one document for the indexer (the summary driver calls this, spec §4.2)."""
        if not self.mark_dirty(tenant_id, project_id, [document_id]):
            raise DocumentNotFoundError(
                f"no document {document_id!r} in project {project_id!r}", document_id=document_id
            )
        return self.get(tenant_id, project_id, document_id)

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: list[str]) -> int:
        """Queue documents for the indexer and for a running rebuild."""
        with self.control.transaction():
            marked = self.control.mark_dirty(tenant_id, project_id, document_ids)
            self.rebuild_store.requeue_documents(tenant_id, project_id, document_ids)
        if marked:
            self._queued(tenant_id, project_id)
        return marked

    def reindex_candidates(self, tenant_id: str, project_id: str) -> list[str]:
        """Ids of every eligible document (and of every one that may still have chunks)."""
        return [
            d.id
            for d in self.rebuild_store.document_heads(tenant_id, project_id)
            if is_rag_eligible(d.path, d.mime_type, d.rag_enabled) or d.indexed_at is not None
        ]

    def mark_all_for_reindex(self, tenant_id: str, project_id: str) -> int:
        """Queue every eligible document (and every one that may still have chunks)."""
        ids = self.reindex_candidates(tenant_id, project_id)
        return self.mark_dirty(tenant_id, project_id, ids)

    def delete(self, tenant_id: str, project_id: str, document_id: str) -> bool:
        """Delete the document and, in the same step, its chunks in ``_documents`` — the live
        generation and a rebuild's new one — and its place in a rebuild's queue."""
        with self.control.transaction():
            self._remove_chunks(tenant_id, project_id, document_id)
            for m in self.rebuild_store.active_rebuilds(tenant_id, project_id):
                self.rebuild_store.remove_items(m.id, [document_id])
            return self.control.delete_document(tenant_id, project_id, document_id)

    def delete_paths(self, tenant_id: str, project_id: str, paths: Sequence[str]) -> list[Document]:
        """Delete the documents at ``paths`` (their chunks in the same step); every path is
        checked first, so a path that names no document deletes nothing at all."""
        found: list[Document] = []
        missing: list[str] = []
        for path in dict.fromkeys(paths):
            doc = self.get_by_path(tenant_id, project_id, check_path(path))
            if doc is None:
                missing.append(path)
            else:
                found.append(doc)
        if missing:
            shown = ", ".join(repr(p) for p in missing)
            raise DocumentNotFoundError(
                f"no document at {shown} in project {project_id!r}; nothing was deleted "
                "(`documents list` shows the paths)",
                tenant_id=tenant_id,
                project_id=project_id,
            )
        for doc in found:
            self.delete(tenant_id, project_id, doc.id)
        return found

    def _remove_chunks(self, tenant_id: str, project_id: str, document_id: str) -> None:
        """The document's chunks in ``_documents``: the live generation and a rebuild's."""
        for rag in self.rebuild_store.rag_generations(tenant_id, project_id, DEFAULT_RAG_NAME):
            if rag.state is not RagState.RETIRED:
                self.chunks.remove_by_source(RagScope.of(rag), document_id)
