"""``minScore: auto``: a threshold calibrated per RAG from its own model and chunks.

A cosine threshold means something only for one model: all-MiniLM-L6-v2 scores off-topic chat
around 0.25, multilingual-e5 scores everything 0.75-0.85. So the noise floor is measured, not
assumed: a fixed set of off-topic chat turns (:data:`PROBE_TURNS`) is embedded with the RAG's
pinned model and searched against the RAG's own chunks; the best cosine each turn reaches is
noise by construction, and :func:`derive_min_score` puts the threshold just above it
(docs/benchmarks.md, "minScore: auto"). The result is a :class:`Calibration`, stored with the
RAG; ``auto`` resolves to it (:func:`resolve_min_score`).

Pure rules, no I/O: the service that embeds and searches is
:mod:`vancetope_rag.services.calibration`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from vancetope_rag.domain.retrieval.rerank_calibration import (
    RerankCalibration,
    RerankUnmeasurable,
    quantile,
)
from vancetope_rag.errors import InvalidInputError

__all__ = [
    "AUTO",
    "CALIBRATION_GROWTH",
    "GAP_PER_SPREAD",
    "MIN_CALIBRATION_CHUNKS",
    "PROBE_SET_ID",
    "PROBE_TURNS",
    "PSEUDO_QUERIES",
    "UNCALIBRATED_MIN_SCORE",
    "Calibration",
    "MinScore",
    "calibration_due",
    "derive_min_score",
    "parse_min_score",
    "resolve_min_score",
]

#: The value of ``minScore`` (setting, recipe, call, ``RAG_RETRIEVAL_MIN_SCORE``) that asks for
#: the RAG's calibrated threshold.
AUTO: Literal["auto"] = "auto"

#: A ``minScore`` as given: a cosine in [-1, 1] or :data:`AUTO`.
MinScore = float | Literal["auto"]

#: Off-topic chat turns: what a project's documents should never answer. Their best cosines
#: against a RAG's chunks are the noise a threshold must drop. Disjoint from the benchmark's
#: own off-topic turns (``bench/scifact.py``), so the benchmark measures the rule, not the
#: probes (``tests/unit/test_calibration.py`` keeps them apart). Changing this tuple changes
#: :data:`PROBE_SET_ID` (as does a change of the rule), and every RAG is calibrated again.
PROBE_TURNS: tuple[str, ...] = (
    "Good morning! Did you sleep well?",
    "Okay, thank you very much, bye.",
    "Can you help me name my new kitten?",
    "Write a haiku about autumn leaves.",
    "Compose a birthday song for my grandmother.",
    "Tell me a bedtime story about a brave little dragon.",
    "What's the weather usually like in Iceland in July?",
    "Suggest a weekend itinerary for Rome.",
    "Which train goes from Paris to Amsterdam fastest?",
    "How do I pack a suitcase so my shirts don't wrinkle?",
    "How do I make fluffy pancakes without eggs?",
    "How long should I boil a soft egg?",
    "What wine goes with grilled salmon?",
    "How do I make cold brew coffee at home?",
    "How do I centre a div with CSS flexbox?",
    "Why does my JavaScript promise never resolve?",
    "Write a bash one-liner that finds the largest files in a folder.",
    "What is the difference between a tuple and a list in Python?",
    "How do I undo my last git commit but keep the changes?",
    "Explain what a Docker volume is.",
    "Refactor this function to use a dictionary instead of if statements.",
    "My React component renders twice, why?",
    "How do I write a regular expression for an email address?",
    "Who painted the Mona Lisa?",
    "When did the Berlin Wall fall?",
    "How many players are on a basketball team?",
    "What's the tallest mountain in Africa?",
    "Which planet has the most moons?",
    "Who wrote Pride and Prejudice?",
    "Explain the offside rule in football.",
    "How do I improve my tennis serve?",
    "Recommend a board game for four friends.",
    "What's a good stretching routine before running?",
    "Help me write a cover letter for a barista job.",
    "Reword this sentence to sound more formal.",
    "Make a shopping list for a barbecue with ten people.",
    "How do I get red wine out of a carpet?",
    "What houseplants survive in low light?",
    "How often should I water a cactus?",
    "Give me ideas for a ten-year-old's birthday party.",
    "How do I ask my landlord to fix the heating?",
    "Convert 5 miles to kilometres.",
    "What's 15 percent of 240?",
    "What day of the week was 1 January 2000?",
    "Spell 'necessary' backwards.",
    "Recommend a podcast about history.",
    "What are the chords of a C major scale on guitar?",
    "Who directed the movie Jurassic Park?",
    "Let's play twenty questions.",
    "Tell me a fun fact about octopuses.",
    "What should I name my fantasy football team?",
    "How do I tie a bow tie?",
    "Which phone has the best camera this year?",
    "Can you set a reminder for my dentist appointment?",
    "Translate 'where is the train station' into German.",
    "What rhymes with orange?",
    "Plan a romantic dinner menu for two.",
    "How do I reset my router password?",
    "Is it better to rent or buy a car?",
    "Write a thank-you note to my neighbour for the flowers.",
)


#: A RAG is calibrated once it holds this many chunks: fewer make a noise floor of a few
#: texts, which says little about the next ones.
MIN_CALIBRATION_CHUNKS = 20

#: ... and again each time its chunk count has grown by this factor since: more (and more
#: varied) chunks give an off-topic turn a better best match, so the floor rises with the
#: corpus (docs/benchmarks.md: 0.29 at 1,000 SciFact abstracts, 0.44 at 5,183).
CALIBRATION_GROWTH = 2.0

#: What ``auto`` means for a RAG not calibrated yet (fewer than
#: :data:`MIN_CALIBRATION_CHUNKS` chunks): the embedded model's hand calibration.
UNCALIBRATED_MIN_SCORE = 0.35

#: The rule of :func:`derive_min_score`: the 95th percentile (z = 1.645) of a normal noise
#: whose centre and spread are read off the probes' middle half (an interquartile range is
#: 1.349 standard deviations). Not the 97th: the probes are chosen to be off-topic for any
#: corpus, so they are more varied than one project's off-topic chat and their spread is
#: wider; at the 97th percentile of the probes the threshold cut into the relevant hits'
#: tail (docs/benchmarks.md, "minScore: auto").
_Z = 1.645
_IQR_PER_SD = 1.349
#: ... capped by the probes' own 95th percentile (the same level, read off the scores).
_Q = 0.95

#: The relevance cut's gap as a share of the RAG's pseudo-query spread
#: (:func:`~vancetope_rag.domain.retrieval.relevance.derive_gap`): 0.53 puts all-MiniLM on SciFact
#: at the 0.15 gap that, with the fused and lexical terms, came within a hair of the block
#: targets at 0.70x today's tokens (docs/benchmarks.md, "What the block holds").
GAP_PER_SPREAD = 0.53

#: Pseudo-queries a calibration draws from a RAG's chunks (one per chosen source).
PSEUDO_QUERIES = 48

#: Names the probe set and the rule a calibration was measured with: a changed set or rule
#: calibrates every RAG again (a stored threshold of the old rule would otherwise stay
#: until its RAG doubled).
_RULE = f"rule: min(median + {_Z} x IQR / {_IQR_PER_SD}, p{_Q})"
#: ... and the relevance cut's gap (:mod:`vancetope_rag.domain.retrieval.relevance`): a RAG
#: calibrated before the cut existed has no gap, and is calibrated again to get one.
_GAP_RULE = (
    f"gap: {GAP_PER_SPREAD} x median(source best - median dense ranks 10-30) "
    f"over {PSEUDO_QUERIES} pseudo-queries"
)
PROBE_SET_ID = hashlib.sha256(
    "\n".join((*PROBE_TURNS, _RULE, _GAP_RULE)).encode("utf-8")
).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Calibration:
    """A RAG's measured noise floor and the ``minScore`` ``auto`` resolves to."""

    #: What ``minScore: auto`` means for this RAG.
    min_score: float
    #: The chunk count the probes were searched against.
    chunks: int
    #: :data:`PROBE_SET_ID` of the probes used.
    probe_set: str
    #: Each probe's best cosine against the RAG's chunks, in :data:`PROBE_TURNS` order.
    scores: tuple[float, ...]
    calibrated_at: datetime | None = None
    #: The relevance cut's gap ``relevanceCut: auto`` resolves to (None: not measured, e.g.
    #: a calibration stored before the cut existed, or a RAG without a background).
    gap: float | None = None
    #: Each pseudo-query's spread the gap was derived from (:func:`~vancetope_rag.domain.
    #: relevance.derive_gap`), in the order the queries were drawn.
    spreads: tuple[float, ...] = ()
    #: The relevance cut in the project's reranker's scale (None: no reranker, or it could
    #: not be reached when measured), see :mod:`~vancetope_rag.domain.retrieval.rerank_cut`.
    rerank: RerankCalibration | None = None
    #: The last measurement in the reranker's scale when it found nothing to measure (None:
    #: it found a rule, failed, or was never made), see :class:`RerankUnmeasurable`.
    rerank_unmeasurable: RerankUnmeasurable | None = None

    def to_json(self) -> str:
        """The text the stores keep (SQLite, PostgreSQL) or parse into a subdocument (MongoDB)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_dict(self) -> dict[str, object]:
        at = self.calibrated_at
        return {
            "minScore": self.min_score,
            "chunks": self.chunks,
            "probeSet": self.probe_set,
            "scores": list(self.scores),
            "calibratedAt": at.astimezone(UTC).isoformat() if at else None,
            "gap": self.gap,
            "spreads": list(self.spreads),
            "rerank": self.rerank.to_dict() if self.rerank else None,
            "rerankUnmeasurable": (
                self.rerank_unmeasurable.to_dict() if self.rerank_unmeasurable else None
            ),
        }

    @classmethod
    def from_json(cls, text: str | None) -> Calibration | None:
        """The calibration a store kept, or None (never calibrated, or unreadable: a RAG
        whose calibration cannot be read is calibrated again, never left unusable)."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
        return cls.from_dict(data) if isinstance(data, dict) else None

    @classmethod
    def from_dict(cls, data: dict[str, object] | None) -> Calibration | None:
        if not data:
            return None
        try:
            at = data.get("calibratedAt")
            scores = data.get("scores") or []
            spreads = data.get("spreads") or []  # absent before the relevance cut
            gap = data.get("gap")
            assert isinstance(scores, list) and isinstance(spreads, list)
            return cls(
                min_score=float(data["minScore"]),  # type: ignore[arg-type]
                chunks=int(data["chunks"]),  # type: ignore[call-overload]
                probe_set=str(data["probeSet"]),
                scores=tuple(float(s) for s in scores),
                calibrated_at=datetime.fromisoformat(at) if isinstance(at, str) else None,
                gap=None if gap is None else float(gap),  # type: ignore[arg-type]
                spreads=tuple(float(s) for s in spreads),
                rerank=RerankCalibration.from_dict(data.get("rerank")),  # absent before it
                rerank_unmeasurable=RerankUnmeasurable.from_dict(data.get("rerankUnmeasurable")),
            )
        except (KeyError, TypeError, ValueError, AssertionError):
            return None

    def summary(self) -> dict[str, float]:
        """min, quartiles and max of the probes' best cosines (what the rule reads)."""
        s = sorted(self.scores)
        if not s:
            return {}
        return {
            "min": s[0],
            "p25": quantile(s, 0.25),
            "p50": quantile(s, 0.5),
            "p75": quantile(s, 0.75),
            "max": s[-1],
        }


