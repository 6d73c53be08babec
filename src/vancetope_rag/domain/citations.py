"""How a hit of the project's ``_documents`` RAG is cited: the one rule, pure.

``_documents`` mirrors the project's documents; its hits are cited by path in every turn
(``[S1] documents/notes/topic.md``), so a path shown there must be a document's real, current
path. Agents may still write to ``_documents`` by hand ("only as a quick test", spec §9); such a
chunk is cited as ``manual:<sourceRef>`` and never under a path the caller chose.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MANUAL_LABEL_PREFIX", "documents_label"]

#: Label prefix of a ``_documents`` chunk whose source is no document of the project.
MANUAL_LABEL_PREFIX = "manual:"


def documents_label(source_ref: str, document_paths: Mapping[str, str]) -> str:
    """The citation label of a ``_documents`` hit.

    Args:
        source_ref: The chunk's source ref (the indexer writes the document id there).
        document_paths: Current path by document id, for the project's documents among the
            hits' source refs (ids that are no document are simply absent).

    Returns:
        The current path of the document whose id is ``source_ref``; for any other source,
        ``manual:<source_ref>``. Whatever path or metadata the chunk was stored with is
        never used: that is what a caller could forge.
    """
    path = document_paths.get(source_ref)
    return path if path is not None else f"{MANUAL_LABEL_PREFIX}{source_ref}"
