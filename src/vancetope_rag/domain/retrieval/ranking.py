"""Which hits a query returns: argument checks, the retrieval mode, reciprocal-rank fusion of
the dense and lexical candidate lists, the ``minScore`` threshold, the per-document cap and the
over-fetch that keeps ``topK`` filled when the cap drops hits.

Pure rules, no I/O: the store's ranked answer comes in through a ``fetch`` callable, so the
whole policy is unit-tested without a store. The same rules serve every store: each returns a
dense and a lexical candidate list, and fusion, the cosine gate and the cap run here.

``minScore`` means the same in both modes: each hit is gated on its own cosine similarity
(``Hit.score``), whichever list found it. Fused scores only order the hits.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.calibration import AUTO
from vancetope_rag.errors import InvalidInputError

__all__ = [
    "MAX_TOP_K",
    "Candidates",
    "FusedHits",
    "FusedRank",
    "FusionParams",
    "RetrievalMode",
    "check_query_args",
    "collect_hits",
    "first_fetch",
    "fuse",
    "fuse_ranks",
    "fused_hits",
    "parse_retrieval_mode",
    "select_hits",
]


#: What names a candidate in :func:`fuse_ranks`: a chunk id, or a store's row id.
K = TypeVar("K", str, int)


class RetrievalMode(enum.StrEnum):
    """How a query ranks chunks: vector similarity alone, or fused with full-text relevance."""

    DENSE = "dense"
    HYBRID = "hybrid"


def parse_retrieval_mode(value: object, *, where: str = "mode") -> RetrievalMode:
    """A retrieval mode from user input (any case, surrounding whitespace allowed).

    Raises:
        InvalidInputError: ``value`` is not ``dense`` or ``hybrid``.
    """
    if isinstance(value, str):
        try:
            return RetrievalMode(value.strip().lower())
        except ValueError:
            pass
    accepted = ", ".join(m.value for m in RetrievalMode)
    raise InvalidInputError(f"{where} must be one of {accepted}, got {value!r}")


@dataclass(frozen=True, slots=True)
class FusionParams:
    """Reciprocal-rank fusion: a chunk scores ``w_dense / (k + dense rank) + w_lexical / (k +
    lexical rank)`` (a list that did not find it adds nothing).

    ``depth``: each side returns at least this many candidates, whatever ``topK``, so a
    chunk's fused score does not depend on how many hits the caller wanted.
    """

    k: float = 20.0
    dense_weight: float = 1.0
    lexical_weight: float = 1.0
    depth: int = 100

    def __post_init__(self) -> None:
        if not self.k > 0 or self.dense_weight < 0 or self.lexical_weight < 0 or self.depth < 1:
            raise InvalidInputError(
                "fusion needs k > 0, weights >= 0 and a depth of at least 1, got "
                f"k={self.k}, weights={self.dense_weight}/{self.lexical_weight}, "
                f"depth={self.depth}"
            )


@dataclass(frozen=True, slots=True)
class FusedRank(Generic[K]):
    """One candidate's place after fusion, before its hit is read: ``key`` names it (a chunk
    id, or a store's row id), ``score`` is its cosine (the dense list's when both found it)."""

    key: K
    score: float
    fused_score: float
    dense_rank: int | None
    lexical_rank: int | None
    lexical_score: float | None


def fuse_ranks(
    dense: Sequence[tuple[K, float]],
    lexical: Sequence[tuple[K, float, float | None]],
    params: FusionParams,
    *,
    tie_break: Callable[[Sequence[K]], Mapping[K, str]] | None = None,
) -> list[FusedRank[K]]:
    """Reciprocal-rank fusion of two ranked lists of one RAG, on keys alone, so a store can
    fuse before it reads any chunk row and read only the hits that get selected.

    Args:
        dense: ``(key, cosine)``, best first.
        lexical: ``(key, cosine, lexical score)``, best first.
        params: The fusion's constant and weights.
        tie_break: The chunk id of each key given, for keys that tie on fused score and
            cosine (called once, only when some do); None: the keys are the chunk ids.

    Returns:
        Every candidate once, ordered by fused score, then cosine, then chunk id.
    """
    ranks: dict[K, list[Any]] = {}  # key → [cosine, fused, dense rank, lexical rank, lexical score]
    for rank, (key, cosine) in enumerate(dense, 1):
        if key not in ranks:
            ranks[key] = [cosine, params.dense_weight / (params.k + rank), rank, None, None]
    for rank, (key, cosine, lexical_score) in enumerate(lexical, 1):
        seen = ranks.get(key)
        if seen is None:
            ranks[key] = [cosine, 0.0, None, None, None]
            seen = ranks[key]
        elif seen[3] is not None:
            continue
        seen[1] += params.lexical_weight / (params.k + rank)
        seen[3], seen[4] = rank, lexical_score
    fused = [FusedRank(key, *values) for key, values in ranks.items()]
    if tie_break is None:
        fused.sort(key=lambda f: (-f.fused_score, -f.score, f.key))
        return fused
    fused.sort(key=lambda f: (-f.fused_score, -f.score))
    tied: set[K] = set()
    for a, b in itertools.pairwise(fused):
        if a.fused_score == b.fused_score and a.score == b.score:
            tied.update((a.key, b.key))
    if tied:
        ids = tie_break(sorted(tied))
        fused.sort(key=lambda f: (-f.fused_score, -f.score, ids.get(f.key, "")))
    return fused


class FusedHits:
    """Fused candidates, in order, whose hits are read in batches as iteration reaches them:
    selecting ``topK`` hits usually reads a few rows, not the whole fusion depth.
    ``read(ranks)`` returns the hits of those ranks in their order, leaving out any whose row
    is gone; a store reads them from the committed state the ranks came from, so iterate
    inside the store's snapshot. Read hits are kept: iterating again reads nothing."""

    _FIRST_BATCH = 16

    def __init__(
        self,
        ranks: Sequence[FusedRank[Any]],
        read: Callable[[Sequence[FusedRank[Any]]], list[Hit]],
    ) -> None:
        self._ranks = ranks
        self._read = read
        self._hits: list[Hit] = []
        self._done = 0  # ranks read so far

    def __iter__(self) -> Iterator[Hit]:
        i = 0
        while True:
            while i >= len(self._hits) and self._done < len(self._ranks):
                batch = self._ranks[self._done : self._done + max(self._FIRST_BATCH, self._done)]
                self._done += len(batch)
                self._hits += self._read(batch)
            if i >= len(self._hits):
                return
            yield self._hits[i]
            i += 1