def derive_min_score(scores: Sequence[float]) -> float:
    """The threshold just above the noise of ``scores`` (the probes' best cosines).

    About the 95th percentile of the probes' noise, estimated as for a normal distribution
    from their middle half: median + 1.645 x interquartile range / 1.349. The probes are more
    varied than a project's own off-topic chat (each touches some corpus's subject), so
    their 95th percentile sits above nearly all of that chat (SciFact: 29 of 30 turns
    dropped) without cutting into the relevant hits' low tail. The spread scales the margin
    with the model: a model whose cosines crowd near 0.8 gets a margin as narrow as its
    noise. The middle half, not the top: a probe turn is off-topic only for most corpora,
    and the few that touch this one's subject (a cooking question against nutrition
    papers) score like real answers; they must not lift the threshold over them.

    The fit is capped by the probes' own 95th percentile: both estimates of the same level
    err upwards, each in its own case, so the lower is taken. Read off the scores directly,
    a few probes near the corpus's subject lift the quantile (all-MiniLM on SciFact: 0.367,
    past the relevant hits' tail, where the fit gives 0.348). A normal fitted to a noise
    with a long lower tail and a ceiling overstates its top (multilingual-e5 on SciFact,
    cosines crowding below 0.84: the fit gives 0.838, above every probe, the probes' own
    quantile 0.831) (docs/benchmarks.md, "minScore: auto").

    Raises:
        InvalidInputError: ``scores`` is empty or holds a value that is not a finite cosine.
    """
    if not scores:
        raise InvalidInputError("a calibration needs at least one probe score")
    if not all(isinstance(s, int | float) and math.isfinite(s) for s in scores):
        raise InvalidInputError(f"probe scores must be finite cosines, got {list(scores)!r}")
    s = sorted(float(v) for v in scores)
    spread = (quantile(s, 0.75) - quantile(s, 0.25)) / _IQR_PER_SD
    fitted = quantile(s, 0.5) + _Z * spread
    return round(min(1.0, max(-1.0, min(fitted, quantile(s, _Q)))), 4)


