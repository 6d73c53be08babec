"""The rerank stage's own calibration of the relevance cut: a rule in the reranker's scale.

A reranker's scores mean nothing across rerankers: TEI answers raw logits (-11 .. 9) or
sigmoid probabilities, Cohere a ``relevance_score`` from 0 to 1, a plugin whatever its model
gives. So, as for the cosine gap, the scale is measured per RAG and per reranker: the
calibrator sends a few of the RAG's pseudo-queries (the sentences already drawn for the gap,
:func:`~vancetope_rag.domain.retrieval.relevance.draw_pseudo_queries`) to the reranker, each
with its source (the chunk it was drawn from, without the sentence itself: a verbatim match
would score above any real answer) and its background (the query's other dense candidates).
:func:`derive_rerank_rule` then picks the rule that best separates the sources from the
backgrounds, in the reranker's own scale:

- ``relative``: a hit is kept when its score is within ``value`` of the turn's best score
  (logits and their differences keep their meaning from one query to the next); or
- ``absolute``: a hit is kept when its score is at least ``value`` (a reranker whose scores
  are probabilities of relevance says "irrelevant" the same way for every query).

Each threshold sits midway between a low quantile of the sources and a high one of the
backgrounds; separation is Youden's J at it (the share of sources kept minus the share of
background kept); the rule that separates better wins, the relative one on a tie.

The result is a :class:`RerankCalibration`, stored inside the RAG's
:class:`~vancetope_rag.domain.retrieval.calibration.Calibration` and tied to the reranker's
identity (:func:`rerank_identity`: provider, model and base URL, never the key). A measurement
that found nothing to measure is stored there too, as a :class:`RerankUnmeasurable`: the
reranker is not asked again for that RAG until it grows or the reranker changes. Pure, no I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

__all__ = [
    "RERANK_CALIBRATION_QUERIES",
    "RERANK_CALIBRATION_TEXTS",
    "RERANK_RULE_ID",
    "RerankCalibration",
    "RerankRule",
    "RerankTurn",
    "RerankUnmeasurable",
    "derive_rerank_rule",
    "quantile",
    "quantiles",
    "rerank_identity",
    "strip_sentence",
]

#: Pseudo-queries sent to the reranker: one request each, so a calibration costs at most this
#: many requests (paced by ``ai.rerank.requestsPerMinute`` like any background work).
RERANK_CALIBRATION_QUERIES = 8
#: Texts per request, the source included: TEI refuses more than 32 (``--max-client-batch-size``).
RERANK_CALIBRATION_TEXTS = 32

#: How a turn's reranked hits are cut: within ``value`` of the best score, or at least ``value``.
RerankRule = Literal["relative", "absolute"]

#: Names the rule and the sample a rerank calibration was measured with: a changed one
#: calibrates every RAG's reranker again.
RERANK_RULE_ID = hashlib.sha256(
    (
        f"rerank: relative|absolute, midpoint of sources p25 and background p90, max Youden J "
        f"then margin, over {RERANK_CALIBRATION_QUERIES} pseudo-queries x "
        f"{RERANK_CALIBRATION_TEXTS} texts, source without its sentence"
    ).encode()
).hexdigest()[:12]


def rerank_identity(provider: str, model: str, base_url: str | None) -> str:
    """What a rerank calibration is valid for: the provider, the model and the base URL it
    ranked with (a digest: a URL may carry credentials; the key is no part of it)."""
    base = (base_url or "").rstrip("/")
    return hashlib.sha256(f"{provider}\n{model}\n{base}".encode()).hexdigest()[:16]


def strip_sentence(text: str, sentence: str) -> str:
    """``text`` without ``sentence`` (the pseudo-query drawn from it), whitespace collapsed."""
    return " ".join(text.replace(sentence, " ").split())


@dataclass(frozen=True, slots=True)
class RerankTurn:
    """One pseudo-query as the reranker scored it: its source's score and its background's."""

    source: float
    background: tuple[float, ...]

    @property
    def best(self) -> float:
        return max(self.source, *self.background) if self.background else self.source


@dataclass(frozen=True, slots=True)
class RerankCalibration:
    """A RAG's relevance cut in one reranker's scale (see the module)."""

    #: ``provider:model`` the rule was measured with (shown; the match is by ``identity``).
    reranker: str
    #: :func:`rerank_identity` of the reranker.
    identity: str
    rule: RerankRule
    #: The most a hit may sit below the turn's best score (``relative``), or the least score
    #: it needs (``absolute``), in the reranker's scale.
    value: float
    #: Youden's J of the rule on the calibration's turns (1: sources and backgrounds apart).
    separation: float
    #: The chunk count of the RAG when measured (it is measured again as the RAG grows).
    chunks: int
    #: :data:`RERANK_RULE_ID` of the rule.
    rule_set: str
    #: Each pseudo-query's source score, in the order the queries were drawn.
    sources: tuple[float, ...]
    #: The backgrounds' median, 90th percentile and highest score.
    background: tuple[float, float, float]
    calibrated_at: datetime | None = None

    def describe(self) -> str:
        """The rule in words: ``within 1.500 of the best rerank score`` or ``rerank score
        0.450 or more``."""
        if self.rule == "relative":
            return f"within {self.value:.3f} of the best rerank score"
        return f"rerank score {self.value:.3f} or more"

    def to_dict(self) -> dict[str, object]:
        at = self.calibrated_at
        p50, p90, top = self.background
        return {
            "reranker": self.reranker,
            "identity": self.identity,
            "rule": self.rule,
            "value": self.value,
            "separation": self.separation,
            "chunks": self.chunks,
            "ruleSet": self.rule_set,
            "sources": list(self.sources),
            "background": {"p50": p50, "p90": p90, "max": top},
            "calibratedAt": at.astimezone(UTC).isoformat() if at else None,
        }

    @classmethod
    def from_dict(cls, data: object) -> RerankCalibration | None:
        """The rerank calibration a store kept, or None (none, or unreadable: measured again)."""
        if not isinstance(data, dict) or not data:
            return None
        try:
            rule = data["rule"]
            background = data["background"]
            sources = data.get("sources") or []
            at = data.get("calibratedAt")
            assert rule in ("relative", "absolute")
            assert isinstance(background, dict) and isinstance(sources, list)
            return cls(
                reranker=str(data["reranker"]),
                identity=str(data["identity"]),
                rule=rule,
                value=float(data["value"]),
                separation=float(data["separation"]),
                chunks=int(data["chunks"]),
                rule_set=str(data["ruleSet"]),
                sources=tuple(float(s) for s in sources),
                background=(
                    float(background["p50"]),
                    float(background["p90"]),
                    float(background["max"]),
                ),
                calibrated_at=datetime.fromisoformat(at) if isinstance(at, str) else None,
            )
        except (KeyError, TypeError, ValueError, AssertionError):
            return None


@dataclass(frozen=True, slots=True)
class RerankUnmeasurable:
    """A measurement of a RAG's rerank calibration that found nothing to measure: no
    pseudo-query with a background, or the reranker answered and no rule came of its scores.

    Kept with the RAG's calibration, so that no worker, before or after a restart, asks the
    reranker (a paid call, for a hosted one) again every minute for the same nothing: the
    RAG is measured again once it grows or the reranker changes
    (:func:`~vancetope_rag.domain.retrieval.rerank_cut.rerank_calibration_due`). A reranker
    that failed is never one: an outage is tried again.
    """

    #: :func:`rerank_identity` of the reranker it was measured with.
    identity: str
    #: The chunk count of the RAG when measured.
    chunks: int
    #: :data:`RERANK_RULE_ID` of the rule it was measured for.
    rule_set: str
    measured_at: datetime | None = None

    def to_dict(self) -> dict[str, object]:
        at = self.measured_at
        return {
            "identity": self.identity,
            "chunks": self.chunks,
            "ruleSet": self.rule_set,
            "measuredAt": at.astimezone(UTC).isoformat() if at else None,
        }

    def describe(self) -> str:
        """What it means for the RAG's turns, in words (status shows it)."""
        return (
            f"nothing to measure over {self.chunks} chunks (no pseudo-query's source stood out "
            "of its background in the reranker's scores); its turns are cut by the cosine gap "
            "until the RAG doubles or the reranker changes"
        )

    @classmethod
    def from_dict(cls, data: object) -> RerankUnmeasurable | None:
        """The measurement a store kept, or None (none, or unreadable: measured again)."""
        if not isinstance(data, dict) or not data:
            return None
        try:
            at = data.get("measuredAt")
            return cls(
                identity=str(data["identity"]),
                chunks=int(data["chunks"]),
                rule_set=str(data["ruleSet"]),
                measured_at=datetime.fromisoformat(at) if isinstance(at, str) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None


#: The rule's threshold sits midway between this quantile of the sources (a low one: most
#: sources are kept) and :data:`BACKGROUND_Q` of the backgrounds (a high one: most of the
#: background goes). Quantiles, not the extremes: one odd pseudo-query moves neither.
SOURCE_Q, BACKGROUND_Q = 0.25, 0.9


def quantile(values: Sequence[float], p: float) -> float:
    """Linear-interpolation quantile (numpy's default) of ``values`` (one at least), ``p``
    from 0 to 1; the RAG calibration's too (here: that module imports this one)."""
    s = sorted(values)
    pos = (len(s) - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _youden(kept: Sequence[float], dropped: Sequence[float], threshold: float) -> float:
    """Share of ``kept`` at or above ``threshold`` minus the share of ``dropped``."""
    return sum(v >= threshold for v in kept) / len(kept) - sum(
        v >= threshold for v in dropped
    ) / len(dropped)


def derive_rerank_rule(turns: Sequence[RerankTurn]) -> tuple[RerankRule, float, float] | None:
    """(rule, value, separation) that best tells the turns' sources from their backgrounds;
    None without a turn that has a background (nothing to separate). Deterministic: the
    same turns give the same rule.

    Each rule's threshold is the midpoint between the sources' :data:`SOURCE_Q` quantile
    and the backgrounds' :data:`BACKGROUND_Q` one (for ``relative``, of how far each sits
    below its turn's best score); the rule with the higher separation (Youden's J at its
    threshold) wins, then the one with the wider margin between the two quantiles, then
    ``relative``."""
    usable = [
        t for t in turns if t.background and all(map(math.isfinite, (t.source, *t.background)))
    ]
    if not usable:
        return None
    sources = [t.source for t in usable]
    background = [b for t in usable for b in t.background]
    low, high = quantile(sources, SOURCE_Q), quantile(background, BACKGROUND_Q)
    threshold = (low + high) / 2
    absolute = (_youden(sources, background, threshold), low - high)
    # relative: how far below the turn's best, negated so that keeping is ">= -floor"
    near = [t.source - t.best for t in usable]
    far = [b - t.best for t in usable for b in t.background]
    near_low, far_high = quantile(near, SOURCE_Q), quantile(far, BACKGROUND_Q)
    floor = max(0.0, -(near_low + far_high) / 2)
    relative = (_youden(near, far, -floor), near_low - far_high)
    if tuple(round(x, 9) for x in relative) >= tuple(round(x, 9) for x in absolute):
        return "relative", round(floor, 6), round(relative[0], 6)
    return "absolute", round(threshold, 6), round(absolute[0], 6)


def quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, 90th percentile, max) of ``values`` (zeros for none)."""
    if not values:
        return 0.0, 0.0, 0.0
    return round(quantile(values, 0.5), 6), round(quantile(values, 0.9), 6), round(max(values), 6)
