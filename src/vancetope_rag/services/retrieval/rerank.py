"""The rerank stage: a query's candidates reordered by the project's reranker.

When ``ai.rerank.provider`` names a reranker (and the call or recipe does not turn it off),
:meth:`RagService.query <vancetope_rag.services.rag.RagService.query>` asks the store for
:meth:`RerankStage.pool_size` candidates (``ai.rerank.candidates``, else ``max(4 x topK,
20)``), each above the ``minScore`` cosine floor and through the filters, without the
per-document cap; :meth:`RerankStage.rerank` sends their texts to the reranker and returns
them in its order, each with its ``rerank_score``; ``maxPerDocument`` and ``topK`` then apply
to that order (:func:`~vancetope_rag.domain.retrieval.ranking.select_hits`). A step that cuts the
candidates by relevance goes between the two, on :attr:`Reranked.hits`.

A remote reranker is behind its endpoint's circuit and pace (:mod:`..providers`; a query
over ``ai.rerank.requestsPerMinute`` goes without it rather than wait): an outage,
a timeout or an error skips the stage — the retrieval's own order, one log line and the
``vance_rag_rerank_requests{outcome}`` metric — never the query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from vancetope_rag.domain.records import Hit, RagRecord
from vancetope_rag.domain.retrieval.ranking import MAX_TOP_K
from vancetope_rag.domain.retrieval.rerank_calibration import RerankCalibration, rerank_identity
from vancetope_rag.errors import ProviderUnavailableError, RagError
from vancetope_rag.metrics import Metrics
from vancetope_rag.rerankers import Reranker, RerankerRegistry, RerankSettings
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.providers import Endpoint, Pacer, ProviderCircuits
from vancetope_rag.services.settings import SettingsSnapshot

log = get_logger(__name__)

#: Seconds between two warnings of the same failure of a reranker.
WARN_EVERY_S = 300.0
#: Candidates sent to the reranker when ``ai.rerank.candidates`` is unset: ``max(FACTOR x
#: topK, FLOOR)``.
POOL_FACTOR, POOL_FLOOR = 4, 20


@dataclass(frozen=True)
class Reranked:
    """The candidates in the order hits are selected from.

    Attributes:
        hits: The reranker's order, each hit with its ``rerank_score`` (unscored ones after
            the scored, in the retrieval's order); the retrieval's order when skipped.
        applied: The reranker ordered them.
        skipped: Why it did not, when it was asked to (an outage, an error), else None.
    """

    hits: list[Hit]
    applied: bool
    skipped: str | None = None


def reranker_circuits(retry_s: float = 2.0, retry_max_s: float = 30.0) -> ProviderCircuits:
    """Circuits for rerankers (``VANCETOPE_RAG_PROVIDER_RETRY_S`` and ``_MAX_S``)."""
    return ProviderCircuits(
        retry_s=retry_s,
        retry_max_s=retry_max_s,
        label="reranker",
        pauses="queries keep the retrieval's order meanwhile",
        fix="ai.rerank.apiKey, ai.rerank.baseUrl or ai.rerank.model",
    )


def rerank_order(count: int, scores: Mapping[int, float]) -> list[int]:
    """Indexes of ``count`` candidates by descending score; ties and the unscored ones (after
    the scored) keep their given order."""
    return sorted(range(count), key=lambda i: (i not in scores, -scores.get(i, 0.0), i))


def reorder(candidates: Sequence[Hit], scores: Mapping[int, float]) -> list[Hit]:
    """``candidates`` in :func:`rerank_order`, each scored one with its ``rerank_score``."""
    return [
        replace(candidates[i], rerank_score=scores[i]) if i in scores else candidates[i]
        for i in rerank_order(len(candidates), scores)
    ]


class RerankStage:
    """The project's reranker between the store's candidates and the selection of hits."""

    def __init__(
        self,
        registry: RerankerRegistry,
        *,
        circuits: ProviderCircuits | None = None,
        pacer: Pacer | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.registry = registry
        self.circuits = circuits or reranker_circuits()
        self.pacer = pacer or Pacer()
        self.metrics = metrics or Metrics()
        self._warned: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def settings(snapshot: SettingsSnapshot, wanted: bool = True) -> RerankSettings | None:
        """The reranker settings a query uses, or None: the stage is off (provider ``none``)
        or not ``wanted`` (the call or the recipe turned it off)."""
        if not wanted:
            return None
        settings = snapshot.rerank()
        return settings if settings.enabled else None

    @staticmethod
    def pool_size(top_k: int, snapshot: SettingsSnapshot) -> int:
        """How many candidates go to the reranker for a query of ``top_k`` hits."""
        chosen = snapshot.effective["ai.rerank.candidates"]
        pool = int(chosen) if chosen is not None else max(POOL_FACTOR * top_k, POOL_FLOOR)
        return min(max(pool, top_k), MAX_TOP_K)

    def rerank(
        self,
        query: str,
        candidates: Sequence[Hit],
        settings: RerankSettings,
    ) -> Reranked:
        """``candidates`` in the reranker's order; the retrieval's order, logged and counted,
        when the reranker cannot be used (never raises for the reranker's failure)."""
        if not candidates:
            return Reranked([], applied=False)
        scores, skipped = self.scores(query, [h.text for h in candidates], settings)
        if scores is None:
            return Reranked(list(candidates), applied=False, skipped=skipped)
        return Reranked(reorder(candidates, scores), applied=True)

    def scores(
        self,
        query: str,
        texts: Sequence[str],
        settings: RerankSettings,
    ) -> tuple[dict[int, float] | None, str | None]:
        """(score by index of the texts the reranker ranked, None) or, when it cannot be used,
        (None, why): the failure is logged and counted, never raised."""
        provider = settings.provider
        started = time.perf_counter()
        try:
            reranker = self.registry.load(settings)
            scores = self._call(reranker, settings, query, list(texts))
        except ProviderUnavailableError as exc:
            # the circuit logged the outage once when it opened; each query says it at debug
            self._count(provider, "skipped", started)
            log.debug("rerank skipped: %s", exc.message)
            return None, exc.message
        except Exception as exc:
            self._count(provider, "error", started)
            why = error_text(exc)
            self._warn(provider, why)
            return None, why
        self._count(provider, "ok", started)
        return scores, None

    def identity(self, settings: RerankSettings) -> str:
        """What a rerank calibration made with these settings is valid for (provider, model
        and base URL; not the key).

        Raises:
            RerankError: The provider is not registered.
        """
        model = self.registry.model_of(settings)
        return rerank_identity(settings.provider, model, settings.base_url)

    def calibrated_rule(
        self, rag: RagRecord, snapshot: SettingsSnapshot, wanted: bool = True
    ) -> RerankCalibration | None:
        """``rag``'s rerank calibration when it was measured with the reranker the project
        ranks with now; None otherwise (no reranker, none measured, another reranker since:
        a turn then cuts by the cosine gap)."""
        measured = rag.calibration.rerank if rag.calibration is not None else None
        settings = self.settings(snapshot, wanted)
        if measured is None or settings is None:
            return None
        try:
            return measured if measured.identity == self.identity(settings) else None
        except RagError:
            return None

    def wait_s(self, settings: RerankSettings) -> float:
        """Seconds until the reranker's circuit lets a call through (0: closed, due for its
        trial, or a reranker that runs in this process)."""
        reranker = self.registry.load(settings)
        if not reranker.remote:
            return 0.0
        endpoint = Endpoint.keyed(settings.provider, settings.base_url, settings.api_key)
        return self.circuits.wait_s(endpoint, reranker.model)

    def background_scores(
        self, query: str, texts: Sequence[str], settings: RerankSettings
    ) -> dict[int, float]:
        """The reranker's scores of ``texts`` for work outside a turn (the calibration): one
        request of at most 32 texts, waiting for ``ai.rerank.requestsPerMinute`` as indexing
        waits for its pace, behind the endpoint's circuit.

        Raises:
            ProviderUnavailableError: The circuit is open.
            RerankError, ConnectionError, TimeoutError: The reranker failed.
        """
        reranker = self.registry.load(settings)
        if not reranker.remote:
            return dict(reranker.rerank(query, list(texts)))
        endpoint = Endpoint.keyed(settings.provider, settings.base_url, settings.api_key)
        with self.circuits.guard(endpoint, reranker.model):
            self.pacer.acquire(endpoint, rpm=settings.requests_per_minute, tpm=None, block=True)
            return dict(reranker.rerank(query, list(texts)))

    def _call(
        self,
        reranker: Reranker,
        settings: RerankSettings,
        query: str,
        texts: list[str],
    ) -> dict[int, float]:
        if not reranker.remote:
            return dict(reranker.rerank(query, texts))
        endpoint = Endpoint.keyed(settings.provider, settings.base_url, settings.api_key)
        # a turn never waits for the pace: over it, the query goes without the reranker
        rpm = settings.requests_per_minute
        if not self.pacer.try_acquire(endpoint, rpm=rpm, tpm=None):
            raise ProviderUnavailableError(
                f"reranker {endpoint.describe()} is at ai.rerank.requestsPerMinute={rpm}",
                retry_in_s=0.0,
            )
        with self.circuits.guard(endpoint, reranker.model):
            return dict(reranker.rerank(query, texts))

    def _warn(self, provider: str, why: str) -> None:
        """One warning per failure and provider every :data:`WARN_EVERY_S` (a reranker that
        refuses every query, a 413 say, must not fill the log); the others at debug."""
        now = time.monotonic()
        with self._lock:
            last = self._warned.get((provider, why))
            due = last is None or now - last >= WARN_EVERY_S
            if due:
                self._warned[(provider, why)] = now
                if len(self._warned) > 256:  # failures that name their input vary
                    self._warned = {(provider, why): now}
        level = logging.WARNING if due else logging.DEBUG
        message = "reranker %s failed, the query keeps the retrieval's order: %s"
        log.log(level, message, provider, why)

    def _count(self, provider: str, outcome: str, started: float) -> None:
        self.metrics.rerank_requests.labels(provider=provider, outcome=outcome).inc()
        if outcome != "skipped":
            seconds = time.perf_counter() - started
            self.metrics.rerank_seconds.labels(provider=provider).observe(seconds)
