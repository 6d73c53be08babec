"""What every store adapter does alike, written once: argument checks, the document change set,
the errors with one message whatever the database, and small codecs.

Pure functions (no I/O): the SQLite and MongoDB adapters call them and translate the result to
SQL or MQL, so a rule changed here changes for both.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse, urlunparse

import numpy as np
import numpy.typing as npt

from vancetope_rag.domain import host_metadata
from vancetope_rag.domain.rebuilds import ItemState, Rebuild, RebuildItem, RebuildState
from vancetope_rag.domain.records import Document, Hit, IndexState, RagRecord
from vancetope_rag.errors import (
    DimensionMismatchError,
    DocumentNotFoundError,
    InvalidInputError,
    RagAlreadyExistsError,
    RebuildRunningError,
    StoreError,
)
from vancetope_rag.store.port.types import (
    FILTER_KEYS,
    ChunkFilter,
    DocumentChange,
    NewDocument,
    RagScope,
    _Unset,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: A failed document's last error is stored up to this many characters.
ERROR_TEXT_MAX = 2000


def content_hash(text: str) -> str:
    """The fingerprint stored with a document's content (hex SHA-256 of its UTF-8)."""
    # surrogatepass: the hash never fails; storing text with a lone surrogate is refused later
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def redact_uri(uri: str) -> str:
    """The URI with its password replaced by ``***``: what may be printed or logged."""
    parts = urlparse(uri)
    if parts.password is None:
        return uri
    login, _, hosts = parts.netloc.rpartition("@")
    return urlunparse(parts._replace(netloc=f"{login.split(':', 1)[0]}:***@{hosts}"))


def capped_error(text: str) -> str:
    """An error text cut to :data:`ERROR_TEXT_MAX` characters, as the store keeps it."""
    return text[:ERROR_TEXT_MAX]


# -- the document change set -----------------------------------------------------------------

#: Value of a changed document field.
FieldValue = str | bool | None


#: The fields of a :class:`DocumentChange` that are document fields (``UNSET``: unchanged).
_CHANGE_FIELDS = tuple(
    f.name for f in fields(DocumentChange) if f.name not in ("mark_dirty", "failed_reason")
)


@dataclass(frozen=True, slots=True)
class DocumentChanges:
    """What one ``update_document`` call changes (its :class:`DocumentChange`), worked out
    once for every adapter.

    ``values`` maps :class:`~vancetope_rag.domain.records.Document` field names to their new
    values, holding only the fields the caller gave (``None`` is a value: it clears
    ``summary`` or ``rag_enabled``); a new ``content`` brings its ``content_hash``.
    ``mark_dirty`` queues the document for the indexer. The adapters add ``updated_at``.
    """

    values: Mapping[str, FieldValue]
    mark_dirty: bool = False
    #: Mark the document FAILED with this reason (its file could not be read), ending any
    #: claim: a worker that holds one finishes nothing.
    failed_reason: str | None = None

    @classmethod
    def of(cls, change: DocumentChange) -> DocumentChanges:
        """The change set of a :class:`~vancetope_rag.store.port.types.DocumentChange`."""
        c = change
        values: dict[str, Any] = {}
        for name in _CHANGE_FIELDS:
            value = getattr(c, name)
            if isinstance(value, _Unset):
                continue
            values[name] = value
            if name == "content":  # its hash comes with it
                values["content_hash"] = content_hash(value)
        if "metadata" in values:
            values["metadata"] = host_metadata.to_json(values["metadata"])
        if values.get("extraction_error") is not None:
            values["extraction_error"] = capped_error(values["extraction_error"])
        if c.failed_reason is not None and c.mark_dirty:
            raise ValueError("a change either queues the document or fails it, not both")
        return cls(values, c.mark_dirty, c.failed_reason)


def new_document_state(doc: NewDocument) -> IndexState:
    """A new document's index state: FAILED when its file could not be read, PENDING when
    it starts queued, else NONE."""
    if doc.failed_reason is not None:
        return IndexState.FAILED
    return IndexState.PENDING if doc.rag_dirty else IndexState.NONE


def state_counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Documents per index state, every state present (0 when no document is in it)."""
    counts = {s.value: 0 for s in IndexState}
    for state, n in pairs:
        counts[state] = int(n)
    return counts


def settings_by_scope(
    rows: Iterable[tuple[str | None, str, str]],
) -> tuple[dict[str, str], dict[str, str]]:
    """``SettingsStore.get_scope_settings`` from ``(project id, key, value)`` rows, the
    tenant's scope having no project id (None, or ``''`` in the SQL stores)."""
    tenant: dict[str, str] = {}
    project: dict[str, str] = {}
    for project_id, key, value in rows:
        (project if project_id else tenant)[key] = value
    return tenant, project


