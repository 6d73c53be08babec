"""Copying one store into another through the ports, without re-embedding
(``vancetope-rag copy --from … --to …``): how a user moves from the embedded store to a
production one.

What is copied, for every project selected (``--tenant`` / ``--project``): the project, its
settings and its tenant's, the live generation of each RAG of the catalog (name, id,
generation, embedding provider, model and dimension, chunking), the chunks of each with their
vectors, and the documents with their ids, texts, versions, hashes and index states. A
document indexed at the source is indexed at the target, with the same chunks. The embedding
cache is copied by a whole-store copy only: it is shared by every tenant, and its vectors are
no business of a store that receives one tenant.

What is not: retired generations and shadows left by ended rebuilds (readers never see them),
the history of ended rebuilds, and claims. A document a worker holds at the source is queued
at the target (its chunks may be older than its text), so the target's indexer does it again.
A project with a rebuild in progress is refused: the copy would have to choose between the
old model's live chunks and the half-filled shadow; wait for the rebuild or cancel it.

**Safe to run again.** Every record keeps its id. One already at the target is left alone
when it is the source's (a copy that ran before, or was interrupted) and stops the copy with
a :class:`~vancetope_rag.errors.CopyConflictError` when it is something else: nothing is ever
overwritten. Chunks go source by source with ``replace_source``, before the documents of their
project, so a document is never indexed at the target without its chunks; a source whose
chunks at the target are not the source's exactly (an interrupted write) is written again.
Running the copy again after a crash completes it.

Memory is bounded by ``batch_size``: documents, chunk sources and cache entries are read and
written that many at a time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TypeVar

from vancetope_rag.domain.records import (
    Chunk,
    Document,
    IndexState,
    IndexStatus,
    Project,
    RagRecord,
    RagState,
)
from vancetope_rag.domain.wire import camel_json
from vancetope_rag.errors import CopyConflictError, InvalidInputError, RebuildRunningError
from vancetope_rag.store.port import Store
from vancetope_rag.store.port.types import RagScope

__all__ = ["CopyCounts", "CopyReport", "CopySelection", "StoreCopier"]

T = TypeVar("T")

#: The RAG catalog fields two stores must agree on for a RAG to be "the same" (the creation
#: time is left out: stores keep it at different precisions).
_RAG_FIELDS = (
    "name",
    "embedding_provider",
    "embedding_model",
    "embedding_dimension",
    "chunk_size",
    "chunk_overlap",
    "title",
    "description",
    "generation",
    "replaces",
    "embedding_profile",
)
#: What makes a document the same document (its index state may have moved on at the target).
_DOCUMENT_FIELDS = (
    "path",
    "mime_type",
    "content_hash",
    "summary",
    "rag_enabled",
    "extraction",
    "import_origin",
    "extraction_error",
)


def _batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _differs(a: object, b: object, names: Iterable[str]) -> list[str]:
    return [n for n in names if getattr(a, n) != getattr(b, n)]


@dataclass(frozen=True, slots=True)
class CopySelection:
    """Which projects a copy takes: every one, a tenant's, or projects with one id."""

    tenant_id: str | None = None
    project_id: str | None = None

    @property
    def everything(self) -> bool:
        return self.tenant_id is None and self.project_id is None

    def takes(self, tenant_id: str, project_id: str | None) -> bool:
        """Is this scope (a project, or a tenant's own with ``project_id`` None) selected?"""
        if self.tenant_id is not None and tenant_id != self.tenant_id:
            return False
        return project_id is None or self.project_id in (None, project_id)

    def describe(self) -> str:
        if self.everything:
            return "every tenant and project"
        tenant = f"tenant {self.tenant_id!r}" if self.tenant_id else "every tenant"
        return f"{tenant}, " + (f"project {self.project_id!r}" if self.project_id else "all")


@dataclass(slots=True)
class CopyCounts:
    """How many records of each kind."""

    projects: int = 0
    settings: int = 0
    rags: int = 0
    documents: int = 0
    chunks: int = 0
    cached_embeddings: int = 0

    def to_json(self) -> dict[str, int]:
        return camel_json(self)

    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))


