"""Which order a list of hits is in, and what each of a hit's numbers is.

A hit carries up to three numbers that mean different things: its cosine similarity to the
question (``score``: what ``minScore`` gates and the block's ``(score 0.81)`` shows), the
fused score of a hybrid query (reciprocal-rank fusion of the dense and lexical ranks: what
orders hybrid hits) and a reranker's score (what orders the hits when the rerank stage ran).
Shown side by side without names, "best first" over cosines of 0.885, 0.835, 0.839 reads as
a mistake; every surface that lists hits (CLI ``query`` and ``context --explain``, REST, the
web page) names the order and labels each number with these helpers. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vancetope_rag.domain.records import Hit

__all__ = [
    "ORDER_TEXT",
    "HitOrder",
    "Verdict",
    "explain_candidates",
    "fused_json",
    "hit_numbers",
    "order_of",
]

#: What ordered a list of hits: the cosine (dense), the fused score (hybrid), the reranker.
HitOrder = Literal["cosine", "fused", "rerank"]

#: The order said in words (CLI headers, the web page's summary).
ORDER_TEXT: dict[HitOrder, str] = {
    "cosine": "by cosine similarity (dense)",
    "fused": "by fused score (hybrid: dense and lexical ranks fused), not by cosine",
    "rerank": "by the reranker's score, not by cosine",
}


def order_of(hits: Sequence[Hit]) -> HitOrder:
    """The order ``hits`` are in: the reranker's when it scored them, else the fused order of
    a hybrid query, else the cosine's."""
    if any(h.rerank_score is not None for h in hits):
        return "rerank"
    if any(h.fused_score is not None for h in hits):
        return "fused"
    return "cosine"


def fused_json(hit: Hit) -> dict[str, object]:
    """A hybrid hit's fused score and ranks as REST names them (empty for a dense hit)."""
    if hit.fused_score is None:
        return {}
    return {
        "fusedScore": round(hit.fused_score, 6),
        "denseRank": hit.dense_rank,
        "lexicalRank": hit.lexical_rank,
    }


def hit_numbers(hit: Hit) -> str:
    """A hit's numbers, each labelled, the one that ordered it first: ``fused 0.0323 (dense
    #2, lexical #1)  cosine 0.835``; ``rerank 0.912  cosine 0.835``; ``cosine 0.835``."""
    parts = [] if hit.rerank_score is None else [f"rerank {hit.rerank_score:.3f}"]
    fused = None
    if hit.fused_score is not None:
        dense = f"#{hit.dense_rank}" if hit.dense_rank else "-"
        lexical = f"#{hit.lexical_rank}" if hit.lexical_rank else "-"
        fused = f"fused {hit.fused_score:.4f} (dense {dense}, lexical {lexical})"
    if fused is not None and hit.rerank_score is None:
        parts.append(fused)
    parts.append(f"cosine {hit.score:.3f}")
    if fused is not None and hit.rerank_score is not None:
        parts.append(fused)
    return "  ".join(parts)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One candidate of a turn and why it was shown in the block or left out."""

    hit: Hit
    shown: bool
    #: ``shown`` or what left it out: ``threshold: …``, ``cap: …``, ``topK: …``,
    #: ``cut: …`` (the relevance cut) or ``budget: …`` (the token budget).
    why: str

    def to_json(self) -> dict[str, object]:
        return {**self.hit.to_json(), "shown": self.shown, "why": self.why}


def explain_candidates(
    candidates: Sequence[Hit],
    shown: Sequence[Hit],
    dropped: Sequence[tuple[Hit, str]],
    *,
    min_score: float | None,
    max_per_doc: int | None,
    top_k: int,
) -> list[Verdict]:
    """Every candidate of a turn with why it was shown or left out, in the order the turn
    used.

    Args:
        candidates: The turn's candidates in the retrieval's final order, unfiltered (no
            threshold, cap or ``topK``): what :func:`~vancetope_rag.domain.retrieval.
            select_hits` chose the turn's hits from.
        shown: The excerpts in the block.
        dropped: The selected hits the relevance cut or the budget left out, with the
            reason each was given (a budget's starts with ``over``).
        min_score: The cosine floor the turn used (None: none).
        max_per_doc: The per-document cap the turn used (None: none).
        top_k: The most hits the turn selects.
    """
    shown_ids = {h.chunk_id for h in shown}
    dropped_why = {
        h.chunk_id: ("budget: " if why.startswith("over ") else "cut: ") + why for h, why in dropped
    }
    verdicts: list[Verdict] = []
    seen: set[str] = set()
    per_doc: dict[str, int] = {}
    selected = 0
    for hit in candidates:
        if hit.chunk_id in seen:
            continue
        seen.add(hit.chunk_id)
        if hit.chunk_id in shown_ids:
            verdicts.append(Verdict(hit, True, "shown"))
        elif hit.chunk_id in dropped_why:
            verdicts.append(Verdict(hit, False, dropped_why[hit.chunk_id]))
        elif min_score is not None and hit.score < min_score:
            why = f"threshold: cosine {hit.score:.3f} < minScore {min_score:.4f}"
            verdicts.append(Verdict(hit, False, why))
            continue
        elif max_per_doc is not None and per_doc.get(hit.source_ref, 0) >= max_per_doc:
            why = f"cap: its document already has maxPerDocument={max_per_doc}"
            verdicts.append(Verdict(hit, False, why))
            continue
        elif selected >= top_k:
            verdicts.append(Verdict(hit, False, f"topK: past the {top_k} hits a turn selects"))
            continue
        else:  # selected by the same rule, yet not in this decision: a concurrent write
            verdicts.append(Verdict(hit, False, "not in this turn's hits (the index changed)"))
        per_doc[hit.source_ref] = per_doc.get(hit.source_ref, 0) + 1
        selected += 1
    # the turn's hits the wider look did not find (written meanwhile) still show
    for hit in shown:
        if hit.chunk_id not in seen:
            verdicts.append(Verdict(hit, True, "shown"))
    for hit, _ in dropped:
        if hit.chunk_id not in seen:
            verdicts.append(Verdict(hit, False, dropped_why[hit.chunk_id]))
    return verdicts