def best_scores_by_query(
    query: Callable[[RagScope, Sequence[float], int], Sequence[Hit]],
    scope: RagScope,
    vectors: Sequence[Sequence[float]],
) -> list[float | None]:
    """``ChunkStore.best_scores`` as one ``query(scope, vector, 1)`` per vector (a store
    whose queries are cheap one by one: in-process on SQLite, one search each on Atlas)."""
    return [float(hits[0].score) if (hits := query(scope, v, 1)) else None for v in vectors]


def source_counts_of(
    paths: Mapping[str, str], rows: Iterable[tuple[str, str, int]]
) -> dict[str, tuple[int, int]]:
    """``ChunkStore.source_counts`` from chunk counts per (source ref, path): per source of
    ``paths``, all its chunks and those of the path given for it."""
    counts = {ref: (0, 0) for ref in paths}
    for ref, path, n in rows:
        if ref in counts:
            total, own = counts[ref]
            counts[ref] = (total + int(n), own + (int(n) if path == paths[ref] else 0))
    return counts


# -- records as stored ------------------------------------------------------------------------

R = TypeVar("R", bound="DataclassInstance")


def record_fields(
    record: DataclassInstance, key: Callable[[str], str] = str, /, **encoded: Any
) -> dict[str, Any]:
    """A record's fields under ``key(name)`` (a store's row or document of it): those in
    ``encoded`` as given, every other as it is."""
    return {
        key(f.name): encoded[f.name] if f.name in encoded else getattr(record, f.name)
        for f in fields(record)
    }


def record_of(
    cls: type[R], stored: Mapping[str, Any], key: Callable[[str], str] = str, /, **decoded: Any
) -> R:
    """A ``cls`` record of a stored row or document: the fields in ``decoded`` as given,
    every other as ``stored[key(name)]`` holds it."""
    names = (f.name for f in fields(cls))
    return cls(**{n: decoded[n] if n in decoded else stored[key(n)] for n in names})


# -- errors both adapters raise ---------------------------------------------------------------


def path_exists_error(doc: NewDocument) -> InvalidInputError:
    """A new document whose path another document of the project already has."""
    return InvalidInputError(
        f"a document with path {doc.path!r} already exists in the project; update it instead",
        tenant_id=doc.tenant_id,
        project_id=doc.project_id,
    )


def document_taken_error(doc: Document) -> InvalidInputError:
    """A restored document whose id or path a document of the project already has."""
    return InvalidInputError(
        f"cannot restore document {doc.id!r}: the project already has a document with that "
        f"id or with path {doc.path!r}",
        tenant_id=doc.tenant_id,
        project_id=doc.project_id,
        document_id=doc.id,
    )


def path_taken_error(path: object, document_id: str) -> InvalidInputError:
    """An update moving a document onto another document's path."""
    return InvalidInputError(f"another document already has path {path!r}", document_id=document_id)


def document_not_found_error(
    tenant_id: str, project_id: str, document_id: str
) -> DocumentNotFoundError:
    return DocumentNotFoundError(
        f"no document {document_id!r} in project {project_id!r}",
        tenant_id=tenant_id,
        project_id=project_id,
        document_id=document_id,
    )


def rag_exists_error(rag: RagRecord) -> RagAlreadyExistsError:
    return RagAlreadyExistsError(
        f"a RAG named {rag.name!r} already exists in project {rag.project_id!r}",
        tenant_id=rag.tenant_id,
        project_id=rag.project_id,
        rag_name=rag.name,
    )


def rebuild_running_error(tenant_id: str, project_id: str, rag_name: str) -> RebuildRunningError:
    """A second rebuild of a RAG while one is still running or switching over."""
    return RebuildRunningError(
        f"a rebuild of {rag_name!r} is already running in project {project_id!r}; wait for "
        "it to finish (status shows its progress) or cancel it (reindex --cancel)",
        tenant_id=tenant_id,
        project_id=project_id,
        rag_name=rag_name,
    )


def chunk_id_taken_error(scope: RagScope, detail: object) -> InvalidInputError:
    """A chunk written under an id the RAG already holds; ``detail`` names it if known."""
    return InvalidInputError(
        f"a chunk id is already taken: {detail}; chunk ids must be unique",
        tenant_id=scope.tenant_id,
        project_id=scope.project_id,
        rag_id=scope.rag_id,
    )


def foreign_chunk_error() -> InvalidInputError:
    """A chunk whose ``rag_id`` is not the RAG of the scope it is written to."""
    return InvalidInputError("chunk belongs to another RAG than the scope")


def check_schema_version(shown: object, version: int, known: int) -> None:
    """Refuse a store whose schema ``version`` is newer than the ``known`` one of this
    package (``shown``: the store as it may be printed)."""
    if version > known:
        raise StoreError(
            f"store {shown!r} has schema version {version}, newer than this vancetope-rag "
            f"understands ({known}); upgrade the package"
        )


