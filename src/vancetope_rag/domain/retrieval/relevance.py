"""The per-turn relevance cut: which of a turn's hits are likely relevant, judged against the
turn's own candidates (docs/benchmarks.md, "What the block holds").

``topK`` fills a block whether or not its tail answers anything: on SciFact a quarter of
today's excerpts come from a relevant abstract. The cut keeps a hit when

- it is the turn's first hit (a block that was going to exist still does); or
- its cosine is within the RAG's calibrated ``gap`` of the turn's best cosine and, in hybrid,
  its fused score is at least :data:`FUSED_SHARE` of the turn's best fused score (within the
  gap, a hit neither side ranks well is the usual irrelevant one), and it carries at least
  :data:`WORDS_SHARE` of the turn's words that the turn's best-worded hit carries (a near
  neighbour in cosine that shares few of the turn's words is the usual off-topic one; see
  :mod:`.terms`); with ``auto`` the gap is at most :data:`FLOOR_GAP_SHARE` of how far the
  best stands above the RAG's noise floor (its calibrated ``minScore``): a hit keeps at least
  a quarter of the best's height over the noise; or
- the lexical side ranks it first (the exact words of the turn, whatever its cosine); or
- in hybrid, it carries more of the turn's words than the first hit does and its fused score
  is at least :data:`WORDED_FUSED_SHARE` of the best's, whatever its cosine: both sides rank
  it well and it is closer to the turn's wording than the hit ranked first.

The word rules need the turn's text; without it (or for a turn of function words only, a
"Why?", one in a script written without spaces, or one whose words no hit carries, a
question in another language than its documents) they are skipped.
In dense mode (no fused scores) only the gap applies. The order of the hits is kept, ``topK``
stays the maximum and ``minScore`` the cosine floor: the cut only drops. Each dropped hit
carries the reason it was dropped.

The ``gap`` is the RAG's own (:func:`derive_gap`, measured by the calibrator from pseudo-queries
drawn from the RAG's chunks): a model whose cosines crowd near 0.85 (e5) gets a gap as narrow
as its scale. The gap is one number per RAG; the floor makes it per turn: a turn whose best
barely clears the noise (e5 on a handbook: best 0.85 over a floor of 0.82, its neighbours at
0.83-0.84) cannot tell its tail from the noise by a RAG-wide gap. Pure rules, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vancetope_rag.domain.records import Chunk, ChunkKind, Hit
from vancetope_rag.domain.retrieval.calibration import GAP_PER_SPREAD, PSEUDO_QUERIES, Calibration
from vancetope_rag.domain.retrieval.terms import coverage, turn_words
from vancetope_rag.errors import InvalidInputError

__all__ = [
    "DENSE_GAP_SHARE",
    "FLOOR_GAP_SHARE",
    "FUSED_SHARE",
    "GAP_PER_SPREAD",
    "PSEUDO_QUERIES",
    "RELEVANCE_AUTO",
    "RELEVANCE_OFF",
    "WORDED_FUSED_SHARE",
    "WORDS_SHARE",
    "AppliedCut",
    "CutResult",
    "Dropped",
    "RelevanceCut",
    "cosine",
    "cut_by_relevance",
    "derive_gap",
    "draw_pseudo_queries",
    "parse_relevance_cut",
    "pick_pseudo_sources",
    "pseudo_query",
    "resolve_floor",
    "resolve_gap",
    "spread_of",
]

#: ``relevanceCut`` values: the RAG's calibrated gap, or no cut at all.
RELEVANCE_AUTO: Literal["auto"] = "auto"
RELEVANCE_OFF: Literal["off"] = "off"

#: A ``relevanceCut`` as given: ``auto``, ``off`` or a fixed gap (cosine, 0-2).
RelevanceCut = float | Literal["auto", "off"]

#: Within the gap, a hybrid hit is kept when its fused score is at least this share of the
#: turn's best fused score (docs/benchmarks.md: the share that moved the SciFact curve).
FUSED_SHARE = 0.7

#: Within the gap, a hit is kept when it carries at least this share of the turn's words that
#: the turn's best-worded hit carries (:func:`~.terms.coverage`). On SciFact's claims it drops
#: 37 hybrid excerpts, none from a relevant abstract, and 146 dense ones, 7 relevant
#: (docs/benchmarks.md, "What the block holds").
WORDS_SHARE = 0.3

#: Beyond the gap, a hybrid hit that carries more of the turn's words than the first hit is
#: kept when its fused score is at least this share of the best's: the relevant abstract
#: second in the fused order (fused share 0.83-0.84) below an off-topic first hit (SciFact:
#: 2 of the 6 turns the cut otherwise loses their only relevant excerpt).
WORDED_FUSED_SHARE = 0.8

#: With ``auto``, a turn's gap is at most this share of how far its best cosine stands above
#: the RAG's noise floor (the calibrated ``minScore``): a hit must keep a quarter of the best's
#: height over the noise. It binds where the best barely clears the floor: e5 on a 31-page
#: handbook (cosines 0.82-0.92, floor 0.8217, gap 0.042-0.047) drops 39-41 % of the hybrid
#: excerpts instead of 28 %, every right page kept; all-MiniLM on SciFact (floor 0.35, gap 0.15) is
#: all but unchanged (docs/benchmarks.md, "bench/e5_handbook_block.py").
FLOOR_GAP_SHARE = 0.75

#: ``auto`` in ``dense`` mode cuts at this share of the calibrated gap: in hybrid the fused
#: share drops part of what is within the gap, in dense only the gap and the turn's words
#: can, so at one gap a dense block keeps more. At 0.78 x 0.1579 = 0.123 the dense block
#: meets precision 0.42 at 0.68x today's excerpts, recall 0.98x, hit turns 0.98x on SciFact
#: (docs/benchmarks.md, "What the block holds"; shares 0.76-0.80 did in an ad hoc replay of
#: the bench's candidates that no bench prints).
DENSE_GAP_SHARE = 0.78

#: A pseudo-query is one sentence of this many words.
_MIN_WORDS, _MAX_WORDS = 8, 40
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class Dropped:
    """A candidate the cut (or the token budget) left out of the block, and why."""

    hit: Hit
    reason: str

    def to_json(self) -> dict[str, object]:
        return {**self.hit.to_json(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class AppliedCut:
    """What one turn's hits were cut by, in that cut's own scale: the rule a surface that
    shows the cut names (the REST test query's ``cut``), not the RAG's gap it started from."""

    #: ``gap``: a cosine gap below the turn's best cosine; ``rerank``: the reranker's
    #: calibrated rule on its scores.
    by: Literal["gap", "rerank"]
    #: The gap this turn used (after the floor narrowed it), or the reranker rule's value in
    #: the reranker's scale.
    value: float
    #: ``rerank``: ``relative`` (within ``value`` of the best) or ``absolute`` (``value`` or
    #: more); None for a gap.
    rule: Literal["relative", "absolute"] | None = None
    #: ``rerank``: ``provider:model`` the rule was measured with.
    reranker: str | None = None
    #: ``gap``: the RAG's noise floor when it narrowed the gap for this turn, and the gap it
    #: narrowed; None when the gap was used as it was.
    floor: float | None = None
    narrowed_from: float | None = None
    #: The rule in words (in hybrid, a gap's fused share too).
    keeps: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "by": self.by,
            "value": self.value,
            "rule": self.rule,
            "reranker": self.reranker,
            "narrowed": self.narrowed_from is not None,
            "floor": self.floor,
            "keeps": self.keeps,
        }


@dataclass(frozen=True, slots=True)
class CutResult:
    """The hits a cut kept, in their order, the ones it dropped with their reasons, and what
    it cut by (None: no cut)."""

    kept: tuple[Hit, ...]
    dropped: tuple[Dropped, ...] = ()
    cut: AppliedCut | None = None

    def cut_json(self) -> dict[str, object]:
        """What the hits were cut by, as REST and ``query --json --explain`` answer it."""
        return self.cut.to_json() if self.cut else {"by": "none"}


def cut_by_relevance(
    hits: Sequence[Hit], gap: float | None, floor: float | None = None, query: str | None = None
) -> CutResult:
    """The hits of one turn, cut by relevance against each other (see the module).

    Args:
        hits: The turn's selected hits in their order (after ``minScore``,
            ``maxPerDocument`` and ``topK``; the reranker's order when there is one).
        gap: The largest cosine distance below the turn's best cosine a hit may sit; None
            keeps every hit (no cut).
        floor: The RAG's noise floor (:func:`resolve_floor`); the turn's gap is then at most
            :data:`FLOOR_GAP_SHARE` of the best's height above it. None: the gap alone.
        query: The turn's text, for the word rules (None: they are skipped).
    """
    if gap is None:
        return CutResult(tuple(hits))
    best = max((h.score for h in hits), default=0.0)
    why = ""
    narrowed_from = narrowed_by = None
    if hits and floor is not None and FLOOR_GAP_SHARE * (best - floor) < gap:
        height = best - floor
        narrowed_from, narrowed_by = gap, floor
        gap = FLOOR_GAP_SHARE * max(0.0, height)
        why = f" ({FLOOR_GAP_SHARE:.2f} of the best's {height:.3f} over the floor {floor:.4f})"
    fused = [h.fused_score for h in hits if h.fused_score is not None]
    best_fused = max(fused) if fused and len(fused) == len(hits) else None
    fused_rule = f", fused score {FUSED_SHARE:.2f} of the best's or more" if best_fused else ""
    words = coverage(turn_words(query), [h.text for h in hits]) if query and hits else []
    best_words = max(words, default=0.0)
    if best_words <= 0.0:
        words = []  # no hit carries the turn's words: nothing to judge them by
    words_rule = (
        f", {WORDS_SHARE:.2f} of the best-worded hit's share of the turn's words or more"
        if words
        else ""
    )
    applied = AppliedCut(
        "gap",
        gap,
        floor=narrowed_by,
        narrowed_from=narrowed_from,
        keeps=f"cosine within {gap:.3f} of the best{why}{fused_rule}{words_rule}",
    )
    if len(hits) < 2:
        return CutResult(tuple(hits), cut=applied)
    kept: list[Hit] = []
    dropped: list[Dropped] = []
    for i, hit in enumerate(hits):
        below = best - hit.score
        share = hit.fused_score / best_fused if best_fused and hit.fused_score is not None else None
        if i == 0 or hit.lexical_rank == 1:
            reason = None
        elif below > gap + 1e-12:
            reason = f"gap {below:.3f} > {gap:.3f}{why}"
        elif share is not None and share < FUSED_SHARE:
            reason = f"fused {share:.2f} of best < {FUSED_SHARE:.2f}"
        elif words and words[i] < WORDS_SHARE * best_words:
            reason = (
                f"words {words[i]:.2f} of the turn's < {WORDS_SHARE:.2f} of the best-worded "
                f"hit's {best_words:.2f}"
            )
        else:
            reason = None
        if reason is not None and (
            words and share is not None and words[i] > words[0] and share >= WORDED_FUSED_SHARE
        ):
            reason = None  # closer to the turn's words than the first hit, ranked well by both
        if reason is None:
            kept.append(hit)
        else:
            dropped.append(Dropped(hit, reason))
    return CutResult(tuple(kept), tuple(dropped), applied)


def parse_relevance_cut(value: object, where: str = "relevanceCut") -> RelevanceCut | None:
    """A ``relevanceCut`` as given: ``auto`` or ``off`` (any case), a gap from 0 to 2, or None.

    Raises:
        InvalidInputError: Anything else; the message names ``where`` and the forms.
    """
    if value is None:
        return None
    wrong = f"{where} must be 'auto', 'off' or a cosine gap from 0 to 2, got {value!r}"
    if isinstance(value, str):
        text = value.strip().lower()
        if text in (RELEVANCE_AUTO, RELEVANCE_OFF):
            return RELEVANCE_AUTO if text == RELEVANCE_AUTO else RELEVANCE_OFF
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(wrong) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(wrong)
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 2.0:
        raise InvalidInputError(wrong)
    return number


def resolve_gap(
    value: RelevanceCut | None, calibrated: float | None, mode: str = "hybrid"
) -> float | None:
    """The gap a turn cuts with: a fixed one as it is; ``auto`` the RAG's calibrated gap, times
    :data:`DENSE_GAP_SHARE` in ``dense`` mode (no cut while the RAG has none: too few chunks
    to measure); ``off`` or None no cut."""
    if value is None or value == RELEVANCE_OFF:
        return None
    if value == RELEVANCE_AUTO:
        if calibrated is None:
            return None
        return round(calibrated * DENSE_GAP_SHARE, 4) if mode == "dense" else calibrated
    return float(value)


def resolve_floor(value: RelevanceCut | None, calibration: Calibration | None) -> float | None:
    """The noise floor a turn's cut measures the best's height from: the RAG's calibrated
    ``minScore`` with ``auto`` (when the calibration has a gap: no gap, no cut); None for a
    fixed gap (that gap as given), ``off`` or None."""
    if value != RELEVANCE_AUTO or calibration is None or calibration.gap is None:
        return None
    return calibration.min_score


def _rank(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def pick_pseudo_sources(source_refs: Sequence[str], n: int = PSEUDO_QUERIES) -> list[str]:
    """``n`` of a RAG's sources, chosen by a hash of their ref: the same sources every time
    for the same RAG, spread over it whatever order the refs were written in."""
    return sorted(source_refs, key=_rank)[:n]


def pseudo_query(source_ref: str, text: str) -> str | None:
    """One sentence of 8-40 words of a chunk's text (chosen by a hash of its source ref and
    the sentence: the same one for the same text, whatever id a rebuild gives the chunk), or
    None when the chunk has none."""
    sentences = [
        s.strip() for s in _SENTENCE_END.split(text) if _MIN_WORDS <= len(s.split()) <= _MAX_WORDS
    ]
    if not sentences:
        return None
    return min(sentences, key=lambda s: _rank(f"{source_ref}\n{s}"))


def draw_pseudo_queries(chunks: Sequence[Chunk]) -> list[tuple[str, str]]:
    """One pseudo-query per source of ``chunks``: ``(source ref, sentence)``, from the source's
    first content chunk (by a hash of its text) that has a sentence of 8-40 words; in the
    order the sources first appear. Chosen by content, never by chunk id: the same texts give
    the same pseudo-queries after a rebuild, so the calibrated gap does not move with it."""
    by_source: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        if chunk.kind == ChunkKind.CONTENT.value:
            by_source.setdefault(chunk.source_ref, []).append(chunk)
    drawn: list[tuple[str, str]] = []
    for ref, group in by_source.items():
        for chunk in sorted(group, key=lambda c: _rank(f"{ref}\n{c.text}")):
            sentence = pseudo_query(ref, chunk.text)
            if sentence is not None:
                drawn.append((ref, sentence))
                break
    return drawn


def derive_gap(spreads: Sequence[float]) -> float | None:
    """The RAG's gap: :data:`GAP_PER_SPREAD` of the median spread of its pseudo-queries (each
    the cosine of the query's source over the background of its turn: the median cosine of
    dense ranks 10-30); None without a spread (nothing measured)."""
    finite = [float(s) for s in spreads if math.isfinite(s)]
    if not finite:
        return None
    return round(max(0.0, GAP_PER_SPREAD * statistics.median(finite)), 4)


def spread_of(source_best: float, ranked: Sequence[float]) -> float | None:
    """One pseudo-query's spread: its source's best cosine minus the median cosine of the
    dense ranks 10-30 of ``ranked`` (the turn's dense cosines, best first); None with fewer
    than 10 ranks (a RAG too small to have a background)."""
    background = list(ranked[9:30])
    if not background:
        return None
    return source_best - statistics.median(background)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 for a zero vector)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
