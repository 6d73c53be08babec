"""The relevance cut of a turn whose hits a reranker ordered (the rerank stage
reorders the top candidates before the cut, with its own calibration of the cut).

When the reranker scored the turn's hits and the RAG holds a rerank calibration for that
reranker (:class:`~vancetope_rag.domain.retrieval.rerank_calibration.RerankCalibration`), the
hits are judged by the reranker's scores with its rule, not by their cosines: the reranker
read the question and each text together, so a hit it scores low goes however close its
cosine is to the best one's. The turn's first hit is kept (a block that was going to exist
still does); a hit the reranker left unscored goes. Each dropped hit's reason starts with
``rerank``. Without a reranker's scores (no reranker, or an outage skipped it this turn) or
without a calibration of this reranker (not measured yet, another model since), the cosine
cut applies as without a reranker (:func:`~vancetope_rag.domain.retrieval.relevance.
cut_by_relevance`). Pure rules, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.calibration import (
    CALIBRATION_GROWTH,
    MIN_CALIBRATION_CHUNKS,
    Calibration,
)
from vancetope_rag.domain.retrieval.relevance import (
    AppliedCut,
    CutResult,
    Dropped,
    cut_by_relevance,
)
from vancetope_rag.domain.retrieval.rerank_calibration import RERANK_RULE_ID, RerankCalibration

__all__ = ["cut_by_rerank", "cut_turn", "rerank_calibration_due"]


def cut_by_rerank(hits: Sequence[Hit], rule: RerankCalibration) -> CutResult:
    """The hits of one turn, cut by the reranker's scores with ``rule`` (see the module).

    Args:
        hits: The turn's selected hits in the reranker's order, each with its
            ``rerank_score`` (the unscored ones after the scored).
        rule: The RAG's calibration of this reranker.
    """
    applied = AppliedCut(
        "rerank", rule.value, rule=rule.rule, reranker=rule.reranker, keeps=rule.describe()
    )
    scored = [h.rerank_score for h in hits if h.rerank_score is not None]
    if len(hits) < 2 or not scored:
        return CutResult(tuple(hits), cut=applied)
    best = max(scored)
    kept: list[Hit] = []
    dropped: list[Dropped] = []
    for i, hit in enumerate(hits):
        score = hit.rerank_score
        if i == 0:
            kept.append(hit)
        elif score is None:
            dropped.append(Dropped(hit, "rerank: the reranker did not score it"))
        elif rule.rule == "relative" and best - score > rule.value + 1e-12:
            below = best - score
            dropped.append(Dropped(hit, f"rerank {below:.3f} below the best > {rule.value:.3f}"))
        elif rule.rule == "absolute" and score < rule.value - 1e-12:
            dropped.append(Dropped(hit, f"rerank {score:.3f} < {rule.value:.3f}"))
        else:
            kept.append(hit)
    return CutResult(tuple(kept), tuple(dropped), applied)


def cut_turn(
    hits: Sequence[Hit],
    gap: float | None,
    rule: RerankCalibration | None,
    floor: float | None = None,
    query: str | None = None,
) -> CutResult:
    """The turn's cut: by the reranker's scores when it scored the hits and ``rule`` is the
    RAG's calibration of it, else by the cosine ``gap`` (None: no cut) narrowed by the noise
    ``floor`` and judged by the turn's words in ``query``
    (:func:`~vancetope_rag.domain.retrieval.relevance.cut_by_relevance`)."""
    if rule is not None and hits and hits[0].rerank_score is not None:
        return cut_by_rerank(hits, rule)
    return cut_by_relevance(hits, gap, floor, query)


def rerank_calibration_due(calibration: Calibration | None, identity: str, chunks: int) -> bool:
    """Whether a RAG of ``chunks`` chunks whose project ranks with the reranker ``identity``
    should have its rerank calibration measured (again): it has none (never measured, or the
    reranker could not be reached), one of another reranker or rule, or it grew by
    :data:`CALIBRATION_GROWTH` since (as the gap is measured again). Not while its last
    measurement with this reranker and rule found nothing to measure and it has not grown
    by :data:`CALIBRATION_GROWTH` since: the same chunks would give the same nothing."""
    if chunks < MIN_CALIBRATION_CHUNKS:
        return False
    nothing = calibration.rerank_unmeasurable if calibration is not None else None
    if (
        nothing is not None
        and nothing.identity == identity
        and nothing.rule_set == RERANK_RULE_ID
        and chunks < nothing.chunks * CALIBRATION_GROWTH
    ):
        return False
    measured = calibration.rerank if calibration is not None else None
    if measured is None or measured.identity != identity or measured.rule_set != RERANK_RULE_ID:
        return True
    return chunks >= measured.chunks * CALIBRATION_GROWTH
