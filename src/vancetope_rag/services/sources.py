"""What gets indexed under a source: its texts, what a write did, and the rule for manual
writes into ``_documents``. Plain values and one pure function."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vancetope_rag.domain.citations import SECTION_KEY
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, ChunkKind, RagRecord

__all__ = ["DEFAULT_MAX_TEXT_CHARS", "SECTION_KEY", "IngestStats", "SourceText", "manual_parts"]

#: The text limit when none is configured (``EngineConfig.max_text_chars``'s default).
DEFAULT_MAX_TEXT_CHARS = 2_000_000


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


def manual_parts(rag: RagRecord, parts: Sequence[SourceText]) -> list[SourceText]:
    """What a manual write (a tool, not the indexer) stores: in ``_documents`` no path,
    neither the argument nor a ``path`` metadata key. That RAG's hits are cited by the
    current path of the document their source ref names
    (:func:`~vancetope_rag.domain.citations.documents_label`), so a caller can never plant a
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
