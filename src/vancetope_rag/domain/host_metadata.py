"""The metadata a host saves with a document (``document_saved(..., metadata=...)``): its
bounds, the names it may not use, and the JSON text every store keeps it as.

The indexer copies it into the metadata of each of the document's chunks, so LlamaIndex
``MetadataFilters`` on the project's retriever select by it (``team == "support"``). A filter
on ``path``, ``kind``, ``section`` or a source id reads the chunk's own field, never its
metadata (:func:`~vancetope_rag.domain.retrieval.metadata_filters.hit_value`), so those names are
refused here rather than stored where no filter could see them. Pure rules, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from vancetope_rag.domain.block.citations import SECTION_KEY
from vancetope_rag.domain.limits import HOST_METADATA_MAX_CHARS, HOST_METADATA_MAX_KEYS
from vancetope_rag.domain.retrieval.metadata_filters import SOURCE_KEYS
from vancetope_rag.domain.texts import Scalar, check_metadata
from vancetope_rag.errors import InvalidInputError

__all__ = ["RESERVED_KEYS", "HostMetadata", "check_host_metadata", "from_json", "to_json"]

#: A document's host metadata: string keys, scalar values.
HostMetadata = Mapping[str, Scalar]

#: Keys a chunk's own fields answer (the indexer sets them): a host's value under one of
#: these names could never be filtered on.
RESERVED_KEYS = frozenset({"kind", "path", SECTION_KEY, *SOURCE_KEYS})


def check_host_metadata(value: object) -> dict[str, Scalar]:
    """The host's metadata for a document: an object of at most 32 string keys whose values
    are strings, numbers, booleans or null, 4,096 characters of JSON at most, no reserved key.

    Raises:
        InvalidInputError: Another shape, too many keys, too large, or a reserved key; the
            message says which and what to do.
    """
    what = "document metadata"
    if value is not None and not isinstance(value, dict):
        raise InvalidInputError(
            f"{what} must be an object of string keys (e.g. {{'team': 'support'}}), "
            f"got {type(value).__name__}"
        )
    out = check_metadata(
        value, what=what, max_keys=HOST_METADATA_MAX_KEYS, max_chars=HOST_METADATA_MAX_CHARS
    )
    reserved = sorted(RESERVED_KEYS & set(out))
    if reserved:
        raise InvalidInputError(
            f"{what} may not use the key(s) {', '.join(map(repr, reserved))}: a filter on "
            "them reads the chunk's own field; choose another name (e.g. 'hostPath')"
        )
    return out


def to_json(metadata: HostMetadata) -> str:
    """The text a store keeps: compact JSON, keys sorted, so equal metadata is equal text."""
    return json.dumps(dict(metadata), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def from_json(text: str | None) -> dict[str, Scalar]:
    """A stored document's metadata (``{}`` for none: documents written before it existed)."""
    if not text:
        return {}
    value = json.loads(text)
    return dict(value) if isinstance(value, dict) else {}
