"""What a hit's ``[S#]`` label names, and the numbering of labels: one rule for the
``<rag-context>`` block and the ``rag_query`` tool.

Pure rules, no I/O. In the project RAG (``_documents``) a label names a document as it exists
now: the caller first resolves each hit's document by id (the chunk's ``sourceRef``) and sets
the hit's ``path`` to the document's current path, dropping hits whose document is gone
(:func:`current_document_hits`). A ``_documents`` chunk that names no document was added by
hand and is labelled ``manual:<sourceRef>``: a caller's ``metadata.path`` never becomes a
label there (:func:`documents_label`). Manual writes into ``_documents`` are stored under a
``manual:`` source ref already (never a document id), which labels as itself. In manual
RAGs, a hit is labelled by its path, else its sourceRef.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain.block.lookalikes import clean_label, neutralise_tags
from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.texts import one_line

__all__ = [
    "MANUAL_PREFIX",
    "SECTION_KEY",
    "Cited",
    "cite",
    "current_document_hits",
    "documents_label",
    "manual_label",
    "section_of",
    "source_of",
]

#: The label prefix of a chunk added by hand to the project RAG.
MANUAL_PREFIX = "manual:"
#: Chunk metadata key naming the section (page, sheet, slide) a chunk comes from; the label
#: shows it after the path: ``reports/q3.xlsx — sheet Maintenance``. Written by the indexer
#: only: a manual write to the project RAG cannot set it.
SECTION_KEY = "section"
_SECTION_CHARS = 120


def manual_label(source_ref: str) -> str:
    """The label of a ``_documents`` chunk added by hand: ``manual:<source_ref>``, or the
    source ref itself when it is in the ``manual:`` namespace already."""
    return source_ref if source_ref.startswith(MANUAL_PREFIX) else MANUAL_PREFIX + source_ref


def documents_label(source_ref: str, document_paths: Mapping[str, str]) -> str:
    """The citation label of a ``_documents`` chunk: the current path of the document whose id
    is ``source_ref``, else ``manual:<source_ref>``. Whatever path or metadata the chunk was
    stored with is never used: that is what a caller could forge.

    Args:
        source_ref: The chunk's source ref (the indexer writes the document id there).
        document_paths: Current path by document id, for the project's documents among the
            hits' source refs (ids that are no document are simply absent).
    """
    if source_ref.startswith(MANUAL_PREFIX):  # a manual write's own namespace: never a path
        return source_ref
    path = document_paths.get(source_ref)
    return path if path is not None else manual_label(source_ref)


@dataclass(frozen=True, slots=True)
class Cited:
    """A hit with its citation: ``label`` is ``S1``, ``S2``…, ``source`` what it names."""

    hit: Hit
    label: str
    source: str

    def to_json(self) -> dict[str, Any]:
        """The hit as the ``rag_query`` tool and REST's test query answer it: label and
        source as the block shows them, the score (cosine; and the reranker's, when it
        ordered the hits), and the text with its tags defused."""
        out = {
            "label": self.label,
            "source": clean_label(self.source),
            "path": self.hit.path,
            "sourceRef": self.hit.source_ref,
            "kind": self.hit.kind,
            "score": round(self.hit.score, 4),
            "text": neutralise_tags(self.hit.text),
        }
        if self.hit.rerank_score is not None:  # the rerank stage ordered the hits
            out["rerankScore"] = round(self.hit.rerank_score, 6)
        return out


def source_of(hit: Hit, *, project_rag: bool) -> str:
    """What the label of ``hit`` names.

    Args:
        hit: A hit; in the project RAG, already passed through :func:`current_document_hits`.
        project_rag: The hit comes from the project's ``_documents`` RAG.
    """
    if project_rag:
        base = hit.path if hit.path is not None else manual_label(hit.source_ref)
    else:
        base = hit.path if hit.path is not None else hit.source_ref
    section = section_of(hit)
    return f"{base} — {section}" if section else base


def section_of(hit: Hit) -> str | None:
    """The section a hit's chunk comes from, on one line and capped, or ``None``."""
    raw = hit.metadata.get(SECTION_KEY) if hit.metadata else None
    if not isinstance(raw, str):
        return None
    return one_line(raw, _SECTION_CHARS) or None


def cite(hits: Sequence[Hit], *, project_rag: bool) -> list[Cited]:
    """Number the hits' sources by first appearance: every hit of one source carries the
    same label, so the model can cite it."""
    labels: dict[str, str] = {}
    out: list[Cited] = []
    for hit in hits:
        source = source_of(hit, project_rag=project_rag)
        label = labels.setdefault(source, f"S{len(labels) + 1}")
        out.append(Cited(hit, label, source))
    return out


def current_document_hits(hits: Sequence[Hit], paths: Mapping[str, str]) -> list[Hit]:
    """The project RAG's hits as they may be cited now.

    Args:
        hits: Hits of the ``_documents`` RAG.
        paths: Current path of every document among the hits' sourceRefs that still exists.

    Returns:
        The hits in order, each with ``path`` set to its label (:func:`documents_label`): its
        document's current path (a moved document shows its new path), or ``manual:<sourceRef>``
        for a chunk added by hand (stored without a path). A hit whose document is gone is
        dropped when the indexer wrote it (it carries a path: the document was deleted since).
    """
    out: list[Hit] = []
    for hit in hits:
        if hit.source_ref not in paths and hit.path is not None:
            continue
        label = documents_label(hit.source_ref, paths)
        out.append(hit if hit.path == label else dataclasses.replace(hit, path=label))
    return out
