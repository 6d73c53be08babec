"""What gets indexed under a source: its texts, what a write did, a document's texts, and the
rules for manual writes into ``_documents`` (their own ``manual:`` source refs, no path).
Plain values and pure functions."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vancetope_rag.domain.block.citations import MANUAL_PREFIX, SECTION_KEY
from vancetope_rag.domain.limits import MAX_TEXT_CHARS
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, ChunkKind, Document, RagRecord
from vancetope_rag.extraction.records import ExtractionRecord
from vancetope_rag.extraction.registry import Section, sections_of

__all__ = [
    "DEFAULT_MAX_TEXT_CHARS",
    "SECTION_KEY",
    "IngestStats",
    "SourceText",
    "document_parts",
    "manual_parts",
    "manual_source_ref",
    "section_parts",
    "unreadable_reason",
]

#: The text limit when none is configured (``EngineConfig.max_text_chars``'s default).
DEFAULT_MAX_TEXT_CHARS = MAX_TEXT_CHARS


@dataclass(frozen=True)
class SourceText:
    """One text to index under a source (a document's content or its summary)."""

    text: str
    kind: str = ChunkKind.CONTENT.value
    path: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IngestStats:
    chunks: int = 0
    embedded_texts: int = 0
    cache_hits: int = 0
    #: Sources of a manual write whose text was indexed only up to the limit.
    truncated: int = 0


def manual_source_ref(rag: RagRecord, source_ref: str) -> str:
    """The source ref a manual write (a tool, not the indexer) is stored under. In
    ``_documents`` it is always in the ``manual:`` namespace, which no document id is in
    (they are uuid hex): whatever the caller passes (a document id, a path, a ``manual:``
    string, any case or whitespace), the write can never replace, extend or remove a
    document's own chunks, and a plain reindex collects it (its source is no document).
    Idempotent, so a ``sourceRef`` a result showed maps to itself. Other RAGs keep the
    caller's ref."""
    if rag.name != DEFAULT_RAG_NAME or source_ref.startswith(MANUAL_PREFIX):
        return source_ref
    return MANUAL_PREFIX + source_ref


def manual_parts(rag: RagRecord, parts: Sequence[SourceText]) -> list[SourceText]:
    """What a manual write (a tool, not the indexer) stores: in ``_documents`` no path,
    neither the argument nor a ``path`` metadata key. That RAG's hits are cited by the
    current path of the document their source ref names
    (:func:`~vancetope_rag.domain.block.citations.documents_label`), so a caller can never plant a
    chunk under a document's name; nor a ``section``, which the label shows too."""
    if rag.name != DEFAULT_RAG_NAME:
        return list(parts)
    return [
        dataclasses.replace(
            p,
            path=None,
            metadata={k: v for k, v in p.metadata.items() if k not in ("path", SECTION_KEY)},
        )
        for p in parts
    ]


def unreadable_reason(doc: Document) -> str | None:
    """Why the document's file could not be read, when it holds no text of an earlier
    version: it fails in the live index and in a rebuild alike, for its own sake (no
    embedding model reads it), until an import can read the file. None otherwise."""
    record = ExtractionRecord.from_json(doc.extraction)
    if record is None or not record.failed or doc.content:
        return None
    return record.error or "unreadable"


def document_parts(
    doc: Document, include_summaries: bool, clip: Callable[[str], tuple[str, bool]]
) -> tuple[list[SourceText], bool]:
    """The texts a document's chunks are built from (content, then the summary), each cut at
    the engine's text limit by ``clip``, and whether the document is indexed only in part
    (a text cut there, or its file read only up to a budget). The live indexer and a
    rebuild's both use it, so a rebuild's chunks are the live ones' with another model.

    Content read from a file with sections (pages, sheets, slides) is one text per section,
    so no chunk spans two and each chunk's metadata names its section; the sections are used
    only while the document still holds the text they were recorded for. Every text carries
    the host's metadata of the document (:attr:`Document.metadata`), so its chunks do.
    """
    texts = [(doc.content, ChunkKind.CONTENT.value)]
    if include_summaries and doc.summary:
        texts.append((doc.summary, ChunkKind.SUMMARY.value))
    record = ExtractionRecord.from_json(doc.extraction)
    current = record if record is not None and record.applies_to(doc.content_hash) else None
    spans = current.sections if current is not None else ()
    parts: list[SourceText] = []
    # Truncated: a text indexed up to the limit, or the file read only up to a budget.
    truncated = bool(current is not None and current.truncated)
    for text, kind in texts:
        if not text.strip():
            continue
        kept, cut = clip(text)
        truncated = truncated or cut
        if kind == ChunkKind.CONTENT.value and spans:
            parts += section_parts(sections_of(kept, spans), doc.path, doc.metadata)
        else:
            parts.append(SourceText(kept, kind, doc.path, dict(doc.metadata)))
    return parts, truncated


def section_parts(
    sections: Sequence[Section], path: str | None, metadata: Mapping[str, Any] | None = None
) -> list[SourceText]:
    """One content text per section, its title in the ``section`` metadata the label shows
    (beside ``metadata``, which may not name it: see :mod:`~vancetope_rag.domain.host_metadata`)."""
    base = dict(metadata or {})
    return [
        SourceText(s.text, path=path, metadata={**base, SECTION_KEY: s.title} if s.title else base)
        for s in sections
    ]