def _fused_hit(hit: Hit, rank: FusedRank[Any]) -> Hit:
    return dataclasses.replace(
        hit,
        score=rank.score,
        dense_rank=rank.dense_rank,
        lexical_rank=rank.lexical_rank,
        lexical_score=rank.lexical_score,
        fused_score=rank.fused_score,
    )


def fused_hits(dense: Sequence[Hit], lexical: Sequence[Hit], params: FusionParams) -> FusedHits:
    """:func:`fuse` with each hit copied only when it is first looked at."""
    by_id: dict[str, Hit] = {}
    for hit in (*lexical, *dense):  # the dense list's hit wins: its cosine orders the fusion
        by_id[hit.chunk_id] = hit
    ranks = fuse_ranks(
        [(h.chunk_id, h.score) for h in dense],
        [(h.chunk_id, h.score, h.lexical_score) for h in lexical],
        params,
    )
    return FusedHits(ranks, lambda batch: [_fused_hit(by_id[r.key], r) for r in batch])


def fuse(dense: Sequence[Hit], lexical: Sequence[Hit], params: FusionParams) -> list[Hit]:
    """Merge two ranked candidate lists of one RAG by reciprocal rank.

    Hits are matched by ``chunk_id``. Each returned hit keeps its cosine ``score`` and carries
    ``dense_rank`` / ``lexical_rank`` (1-based, None when that list lacks it),
    ``lexical_score`` and ``fused_score``. Order: fused score, then cosine, then chunk id
    (deterministic for equal scores).
    """
    return list(fused_hits(dense, lexical, params))


@dataclass(frozen=True, slots=True)
class Candidates:
    """One round of a store's answer for :func:`collect_hits`.

    Attributes:
        hits: The candidates in the order hits are selected (cosine order for a dense query,
            fused order for a hybrid one).
        complete: The RAG has no chunk beyond these (asking for more cannot add one).
        cosine_floor: No chunk left out scores a higher cosine than this; None if unknown.
    """

    hits: Iterable[Hit]
    complete: bool
    cosine_floor: float | None

    @classmethod
    def dense(cls, ranked: Sequence[Hit], asked: int) -> Candidates:
        """The store's ``asked`` best chunks by cosine, best first."""
        return cls(ranked, len(ranked) < asked, ranked[-1].score if ranked else None)

    @classmethod
    def hybrid(
        cls, dense: Sequence[Hit], lexical: Sequence[Hit], asked: int, params: FusionParams
    ) -> Candidates:
        """Both lists of one round (``asked`` per side), fused. Every chunk missing from the
        dense list scores at most its last cosine, so that is the floor."""
        return cls(
            fused_hits(dense, lexical, params),
            len(dense) < asked,
            dense[-1].score if dense else None,
        )


#: The largest ``topK`` a caller may ask for.
MAX_TOP_K = 1000

#: The store is never asked for more than ``20 * top_k + 1000`` candidates (see
#: :func:`collect_hits`): past that, a per-document cap is starving on a few huge documents
#: and returning fewer hits beats scanning the whole RAG.
_FETCH_FACTOR, _FETCH_SLACK = 20, 1000

