"""LlamaIndex metadata filters as one predicate over hits: the post-filter every store shares.

A store can pre-filter only on the chunk fields it indexes (``kind``, ``path``, ``sourceRef``;
Atlas only on the fields declared in its vector index), so a filter on a chunk's own metadata
(what a caller stored with it: ``{"lang": "en", "year": 2024}``) runs here, on the candidates
the store returns, and the retrieval loop
(:func:`~vancetope_rag.domain.retrieval.ranking.collect_hits`) over-fetches while the filter leaves
``topK`` unfilled. :func:`pushdown` picks out the part a store can apply itself, so it returns fewer
candidates to throw away; the predicate still checks every condition, so the answer is the same with
or without it.

The operators and their meaning are LlamaIndex's (``FilterOperator``, as its reference
``SimpleVectorStore`` applies them), with three differences a caller should know:

* A chunk's metadata values are scalars (the store refuses nested ones), so the operators that
  test an *array* field (``any``, ``all``, ``contains``) are refused with an error naming them.
* A comparison between a number and a text (``year > "2020"``) does not match, where
  LlamaIndex's reference raises ``TypeError`` mid-query.
* Nested ``MetadataFilters`` combine as written (``AND``/``OR``/``NOT``), where the reference
  refuses them.

Pure rules, no I/O; the filter types are LlamaIndex's own pydantic models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.suggest import did_you_mean
from vancetope_rag.errors import InvalidInputError

__all__ = [
    "SOURCE_KEYS",
    "HitPredicate",
    "UnknownMetadataKeyWarning",
    "all_of",
    "compile_filters",
    "hit_value",
    "pushdown",
    "unknown_keys_message",
]

#: Decides whether a candidate hit is kept.
HitPredicate = Callable[[Hit], bool]

#: Keys naming a chunk's source (the document id): LlamaIndex's spellings and ours.
SOURCE_KEYS = frozenset({"sourceRef", "source_ref", "ref_doc_id", "doc_id", "document_id"})

#: Chunk fields a store filters on itself (``ChunkFilter`` keys), by the key a filter uses.
_STORE_KEYS = {"kind": "kind", "path": "path", **{k: "sourceRef" for k in SOURCE_KEYS}}
#: Store fields that may be empty: a store's ``NOT IN`` drops an empty one, where the
#: predicate keeps it ("not equal"), so negations on them are not pushed down.
_NULLABLE = frozenset({"path"})

_ORDER: dict[FilterOperator, Callable[[Any, Any], bool]] = {
    FilterOperator.GT: lambda a, b: a > b,
    FilterOperator.GTE: lambda a, b: a >= b,
    FilterOperator.LT: lambda a, b: a < b,
    FilterOperator.LTE: lambda a, b: a <= b,
}
_LIST_OPS = (FilterOperator.IN, FilterOperator.NIN)
_ARRAY_OPS = (FilterOperator.ANY, FilterOperator.ALL, FilterOperator.CONTAINS)
_TEXT_OPS = (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE)


def hit_value(hit: Hit, key: str) -> object:
    """The value a filter on ``key`` tests: a chunk field or the chunk's own metadata."""
    if key in SOURCE_KEYS:
        return hit.source_ref
    if key == "kind":
        return hit.kind
    if key == "path":
        return hit.path
    return hit.metadata.get(key)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _comparable(a: object, b: object) -> bool:
    return (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))


def _leaf(f: MetadataFilter) -> HitPredicate:
    """The predicate of one filter, after checking that its value fits its operator."""
    op, value, key = f.operator, f.value, f.key
    named = f"metadata filter {key!r} {getattr(op, 'value', op)!r}"
    if op in _ARRAY_OPS:
        raise InvalidInputError(
            f"{named}: operator {op.value!r} tests an array field, and chunk metadata holds only "
            "strings, numbers and booleans; use 'in' for one of several values or "
            "'text_match' for a substring"
        )
    if op is FilterOperator.IS_EMPTY:
        return lambda hit: hit_value(hit, key) in (None, "")
    if op in _LIST_OPS:
        if not isinstance(value, list):
            raise InvalidInputError(f"{named} needs a list of values, got {value!r}")
        allowed = list(value)
        if op is FilterOperator.IN:
            return lambda hit: (v := hit_value(hit, key)) is not None and v in allowed
        return lambda hit: (v := hit_value(hit, key)) is None or v not in allowed
    if isinstance(value, list):
        raise InvalidInputError(f"{named} needs one value, not a list; use 'in' for a list")
    if op is FilterOperator.EQ:
        return lambda hit: (v := hit_value(hit, key)) is not None and v == value
    if op is FilterOperator.NE:
        # LlamaIndex's rule: a chunk without the key is "not equal".
        return lambda hit: (v := hit_value(hit, key)) is None or v != value
    if op in _ORDER:
        if value is None:
            raise InvalidInputError(f"{named} needs a number or a text to compare with")
        compare = _ORDER[op]
        return lambda hit: _comparable(v := hit_value(hit, key), value) and compare(v, value)
    if op in _TEXT_OPS:
        if not isinstance(value, str):
            raise InvalidInputError(f"{named} needs a text, got {value!r}")
        if op is FilterOperator.TEXT_MATCH:
            return lambda hit: isinstance(v := hit_value(hit, key), str) and value in v
        lowered = value.lower()
        return lambda hit: isinstance(v := hit_value(hit, key), str) and lowered in v.lower()
    supported = ", ".join(o.value for o in FilterOperator if o not in _ARRAY_OPS)
    raise InvalidInputError(f"{named}: unsupported operator; supported: {supported}")


