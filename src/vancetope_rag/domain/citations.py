"""What a hit's ``[S#]`` label names, and the numbering of labels: one rule for the
``<rag-context>`` block and the ``rag_query`` tool.

Pure rules, no I/O. In the project RAG (``_documents``) a label names a document as it exists
now: the caller first resolves each hit's document by id (the chunk's ``sourceRef``) and sets
the hit's ``path`` to the document's current path, dropping hits whose document is gone
(:func:`current_document_hits`). A ``_documents`` chunk that names no document was added by
hand and is labelled ``manual:<sourceRef>``: a caller's ``metadata.path`` never becomes a
label there. In manual RAGs, a hit is labelled by its path, else its sourceRef.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vancetope_rag.domain.records import Hit

__all__ = ["MANUAL_PREFIX", "Cited", "cite", "current_document_hits", "source_of"]

#: The label prefix of a chunk added by hand to the project RAG.
MANUAL_PREFIX = "manual:"


@dataclass(frozen=True, slots=True)
class Cited:
    """A hit with its citation: ``label`` is ``S1``, ``S2``…, ``source`` what it names."""

    hit: Hit
    label: str
    source: str


def source_of(hit: Hit, *, project_rag: bool) -> str:
    """What the label of ``hit`` names.

    Args:
        hit: A hit; in the project RAG, already passed through :func:`current_document_hits`.
        project_rag: The hit comes from the project's ``_documents`` RAG.
    """
    if project_rag:
        return hit.path if hit.path is not None else MANUAL_PREFIX + hit.source_ref
    return hit.path if hit.path is not None else hit.source_ref


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
        The hits in order, each with ``path`` set to its document's current path (a moved
        document shows its new path). A hit whose document is gone is dropped when the
        indexer wrote it (it carries a path: the document was deleted since); a chunk added by
        hand (no path) is kept, with no path, and is cited as ``manual:<sourceRef>``.
    """
    out: list[Hit] = []
    for hit in hits:
        current = paths.get(hit.source_ref)
        if current is not None:
            out.append(hit if hit.path == current else dataclasses.replace(hit, path=current))
        elif hit.path is None:
            out.append(hit)
    return out