#: ``fetch(n)``: the store's answer with ``n`` candidates (per side): a ranked list of hits
#: (dense, best first) or :class:`Candidates`.
Fetch = Callable[[int], "Sequence[Hit] | Candidates"]


def check_query_args(top_k: object, min_score: object, max_per_doc: object) -> None:
    """Refuse query arguments that cannot be used, with a message naming the wire field.

    Raises:
        InvalidInputError: ``top_k`` is not an integer from 1 to :data:`MAX_TOP_K`,
            ``min_score`` is neither ``auto`` nor within ``[-1, 1]`` or ``max_per_doc`` is not
            a positive integer.
    """
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"topK must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    if min_score is not None and min_score != AUTO:  # auto: the RAG's calibration
        if not isinstance(min_score, int | float) or isinstance(min_score, bool):
            raise InvalidInputError(f"minScore must be a number or 'auto', got {min_score!r}")
        if not -1.0 <= float(min_score) <= 1.0:
            raise InvalidInputError(f"minScore must be between -1 and 1, got {min_score!r}")
    if max_per_doc is not None and (
        not isinstance(max_per_doc, int) or isinstance(max_per_doc, bool) or max_per_doc < 1
    ):
        raise InvalidInputError(f"maxPerDocument must be a positive integer, got {max_per_doc!r}")


def first_fetch(top_k: int, max_per_doc: int | None) -> int:
    """How many candidates to ask the store for first.

    Without a cap, exactly ``top_k``. With one, more: the cap drops a document's extra hits,
    and a tight cap (1) drops the most.
    """
    if max_per_doc is None:
        return top_k
    return top_k * max(2, 4 // max_per_doc) + 8


def select_hits(
    ranked: Iterable[Hit],
    top_k: int,
    min_score: float | None,
    max_per_doc: int | None,
    keep: Callable[[Hit], bool] | None = None,
) -> list[Hit]:
    """The hits to return from candidates in selection order.

    Skips every hit whose own cosine is below ``min_score`` (in a fused order a lower one may
    follow a higher one), hits ``keep`` refuses (the post-filter) and hits of a document that
    already has ``max_per_doc`` of them, and keeps at most ``top_k``.
    """
    hits: list[Hit] = []
    per_doc: dict[str, int] = {}
    for hit in ranked:
        if min_score is not None and hit.score < min_score:
            continue
        if keep is not None and not keep(hit):
            continue
        if max_per_doc is not None:
            seen = per_doc.get(hit.source_ref, 0)
            if seen >= max_per_doc:
                continue
            per_doc[hit.source_ref] = seen + 1
        hits.append(hit)
        if len(hits) == top_k:
            break
    return hits


def _exhausted(
    found: Candidates, fetched: int, top_k: int, min_score: float | None, selected: int
) -> bool:
    """Whether asking the store for more candidates cannot add a hit (or is not worth it)."""
    if selected == top_k or found.complete:  # full, or the RAG has no more chunks
        return True
    floor = found.cosine_floor
    if floor is not None and min_score is not None and floor < min_score:
        return True  # every chunk left out scores below the threshold
    return fetched >= _FETCH_FACTOR * top_k + _FETCH_SLACK


def collect_hits(
    fetch: Fetch,
    *,
    top_k: int,
    min_score: float | None = None,
    max_per_doc: int | None = None,
    min_fetch: int = 0,
    keep: Callable[[Hit], bool] | None = None,
) -> list[Hit]:
    """Up to ``top_k`` hits in the candidates' order, each with a cosine of at least
    ``min_score`` and kept by ``keep``, at most ``max_per_doc`` per source; over-fetches (4x
    per round) while the cap or the filter leaves ``top_k`` unfilled and more candidates may
    help.

    Args:
        fetch: ``fetch(n)`` returns the store's answer with ``n`` candidates (per side).
        top_k: How many hits to return at most (checked by :func:`check_query_args`).
        min_score: Cosine threshold; ``None`` keeps every hit.
        max_per_doc: Cap per ``source_ref``; ``None`` for no cap.
        min_fetch: Ask for at least this many candidates (a hybrid query's fusion depth).
        keep: The post-filter: conditions the store could not apply itself (a path prefix,
            a chunk's own metadata; see :mod:`vancetope_rag.domain.retrieval.metadata_filters`).
            Past ``20 * top_k + 1000`` candidates the search stops, so a filter that keeps very
            few chunks of a large RAG may return fewer than ``top_k`` hits.

    Returns:
        The selected hits, best first.
    """
    check_query_args(top_k, min_score, max_per_doc)
    fetched = max(first_fetch(top_k, max_per_doc), min_fetch)
    while True:
        answer = fetch(fetched)
        found = answer if isinstance(answer, Candidates) else Candidates.dense(answer, fetched)
        hits = select_hits(found.hits, top_k, min_score, max_per_doc, keep)
        if _exhausted(found, fetched, top_k, min_score, len(hits)):
            return hits
        fetched *= 4