def calibration_due(calibration: Calibration | None, chunks: int) -> bool:
    """Whether a RAG holding ``chunks`` chunks should be calibrated (again) now: it reached
    :data:`MIN_CALIBRATION_CHUNKS` for the first time, grew by :data:`CALIBRATION_GROWTH`
    since its calibration, or was calibrated with another probe set or rule."""
    if chunks < MIN_CALIBRATION_CHUNKS:
        return False
    if calibration is None or calibration.probe_set != PROBE_SET_ID:
        return True
    return chunks >= calibration.chunks * CALIBRATION_GROWTH


def parse_min_score(value: object, where: str = "minScore") -> MinScore | None:
    """A ``minScore`` as given by a user: a number in [-1, 1], ``auto`` (any case) or None.

    Raises:
        InvalidInputError: Anything else; the message names ``where`` and both forms.
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == AUTO:
            return AUTO
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(
                f"{where} must be a number from -1 to 1 or 'auto', got {value!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{where} must be a number from -1 to 1 or 'auto', got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not -1.0 <= number <= 1.0:
        raise InvalidInputError(f"{where} must be a number from -1 to 1 or 'auto', got {value!r}")
    return number


def resolve_min_score(value: MinScore | None, calibration: Calibration | None) -> float | None:
    """The cosine threshold a query applies: an explicit number as it is, ``auto`` the RAG's
    calibrated value (:data:`UNCALIBRATED_MIN_SCORE` until it has one), None none."""
    if value is None:
        return None
    if value == AUTO:
        return UNCALIBRATED_MIN_SCORE if calibration is None else calibration.min_score
    return float(value)