def _node(filters: MetadataFilters | MetadataFilter) -> HitPredicate:
    if isinstance(filters, MetadataFilter):
        return _leaf(filters)
    if not isinstance(filters, MetadataFilters):
        raise InvalidInputError(
            f"a metadata filter must be a MetadataFilter or MetadataFilters, got "
            f"{type(filters).__name__}"
        )
    parts = [_node(f) for f in filters.filters]
    condition = filters.condition or FilterCondition.AND
    if condition is FilterCondition.AND:
        return lambda hit: all(p(hit) for p in parts)
    if condition is FilterCondition.OR:
        return lambda hit: any(p(hit) for p in parts)
    if condition is FilterCondition.NOT:  # LlamaIndex's meaning: none of them matches
        return lambda hit: not any(p(hit) for p in parts)
    raise InvalidInputError(f"unsupported filter condition {condition!r}; use and, or, not")


def compile_filters(filters: MetadataFilters | None) -> HitPredicate | None:
    """The predicate of LlamaIndex ``filters``, or None when they keep every hit.

    Raises:
        InvalidInputError: An operator this package does not support (named in the message),
            or a value that does not fit its operator (``in`` without a list, ``>`` with one).
    """
    if filters is None or not filters.filters:
        return None
    return _node(filters)


def pushdown(filters: MetadataFilters | None) -> dict[str, str | list[str]]:
    """The part of ``filters`` a store applies itself, as a ``ChunkFilter``: top-level ``AND``
    conditions ``==``, ``!=``, ``in``, ``nin`` on ``kind``, ``path`` and the source id, with
    text values. Everything else is left to the predicate of :func:`compile_filters`."""
    out: dict[str, str | list[str]] = {}
    if filters is None or (filters.condition or FilterCondition.AND) is not FilterCondition.AND:
        return out
    for f in filters.filters:
        if not isinstance(f, MetadataFilter) or f.key not in _STORE_KEYS:
            continue
        negated = f.operator in (FilterOperator.NE, FilterOperator.NIN)
        field = _STORE_KEYS[f.key]
        key = ("!" if negated else "") + field
        if key in out or (negated and field in _NULLABLE):
            continue  # the predicate checks it (a second condition on one field, or see above)
        if f.operator in (FilterOperator.EQ, FilterOperator.NE) and isinstance(f.value, str):
            out[key] = f.value
        elif (
            f.operator in _LIST_OPS
            and isinstance(f.value, list)
            and f.value
            and all(isinstance(v, str) for v in f.value)
        ):
            out[key] = [str(v) for v in f.value]
    return out


class UnknownMetadataKeyWarning(UserWarning):
    """A metadata filter names a key no chunk of the RAG has (most often a misspelt one), and
    the query found nothing. LlamaIndex answers a filter that matches nothing with nothing,
    so the answer stays; ``warnings.simplefilter("error", UnknownMetadataKeyWarning)`` makes
    it an error."""


def metadata_keys(filters: MetadataFilters | MetadataFilter | None) -> list[str]:
    """The keys of the chunk's own metadata that ``filters`` test (chunk fields left out)."""
    if filters is None:
        return []
    if isinstance(filters, MetadataFilter):
        return [] if filters.key in _STORE_KEYS else [filters.key]
    keys = [k for f in filters.filters for k in metadata_keys(f)]
    return list(dict.fromkeys(keys))


def unknown_keys_message(filters: MetadataFilters | None, known: set[str]) -> str | None:
    """Why a filtered query found nothing when it tests keys no chunk has (``known``: every
    metadata key of the RAG's chunks), naming each with the close key first; None when every
    key is held by some chunk, or the RAG holds no metadata at all."""
    missing = [k for k in metadata_keys(filters) if k not in known]
    if not missing or not known:
        return None
    named = "; ".join(
        f"metadata filter on {k!r}: no chunk of this RAG has that key, so nothing matched; "
        f"{did_you_mean(k, sorted(known)).strip()}".rstrip("; ")
        for k in missing
    )
    return (
        f"{named}. Known metadata keys: {', '.join(sorted(known))} (and the chunk fields "
        "kind, path, sourceRef)"
    )


def all_of(predicates: Sequence[HitPredicate | None]) -> HitPredicate | None:
    """One predicate keeping the hits every given predicate keeps (None: keep all)."""
    given = [p for p in predicates if p is not None]
    if not given:
        return None
    if len(given) == 1:
        return given[0]
    return lambda hit: all(p(hit) for p in given)