@dataclass(slots=True)
class CopyReport:
    """What a copy found at the source, wrote to the target, and found there already."""

    dry_run: bool
    #: What the source holds within the selection.
    found: CopyCounts = field(default_factory=CopyCounts)
    #: Written to the target by this run (0 everywhere for a dry run).
    written: CopyCounts = field(default_factory=CopyCounts)
    #: Already at the target as the source has it (an earlier or interrupted copy).
    present: CopyCounts = field(default_factory=CopyCounts)
    #: Documents a worker held at the source: queued for the target's indexer.
    requeued: int = 0
    #: Whether the embedding cache was part of the copy (whole-store copies only).
    cache_copied: bool = False
    #: The target's indexes after ``initialize`` (an Atlas search index may still build).
    indexes: list[IndexStatus] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "dryRun": self.dry_run,
            "found": self.found.to_json(),
            "written": self.written.to_json(),
            "present": self.present.to_json(),
            "requeuedDocuments": self.requeued,
            "cacheCopied": self.cache_copied,
            "indexesNotReady": [f"{s.collection}/{s.name}" for s in self.indexes if not s.ready],
        }


class StoreCopier:
    """Copies the selected projects (and, for a whole store, the embedding cache) from
    ``source`` to ``target`` through the store ports only, so any pair of stores works.

    Args:
        source: the store read from (never written).
        target: the store written to, initialized by :meth:`run` (None: a dry run only,
            which reads the source alone).
        selection: which projects to copy.
        batch_size: documents, chunk sources or cache entries read and written at a time.
        progress: called with each progress line (the CLI prints them on stderr): one per
            step, and within a RAG's chunks or a project's documents the last batch's and
            at most one per ``progress_every_s`` of ``monotonic``.
    """

    def __init__(
        self,
        source: Store,
        target: Store | None,
        *,
        selection: CopySelection | None = None,
        batch_size: int = 100,
        progress: Callable[[str], None] | None = None,
        progress_every_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_size < 1:
            raise InvalidInputError("the batch size must be at least 1")
        self.source = source
        self._target = target
        self.selection = selection or CopySelection()
        self.batch_size = batch_size
        self._say = progress or (lambda _line: None)
        self._every_s = progress_every_s
        self._monotonic = monotonic
        self._last_said = -math.inf

    def _tell(self, line: str, *, done: bool) -> None:
        """A progress line of a long step: the last one, and at most one per interval."""
        now = self._monotonic()
        if done or now - self._last_said >= self._every_s:
            self._last_said = now
            self._say(line)

    @property
    def target(self) -> Store:
        if self._target is None:
            raise InvalidInputError("only a dry run goes without a target store")
        return self._target

    # -- the whole run -------------------------------------------------------------------------

    def run(self, *, dry_run: bool = False) -> CopyReport:
        """Copy (or with ``dry_run`` only count) everything selected; see the module."""
        report = CopyReport(dry_run=dry_run, cache_copied=self.selection.everything)
        projects = self._projects()
        rags = {(p.tenant_id, p.project_id): self._live_rags(p) for p in projects}
        scopes = self._settings_scopes(projects)
        if dry_run:
            self._count(report, projects, rags, scopes)
            return report
        dimensions = {r.embedding_dimension for found in rags.values() for r in found}
        self._say(f"preparing the target ({len(dimensions)} embedding dimension(s))")
        report.indexes = self.target.initialize(dimensions=sorted(dimensions))
        self._copy_settings(report, scopes)
        for project in projects:
            self._copy_project(report, project, rags[(project.tenant_id, project.project_id)])
        if self.selection.everything:
            self._copy_cache(report)
        return report

    def _projects(self) -> list[Project]:
        sel = self.selection
        found = self.source.control.list_projects(tenant_id=sel.tenant_id)
        projects = [p for p in found if sel.takes(p.tenant_id, p.project_id)]
        for p in projects:
            active = self.source.rebuilds.active_rebuilds(p.tenant_id, p.project_id)
            if active:
                m = active[0]
                raise RebuildRunningError(
                    f"project {p.project_id!r} of tenant {p.tenant_id!r} has a rebuild of "
                    f"{m.rag_name!r} in progress ({m.from_model} -> {m.to_model}); a copy "
                    "takes live RAGs only: wait for the rebuild to end (status shows its "
                    "progress) or cancel it (reindex --cancel), then copy again",
                    tenant_id=p.tenant_id,
                    project_id=p.project_id,
                    rag_name=m.rag_name,
                )
        return projects

    def _live_rags(self, project: Project) -> list[RagRecord]:
        return self.source.control.list_rags(project.tenant_id, project.project_id)

    def _settings_scopes(self, projects: Sequence[Project]) -> list[tuple[str, str | None]]:
        """Every selected scope holding settings: the projects' own, and their tenants'
        (part of each project's cascade)."""
        sel = self.selection
        scopes = [s for s in self.source.control.settings_scopes() if sel.takes(*s)]
        if sel.project_id is None:
            return scopes
        tenants = {p.tenant_id for p in projects} | {t for t, p in scopes if p is not None}
        return [(t, p) for t, p in scopes if p is not None or t in tenants]

    def _count(
        self,
        report: CopyReport,
        projects: Sequence[Project],
        rags: dict[tuple[str, str], list[RagRecord]],
        scopes: Sequence[tuple[str, str | None]],
    ) -> None:
        found = report.found
        found.settings = sum(len(self.source.control.get_settings(t, p)) for t, p in scopes)
        for p in projects:
            found.projects += 1
            found.documents += len(self.source.rebuilds.document_heads(p.tenant_id, p.project_id))
            for rag in rags[(p.tenant_id, p.project_id)]:
                found.rags += 1
                found.chunks += self.source.chunks.count_chunks(RagScope.of(rag))
        if self.selection.everything:
            for page in self._cache_pages():
                found.cached_embeddings += len(page)

    # -- settings ------------------------------------------------------------------------------

    def _copy_settings(self, report: CopyReport, scopes: Sequence[tuple[str, str | None]]) -> None:
        for tenant_id, project_id in scopes:
            values = self.source.control.get_settings(tenant_id, project_id)
            there = self.target.control.get_settings(tenant_id, project_id)
            where = f"project {project_id!r}" if project_id else "tenant-wide"
            for key, value in sorted(values.items()):
                report.found.settings += 1
                if key not in there:
                    self.target.control.set_setting(tenant_id, project_id, key, value)
                    report.written.settings += 1
                elif there[key] == value:
                    report.present.settings += 1
                else:
                    raise CopyConflictError(
                        f"the target already holds setting {key!r} ({where}, tenant "
                        f"{tenant_id!r}) with another value; nothing was overwritten: remove "
                        "it from the target, or set it there as the source has it, and copy "
                        "again",
                        tenant_id=tenant_id,
                        project_id=project_id,
                    )
        self._say(f"settings: {report.written.settings} written, {report.present.settings} there")

    # -- one project ---------------------------------------------------------------------------

    def _copy_project(self, report: CopyReport, project: Project, rags: list[RagRecord]) -> None:
        t, p = project.tenant_id, project.project_id
        self._say(f"{t}/{p}: {len(rags)} RAG(s)")
        report.found.projects += 1
        there = self.target.control.get_project(t, p)
        if there is None:
            self.target.control.upsert_project(
                t, p, status=project.status, home_node=project.home_node
            )
            report.written.projects += 1
        elif (there.status, there.home_node) == (project.status, project.home_node):
            report.present.projects += 1
        else:
            raise self._conflict(
                project,
                f"project {p!r} with status {there.status.value} and home node "
                f"{there.home_node!r} (the source's: {project.status.value}, "
                f"{project.home_node!r})",
            )
        for rag in rags:
            self._copy_rag(report, rag)
            self._copy_chunks(report, rag)
        # after the chunks: a document indexed at the target always has its chunks there
        self._copy_documents(report, project)

    def _conflict(self, project: Project, what: str) -> CopyConflictError:
        return CopyConflictError(
            f"the target already holds {what} in tenant {project.tenant_id!r}; nothing was "
            "overwritten: copy into an empty store, or remove it from the target and copy again",
            tenant_id=project.tenant_id,
            project_id=project.project_id,
        )

    def _copy_rag(self, report: CopyReport, rag: RagRecord) -> None:
        report.found.rags += 1
        there = self.target.control.get_any_rag(rag.tenant_id, rag.project_id, rag.id)
        project = Project(rag.tenant_id, rag.project_id)
        named = self.target.control.find_rag(rag.tenant_id, rag.project_id, rag.name)
        if (
            there is not None
            and there.state is not RagState.LIVE
            and named is None
            and not _differs(there, rag, _RAG_FIELDS)
        ):
            # Ours, cut short: a store without transactions (MongoDB) writes the entry, then
            # its live pointer, and a crash in between leaves it unpointed (read as retired).
            # Written again; its chunks stay, they are the same RAG id's.
            self.target.control.delete_rag(rag.tenant_id, rag.project_id, rag.id)
            there = None
        if there is not None:
            changed = _differs(there, rag, _RAG_FIELDS)
            if there.state is not RagState.LIVE or changed:
                raise self._conflict(
                    project,
                    f"RAG id {rag.id!r} ({there.state.value} {there.name!r}; differs in "
                    f"{', '.join(changed) or 'state'})",
                )
            report.present.rags += 1
            return
        if named is not None:
            raise self._conflict(
                project, f"a RAG named {rag.name!r} in project {rag.project_id!r} (id {named.id!r})"
            )
        self.target.control.insert_rag(rag)
        report.written.rags += 1

    def _copy_chunks(self, report: CopyReport, rag: RagRecord) -> None:
        scope = RagScope.of(rag)
        refs = self.source.chunks.source_refs(scope)
        label = f"{rag.tenant_id}/{rag.project_id} {rag.name}"
        done = 0
        for batch in _batches(refs, self.batch_size):
            exported: dict[str, list[Chunk]] = {}
            for ch in self.source.chunks.export_chunks(scope, batch):
                exported.setdefault(ch.source_ref, []).append(ch)
            held: dict[str, set[str]] = {}
            for hit in self.target.chunks.get_chunks(scope, filters={"sourceRef": list(batch)}):
                held.setdefault(hit.source_ref, set()).add(hit.chunk_id)
            for ref, chunks in exported.items():
                report.found.chunks += len(chunks)
                if held.get(ref) == {ch.id for ch in chunks}:
                    report.present.chunks += len(chunks)
                    continue
                self.target.chunks.replace_source(scope, ref, chunks)
                report.written.chunks += len(chunks)
            done += len(batch)
            self._tell(f"{label}: {done} of {len(refs)} sources", done=done == len(refs))

    def _copy_documents(self, report: CopyReport, project: Project) -> None:
        t, p = project.tenant_id, project.project_id
        heads = self.source.rebuilds.document_heads(t, p)
        done = 0
        for batch in _batches(heads, self.batch_size):
            for head in batch:
                doc = self.source.control.get_document(t, p, head.id)
                if doc is None:  # deleted since the listing
                    continue
                report.found.documents += 1
                there = self.target.control.get_document(t, p, doc.id)
                if there is not None:
                    changed = _differs(there, doc, _DOCUMENT_FIELDS)
                    if changed:
                        raise self._conflict(
                            project,
                            f"document {doc.id!r} of project {p!r} with another "
                            f"{', '.join(changed)} (here: {doc.path!r})",
                        )
                    report.present.documents += 1
                    continue
                if _claimed(doc):
                    report.requeued += 1
                try:
                    self.target.control.restore_document(_unclaimed(doc))
                except InvalidInputError as exc:  # the path is another document's there
                    raise self._conflict(
                        project, f"another document at path {doc.path!r} of project {p!r}"
                    ) from exc
                report.written.documents += 1
            done += len(batch)
            self._tell(f"{t}/{p}: {done} of {len(heads)} documents", done=done == len(heads))

    # -- the embedding cache -------------------------------------------------------------------

    def _cache_pages(self) -> Iterator[list[tuple[str, str, list[float]]]]:
        after: tuple[str, str] | None = None
        limit = self.batch_size * 10  # entries are small: a vector and two keys
        while page := self.source.control.scan_cached_embeddings(after=after, limit=limit):
            yield page
            after = (page[-1][0], page[-1][1])

    def _copy_cache(self, report: CopyReport) -> None:
        for page in self._cache_pages():
            by_model: dict[str, dict[str, list[float]]] = {}
            for model_key, text_hash, vector in page:
                by_model.setdefault(model_key, {})[text_hash] = vector
            for model_key, items in by_model.items():
                there = self.target.control.get_cached_embeddings(model_key, list(items))
                missing = {h: v for h, v in items.items() if h not in there}
                self.target.control.put_cached_embeddings(model_key, missing)
                report.found.cached_embeddings += len(items)
                report.written.cached_embeddings += len(missing)
                report.present.cached_embeddings += len(there)
            self._tell(f"embedding cache: {report.found.cached_embeddings} entries", done=False)
        self._say(f"embedding cache: {report.found.cached_embeddings} entries")


def _claimed(doc: Document) -> bool:
    return doc.rag_claimed_by is not None or doc.index_state is IndexState.PROCESSING


def _unclaimed(doc: Document) -> Document:
    """The document as the target should hold it: a claim names a worker and a fencing token
    of the source, so a claimed document is queued again instead."""
    if not _claimed(doc):
        return replace(doc, rag_claim_token=None)
    return replace(
        doc,
        rag_claimed_by=None,
        rag_claimed_at=None,
        rag_claim_token=None,
        rag_dirty=True,
        index_state=IndexState.PENDING,
        index_next_attempt_at=None,
    )