# -- chunk arguments ---------------------------------------------------------------------------


def iter_filter(filters: ChunkFilter | None) -> Iterator[tuple[str, bool, list[str]]]:
    """Yield ``(key, negated, values)`` for a ChunkFilter, validating keys."""
    for raw_key, value in (filters or {}).items():
        negated = raw_key.startswith("!")
        key = raw_key[1:] if negated else raw_key
        if key not in FILTER_KEYS:
            raise InvalidInputError(
                f"cannot filter chunks on {key!r}; "
                f"filterable keys: {', '.join(sorted(FILTER_KEYS))}"
            )
        values = [value] if isinstance(value, str) else [str(v) for v in value]
        yield key, negated, values


def check_chunk_version(chunk_version: int | None) -> None:
    """Refuse a ``replace_source`` fencing version that is not a positive integer."""
    if chunk_version is not None and (not isinstance(chunk_version, int) or chunk_version < 1):
        raise InvalidInputError(f"chunk_version must be a positive integer, not {chunk_version!r}")


def selects_nothing(chunk_ids: Sequence[str] | None, filters: ChunkFilter | None) -> bool:
    """Does an empty list of chunk ids select no chunk? (A bad filter is refused all the
    same.)"""
    for _ in iter_filter(filters):
        pass
    return chunk_ids is not None and not chunk_ids


def check_top_k(top_k: int) -> None:
    """A query asks for at least one chunk."""
    if top_k < 1:
        raise InvalidInputError("top_k must be at least 1")


def checked_vector(vector: Sequence[float], dim: int) -> npt.NDArray[np.float32]:
    """The vector as float32 after the checks every adapter makes (size, finite, non-zero)."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim != 1 or arr.shape[0] != dim:
        raise DimensionMismatchError(
            f"vector has {arr.shape[-1] if arr.ndim else 0} dimensions but the RAG is pinned "
            f"to {dim}; rebuild the RAG to change its embedding model"
        )
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError("embedding contains NaN or infinite values")
    if not np.any(arr):  # cosine is undefined for it (sqlite-vec yields NULL distances)
        raise InvalidInputError("embedding is all zeros; cosine similarity needs a non-zero vector")
    return arr


# -- embedding cache -------------------------------------------------------------------------


def unique_batches(values: Iterable[str], size: int) -> Iterator[list[str]]:
    """``values`` without repeats (first occurrence kept), in lists of at most ``size``."""
    unique = list(dict.fromkeys(values))
    for start in range(0, len(unique), size):
        yield unique[start : start + size]


def vector_to_bytes(vector: Sequence[float]) -> bytes:
    """A cached embedding as stored: float32, native byte order."""
    return np.asarray(vector, dtype=np.float32).tobytes()


def vector_from_bytes(blob: bytes) -> list[float]:
    """The embedding :func:`vector_to_bytes` stored."""
    values: list[float] = np.frombuffer(blob, dtype=np.float32).tolist()
    return values


def _as_is(record: type, converted: str) -> tuple[str, ...]:
    """The fields of a record stored as they are (all but the ``converted`` ones), by name:
    the columns of the SQL stores, MongoDB's fields in camel case."""
    return tuple(f.name for f in dataclasses.fields(record) if f.name not in converted.split())


_REBUILD_AS_IS = _as_is(Rebuild, "state max_failure_ratio created_at finished_at")
_ITEM_AS_IS = _as_is(RebuildItem, "state attempts completed_at")


def rebuild_fields(m: Rebuild) -> dict[str, Any]:
    """What a rebuild that starts stores, by column, but for when it was created."""
    fields = {name: getattr(m, name) for name in _REBUILD_AS_IS}
    state = RebuildState.RUNNING.value
    return fields | {"state": state, "reason": None, "max_failure_ratio": m.max_failure_ratio}


def rebuild_from(column: Callable[[str], Any], when: Callable[[Any], datetime | None]) -> Rebuild:
    """A stored rebuild, each ``column(name)`` read by column name, times by ``when``."""
    return Rebuild(
        **{name: column(name) for name in _REBUILD_AS_IS},
        state=RebuildState(column("state")),
        max_failure_ratio=float(column("max_failure_ratio")),
        created_at=when(column("created_at")),
        finished_at=when(column("finished_at")),
    )


def item_from(column: Callable[[str], Any], when: Callable[[Any], datetime | None]) -> RebuildItem:
    """A stored queue item of a rebuild, read as :func:`rebuild_from` reads a rebuild."""
    return RebuildItem(
        **{name: column(name) for name in _ITEM_AS_IS},
        state=ItemState(column("state")),
        attempts=int(column("attempts") or 0),
        completed_at=when(column("completed_at")),
    )
