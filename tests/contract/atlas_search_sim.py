"""What Atlas Search computes, as pure functions the Atlas double (``atlas_double.py``) calls.

Written from Atlas's documentation, independently of the adapter's own builders, so a test on
the double checks the adapter against Atlas and not against itself:

* ``$vectorSearch``: stage validation (first stage; ``numCandidates`` ≤ 10,000 and ≥ ``limit``
  for ANN, absent with ``exact: true``), filter fields must be declared ``filter`` fields of
  the index, the query vector must have the indexed dimensions; ``vectorSearchScore`` =
  ``(1 + cosine) / 2`` for a cosine index. ANN is simulated by exact ranking.
* ``$search``: ``compound`` with ``must`` / ``should`` / ``filter`` / ``mustNot`` clauses,
  ``text``, ``equals``, ``in`` and ``exists`` operators; ``equals``/``in`` need ``token``
  fields, ``text`` a ``string`` field; ``searchScore`` is BM25 (k1 1.2, b 0.75) over the
  tokens of the field's analyzer: ``lucene.standard`` (words, lower-cased) or a custom
  analyzer of the definition's ``analyzers`` built from ``regexSplit``, ``lowercase``,
  ``icuFolding`` and ``snowballStemming`` (``porter``); anything else is refused.
* The few stages the adapter puts after a search stage: ``$project`` (with ``$meta``),
  ``$limit``, ``$match``, ``$set``/``$addFields`` with ``$meta``, ``$unset``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import regex
from bson.binary import Binary
from mongomock.filtering import filter_applies
from nltk.stem.porter import PorterStemmer
from pymongo.errors import OperationFailure

MAX_NUM_CANDIDATES = 10_000
_WORD = re.compile(r"\w+", re.UNICODE)


def failure(message: str, code: int = 8, code_name: str = "UnknownError") -> OperationFailure:
    """An ``OperationFailure`` shaped like the server's (``details`` with ``codeName``)."""
    return OperationFailure(
        message,
        code=code,
        details={"ok": 0.0, "errmsg": message, "code": code, "codeName": code_name},
    )


def plan_error(cause: str) -> OperationFailure:
    """How mongod reports a search-stage error raised by mongot."""
    return failure(f"PlanExecutor error during aggregation :: caused by :: {cause}")


# -- vectors -----------------------------------------------------------------------------------


def as_vector(value: Any) -> np.ndarray | None:
    """A stored vector (BSON binary float32 vector or array of numbers) as float64, or None."""
    if isinstance(value, Binary) and value.subtype == 9:
        return np.asarray(value.as_vector().data, dtype=np.float64)
    if isinstance(value, list) and value and all(isinstance(x, int | float) for x in value):
        return np.asarray(value, dtype=np.float64)
    return None


def filter_paths(flt: Any) -> Iterable[str]:
    """Every field path a ``$vectorSearch`` MQL filter reads."""
    if isinstance(flt, Mapping):
        for key, value in flt.items():
            if key in ("$and", "$or", "$nor"):
                for sub in value:
                    yield from filter_paths(sub)
            elif not key.startswith("$"):
                yield key


def vector_fields(definition: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {f["path"]: f for f in definition.get("fields", []) if f.get("type") == "vector"}


def declared_filters(definition: Mapping[str, Any]) -> set[str]:
    return {f["path"] for f in definition.get("fields", []) if f.get("type") == "filter"}


def check_vector_stage(stage: Mapping[str, Any], definition: Mapping[str, Any]) -> None:
    """Refuse a ``$vectorSearch`` stage the way Atlas does."""
    for required in ("index", "path", "queryVector", "limit"):
        if required not in stage:
            raise failure(f"$vectorSearch.{required} is required", 9, "FailedToParse")
    limit = stage["limit"]
    exact = bool(stage.get("exact", False))
    if exact and "numCandidates" in stage:
        raise plan_error('"numCandidates" is not allowed when "exact" is true')
    if not exact:
        if "numCandidates" not in stage:
            raise plan_error('"numCandidates" is required when "exact" is false')
        candidates = stage["numCandidates"]
        if candidates > MAX_NUM_CANDIDATES:
            raise plan_error(f'"numCandidates" must be less than or equal to {MAX_NUM_CANDIDATES}')
        if candidates < limit:
            raise plan_error('"numCandidates" must be greater than or equal to "limit"')
    if limit < 1:
        raise plan_error('"limit" must be positive')
    field = vector_fields(definition).get(stage["path"])
    if field is None:
        raise plan_error(f"Path '{stage['path']}' needs to be indexed as vector")
    query = as_vector(stage["queryVector"])
    if query is None or len(query) != field["numDimensions"]:
        raise plan_error(
            f"vector field is indexed with {field['numDimensions']} dimensions but queried "
            f"with {0 if query is None else len(query)}"
        )
    allowed = declared_filters(definition)
    for path in filter_paths(stage.get("filter") or {}):
        if path not in allowed:
            raise plan_error(f"Path '{path}' needs to be indexed as filter")


def vector_search(
    stage: Mapping[str, Any], docs: Iterable[Mapping[str, Any]]
) -> list[tuple[Any, float]]:
    """``(_id, vectorSearchScore)`` of the best ``limit`` documents, best first."""
    query = as_vector(stage["queryVector"])
    assert query is not None
    flt = stage.get("filter") or {}
    scored: list[tuple[Any, float]] = []
    for doc in docs:
        vec = as_vector(doc.get(stage["path"]))
        if vec is None or len(vec) != len(query) or not filter_applies(flt, doc):
            continue
        cos = float(vec @ query / (np.linalg.norm(vec) * np.linalg.norm(query)))
        scored.append((doc["_id"], (1.0 + cos) / 2.0))
    scored.sort(key=lambda t: -t[1])
    return scored[: stage["limit"]]


# -- full text ---------------------------------------------------------------------------------


def words(text: Any) -> list[str]:
    return _WORD.findall(text.lower()) if isinstance(text, str) else []


Analyzer = Callable[[Any], list[str]]

# Snowball's ``porter`` implements the 1980 paper, as NLTK's ORIGINAL_ALGORITHM mode does.
_PORTER = PorterStemmer(mode=PorterStemmer.ORIGINAL_ALGORITHM)


def _icu_fold(token: str) -> str:
    """ICU folding (UTR #30) as far as the tests need: case, accents, compatibility forms."""
    decomposed = unicodedata.normalize("NFKD", token.casefold())
    return unicodedata.normalize(
        "NFKC", "".join(c for c in decomposed if not unicodedata.combining(c))
    )


def _token_filter(spec: Mapping[str, Any]) -> Callable[[str], str]:
    kind = spec.get("type")
    if kind == "lowercase":
        return str.lower
    if kind == "icuFolding":
        return _icu_fold
    if kind == "snowballStemming" and spec.get("stemmerName") == "porter":
        return lambda t: str(_PORTER.stem(t, to_lowercase=False))
    raise plan_error(f"token filter {dict(spec)} is not simulated by the test double")


def _custom_analyzer(spec: Mapping[str, Any]) -> Analyzer:
    tokenizer = spec.get("tokenizer", {})
    if tokenizer.get("type") != "regexSplit" or spec.get("charFilters"):
        raise plan_error(f"analyzer {spec.get('name')!r} is not simulated by the test double")
    split = regex.compile(tokenizer["pattern"])
    filters = [_token_filter(f) for f in spec.get("tokenFilters", [])]

    def analyze(text: Any) -> list[str]:
        if not isinstance(text, str):
            return []
        tokens = [t for t in split.split(text) if t]
        for apply in filters:
            tokens = [apply(t) for t in tokens]
        return tokens

    return analyze


def field_analyzer(definition: Mapping[str, Any], path: str, *, query: bool = False) -> Analyzer:
    """The analyzer a ``string`` field is indexed with (``query``: searched with)."""
    spec = definition.get("mappings", {}).get("fields", {}).get(path, {})
    name = (spec.get("searchAnalyzer") if query else None) or spec.get("analyzer")
    if name in (None, "lucene.standard"):
        return words
    for custom in definition.get("analyzers", []):
        if custom.get("name") == name:
            return _custom_analyzer(custom)
    raise plan_error(f"analyzer {name!r} of path '{path}' is not defined")


def field_types(definition: Mapping[str, Any]) -> dict[str, str]:
    fields = definition.get("mappings", {}).get("fields", {})
    types: dict[str, str] = {}
    for path, spec in fields.items():
        for one in spec if isinstance(spec, list) else [spec]:
            types.setdefault(path, one.get("type", ""))
            if one.get("type") == "token":
                types[path] = "token"
    return types


class Bm25:
    """BM25 over the words of one field of every indexed document (Lucene's defaults).

    The statistics are the whole index's, every tenant's documents included, as Atlas keeps
    them per search index (docs/stores.md): deliberately not per RAG, like the adapter's other
    backends, so tests see the limit Atlas has."""

    def __init__(
        self, docs: Sequence[Mapping[str, Any]], path: str, definition: Mapping[str, Any]
    ) -> None:
        self.analyze = field_analyzer(definition, path)
        self.analyze_query = field_analyzer(definition, path, query=True)
        self.terms = {d["_id"]: Counter(self.analyze(d.get(path))) for d in docs}
        self.n = max(len(docs), 1)
        lengths = [sum(c.values()) for c in self.terms.values()]
        self.avg = (sum(lengths) / len(lengths)) if lengths else 1.0
        self.df: Counter[str] = Counter()
        for c in self.terms.values():
            self.df.update(c.keys())

    def score(self, doc_id: Any, query: str) -> float:
        tf = self.terms.get(doc_id, Counter())
        length = sum(tf.values())
        total = 0.0
        for term in set(self.analyze_query(query)):
            if not tf[term]:
                continue
            idf = math.log(1 + (self.n - self.df[term] + 0.5) / (self.df[term] + 0.5))
            norm = tf[term] * 2.2 / (tf[term] + 1.2 * (0.25 + 0.75 * length / self.avg))
            total += idf * norm
        return total


def _check_paths(op: str, spec: Mapping[str, Any], types: Mapping[str, str]) -> None:
    """``text`` needs a ``string`` field; ``equals``/``in`` need a ``token`` field for string
    values and a field of the value's type otherwise (``number`` for numbers)."""
    path = spec.get("path")
    paths = path if isinstance(path, list) else [path]
    value = spec.get("value")
    sample = value[0] if isinstance(value, list) and value else value
    if op == "text":
        need = "string"
    elif isinstance(sample, bool):
        need = "boolean"
    elif isinstance(sample, int | float):
        need = "number"
    else:
        need = "token"
    for p in paths:
        if op == "exists":
            if p not in types:
                raise plan_error(f"Path '{p}' is not indexed")
        elif types.get(p) != need:
            raise plan_error(f"Path '{p}' needs to be indexed as {need}")


def _clause(
    clause: Mapping[str, Any], doc: Mapping[str, Any], types: Mapping[str, str], bm25: dict
) -> float | None:
    """Score of one operator on one document, or None when it does not match."""
    ((op, spec),) = clause.items()
    if op == "compound":
        return _compound(spec, doc, types, bm25)
    _check_paths(op, spec, types)
    if op == "text":
        path = spec["path"]
        if path not in bm25:
            raise plan_error(f"Path '{path}' is not indexed")
        index = bm25[path]
        if not set(index.analyze_query(spec["query"])) & set(index.terms.get(doc["_id"], ())):
            return None
        return bm25[path].score(doc["_id"], spec["query"])
    if op == "equals":
        return 1.0 if doc.get(spec["path"]) == spec["value"] else None
    if op == "in":
        values = spec["value"] if isinstance(spec["value"], list) else [spec["value"]]
        return 1.0 if doc.get(spec["path"]) in values else None
    if op == "exists":
        return 1.0 if doc.get(spec["path"]) is not None else None
    raise plan_error(f"unsupported operator in the test double: {op}")


def _compound(
    spec: Mapping[str, Any], doc: Mapping[str, Any], types: Mapping[str, str], bm25: dict
) -> float | None:
    total = 0.0
    for clause in spec.get("filter", []):
        if _clause(clause, doc, types, bm25) is None:
            return None
    for clause in spec.get("mustNot", []):
        if _clause(clause, doc, types, bm25) is not None:
            return None
    for clause in spec.get("must", []):
        got = _clause(clause, doc, types, bm25)
        if got is None:
            return None
        total += got
    should = [s for c in spec.get("should", []) if (s := _clause(c, doc, types, bm25)) is not None]
    needed = spec.get("minimumShouldMatch", 0 if spec.get("must") or spec.get("filter") else 1)
    if spec.get("should") and len(should) < max(needed, 0):
        return None
    return total + sum(should)


def _validate(clause: Mapping[str, Any], types: Mapping[str, str]) -> None:
    """Refuse an operator on a field of the wrong type before looking at any document."""
    ((op, spec),) = clause.items()
    if op == "compound":
        for part in ("must", "should", "filter", "mustNot"):
            for sub in spec.get(part, []):
                _validate(sub, types)
    elif op in ("text", "equals", "in", "exists"):
        _check_paths(op, spec, types)
    else:
        raise plan_error(f"unsupported operator in the test double: {op}")


def text_search(
    stage: Mapping[str, Any], definition: Mapping[str, Any], docs: Sequence[Mapping[str, Any]]
) -> list[tuple[Any, float]]:
    """``(_id, searchScore)`` of every matching document, best first."""
    types = field_types(definition)
    operator = {k: v for k, v in stage.items() if k not in ("index", "count", "highlight")}
    if len(operator) != 1:
        raise plan_error("$search needs exactly one operator")
    _validate(operator, types)
    bm25 = {p: Bm25(docs, p, definition) for p, t in types.items() if t == "string"}
    scored = [(d["_id"], s) for d in docs if (s := _clause(operator, d, types, bm25)) is not None]
    scored.sort(key=lambda t: -t[1])
    return scored


# -- the stages after a search stage ----------------------------------------------------------


def _meta(value: Any, meta: Mapping[str, float]) -> Any:
    if isinstance(value, Mapping) and set(value) == {"$meta"}:
        return meta[value["$meta"]]
    return value


def apply_stages(
    rows: list[dict[str, Any]], metas: list[dict[str, float]], stages: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Run the adapter's post-search stages over the looked-up documents."""
    pairs = list(zip(rows, metas, strict=True))
    for stage in stages:
        ((name, spec),) = stage.items()
        if name == "$limit":
            pairs = pairs[: int(spec)]
        elif name == "$match":
            pairs = [(r, m) for r, m in pairs if filter_applies(spec, r)]
        elif name in ("$set", "$addFields"):
            pairs = [({**r, **{k: _meta(v, m) for k, v in spec.items()}}, m) for r, m in pairs]
        elif name == "$unset":
            drop = {spec} if isinstance(spec, str) else set(spec)
            pairs = [({k: v for k, v in r.items() if k not in drop}, m) for r, m in pairs]
        elif name == "$project":
            out = []
            for r, m in pairs:
                kept: dict[str, Any] = {"_id": r["_id"]} if spec.get("_id", 1) else {}
                for k, v in spec.items():
                    if k == "_id":
                        continue
                    if v in (1, True):
                        if k in r:
                            kept[k] = r[k]
                    else:
                        kept[k] = _meta(v, m)
                out.append((kept, m))
            pairs = out
        else:
            raise AssertionError(f"the Atlas double does not run {name} after a search stage")
    return [r for r, _ in pairs]
