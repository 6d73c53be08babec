"""Calibrator: measures a RAG's noise floor with its own model and chunks (``minScore: auto``).

Each probe turn of :data:`~vancetope_rag.domain.retrieval.calibration.PROBE_TURNS` is embedded as a
query with the RAG's pinned model (once per model: the vectors are kept in the store's
embedding cache, under the model's key and a probe suffix) and searched against the RAG's
chunks; the best cosine of each is noise, and the rule of
:func:`~vancetope_rag.domain.retrieval.calibration.derive_min_score` turns those into the threshold
that is stored with the RAG. The scheduler calibrates a RAG when it first holds enough
chunks and again as it grows (:func:`~vancetope_rag.domain.retrieval.calibration.calibration_due`);
a rebuild calibrates its new generation before readers switch to it; ``vancetope-rag
calibrate`` measures on demand.

The same calibration measures the relevance cut's gap (``relevanceCut: auto``): one sentence
from each of up to 48 of the RAG's sources (chosen by a hash of their refs) is a query whose
source is known; how far the source's best chunk stands above the turn's background (the
median cosine of dense ranks 10-30) is the model's and corpus's scale of "relevant", and
:func:`~vancetope_rag.domain.retrieval.relevance.derive_gap` takes a share of its median.

With a reranker set for the project (``ai.rerank.provider``), the calibration also measures
the cut in the reranker's scale (:mod:`~vancetope_rag.domain.retrieval.rerank_calibration`):
the first 8 of those pseudo-queries whose source holds more than the sentence, each with
its source and its dense background, one request of at most 32 texts each, paced by
``ai.rerank.requestsPerMinute`` and behind the reranker's circuit. A reranker that cannot be
reached leaves the RAG without one (its turns cut by the cosine gap meanwhile) and is asked
again at the next refresh; another reranker (provider, model or base URL) or a RAG that
doubled is measured again. A measurement that found nothing to measure is stored as such
(:class:`~vancetope_rag.domain.retrieval.rerank_calibration.RerankUnmeasurable`): the
reranker is not asked again for the same chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from vancetope_rag.domain.records import Chunk, RagRecord
from vancetope_rag.domain.retrieval.calibration import (
    PROBE_SET_ID,
    PROBE_TURNS,
    Calibration,
    calibration_due,
    derive_min_score,
)
from vancetope_rag.domain.retrieval.relevance import (
    cosine,
    derive_gap,
    draw_pseudo_queries,
    pick_pseudo_sources,
    spread_of,
)
from vancetope_rag.domain.retrieval.rerank_calibration import (
    RERANK_CALIBRATION_QUERIES,
    RERANK_CALIBRATION_TEXTS,
    RERANK_RULE_ID,
    RerankCalibration,
    RerankTurn,
    RerankUnmeasurable,
    derive_rerank_rule,
    quantiles,
    strip_sentence,
)
from vancetope_rag.domain.retrieval.rerank_cut import rerank_calibration_due
from vancetope_rag.embeddings import text_hash
from vancetope_rag.errors import ProviderUnavailableError
from vancetope_rag.rerankers import RerankSettings
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.rag import RagService
from vancetope_rag.store.port import ChunkStore, ControlStore
from vancetope_rag.store.port.types import RagScope

log = get_logger(__name__)

#: Appended to a model's cache key for the probes' query vectors: a model with a query
#: prefix embeds a query differently from the same text as a passage.
PROBE_CACHE_SUFFIX = ":query-probe"

#: Dense candidates each pseudo-query reads: its background is the median of ranks 10-30.
PSEUDO_DEPTH = 30


class Calibrator:
    """Measure, store and refresh the ``minScore: auto`` calibration of RAGs."""

    def __init__(self, *, control: ControlStore, chunks: ChunkStore, rags: RagService) -> None:
        self.control = control
        self.chunks = chunks
        self.rags = rags
        #: Probe query embeddings the model was asked for by this instance (the rest came
        #: from the cache).
        self.embedded_probes = 0
        #: Pseudo-query embeddings the model was asked for by this instance.
        self.embedded_pseudo = 0

    def probe_vectors(self, rag: RagRecord) -> list[list[float]]:
        """The probes' query vectors under ``rag``'s pinned model (cached per model)."""
        vectors, embedded = self._query_vectors(rag, PROBE_TURNS)
        self.embedded_probes += embedded
        return vectors

    def _query_vectors(self, rag: RagRecord, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """Query vectors of ``texts`` under ``rag``'s pinned model, cached per model and text;
        and how many the model was asked for (one background call for all of them)."""
        loaded = self.rags.model_for(rag)
        key = loaded.cache_key + PROBE_CACHE_SUFFIX
        hashes = [text_hash(t) for t in texts]
        found = self.control.get_cached_embeddings(key, hashes)
        missing = {h: t for h, t in zip(hashes, texts, strict=True) if h not in found}
        if missing:
            vectors = self.rags.embed_background_queries(rag, list(missing.values()))
            new = {h: list(v) for h, v in zip(missing, vectors, strict=True)}
            self.control.put_cached_embeddings(key, new)
            found.update(new)
        return [found[h] for h in hashes], len(missing)

    def measure_gap(self, rag: RagRecord) -> tuple[float | None, tuple[float, ...]]:
        """The relevance cut's gap for ``rag`` and the pseudo-queries' spreads it comes from
        (None and none when no source has a sentence to ask or the RAG is too small to have
        a background)."""
        scope = RagScope.of(rag)
        chunks = self.chunks.export_chunks(
            scope, pick_pseudo_sources(self.chunks.source_refs(scope))
        )
        drawn = draw_pseudo_queries(chunks)
        if not drawn:
            return None, ()
        vectors, embedded = self._query_vectors(rag, [text for _, text in drawn])
        self.embedded_pseudo += embedded
        spreads: list[float] = []
        for (ref, _), vector in zip(drawn, vectors, strict=True):
            source_best = max(cosine(vector, c.embedding) for c in chunks if c.source_ref == ref)
            ranked = [h.score for h in self.chunks.query(scope, vector, PSEUDO_DEPTH)]
            spread = spread_of(source_best, ranked)
            if spread is not None:
                spreads.append(round(spread, 6))
        return derive_gap(spreads), tuple(spreads)

    def rerank_settings(self, rag: RagRecord) -> RerankSettings | None:
        """The reranker ``rag``'s project ranks with, or None (the stage is off)."""
        snapshot = self.rags.settings.snapshot(rag.tenant_id, rag.project_id)
        return self.rags.reranking.settings(snapshot)

    def measure_rerank(
        self, rag: RagRecord, settings: RerankSettings | None = None
    ) -> RerankCalibration | RerankUnmeasurable | None:
        """``rag``'s relevance cut in its project's reranker's scale (``settings``: the
        reranker, else the project's); a :class:`RerankUnmeasurable` when there is nothing
        to measure (no pseudo-query with a background, or no rule came of the reranker's
        scores); None when there is no reranker or it failed (logged, never raised)."""
        settings = settings or self.rerank_settings(rag)
        if settings is None:
            return None
        stage = self.rags.reranking
        if stage.wait_s(settings) > 0:  # its circuit is open: read no chunks for a refusal
            log.debug("RAG %s: the reranker's circuit is open; calibrated later", rag.name)
            return None
        identity = stage.identity(settings)  # the provider was found: wait_s loaded it
        scope = RagScope.of(rag)
        chunks = self.chunks.export_chunks(
            scope, pick_pseudo_sources(self.chunks.source_refs(scope))
        )
        drawn = draw_pseudo_queries(chunks)
        if not drawn:
            return self._unmeasurable(scope, identity)
        # the gap's own queries: their vectors come from the cache
        vectors, embedded = self._query_vectors(rag, [text for _, text in drawn])
        self.embedded_pseudo += embedded
        asks: list[tuple[str, list[str]]] = []
        for (ref, sentence), vector in zip(drawn, vectors, strict=True):
            texts = self._rerank_texts(chunks, ref, sentence, scope, vector)
            if texts is not None:
                asks.append((sentence, texts))
            if len(asks) == RERANK_CALIBRATION_QUERIES:
                break
        turns: list[RerankTurn] = []
        try:
            for sentence, texts in asks:
                scores = stage.background_scores(sentence, texts, settings)
                if 0 in scores:
                    rest = tuple(scores[i] for i in range(1, len(texts)) if i in scores)
                    turns.append(RerankTurn(scores[0], rest))
        except Exception as exc:  # an outage or a refusal: the cosine gap serves meanwhile
            level = logging.DEBUG if isinstance(exc, ProviderUnavailableError) else logging.WARNING
            log.log(
                level,
                "RAG %s of %s/%s: the reranker's cut is not calibrated (turns cut by the "
                "cosine gap until it is; tried again at the next refresh): %s",
                rag.name,
                rag.tenant_id,
                rag.project_id,
                error_text(exc),
            )
            return None
        derived = derive_rerank_rule(turns)
        if derived is None:
            return self._unmeasurable(scope, identity)
        rule, value, separation = derived
        return RerankCalibration(
            reranker=f"{settings.provider}:{stage.registry.model_of(settings)}",
            identity=identity,
            rule=rule,
            value=value,
            separation=separation,
            chunks=self.chunks.count_chunks(scope),
            rule_set=RERANK_RULE_ID,
            sources=tuple(round(t.source, 6) for t in turns),
            background=quantiles([b for t in turns for b in t.background]),
            calibrated_at=self.control.now(),
        )

    def _unmeasurable(self, scope: RagScope, identity: str) -> RerankUnmeasurable:
        """Nothing to measure with reranker ``identity`` at the RAG's chunk count now."""
        chunks = self.chunks.count_chunks(scope)
        return RerankUnmeasurable(identity, chunks, RERANK_RULE_ID, self.control.now())

    def _rerank_texts(
        self,
        chunks: Sequence[Chunk],
        ref: str,
        sentence: str,
        scope: RagScope,
        vector: Sequence[float],
    ) -> list[str] | None:
        """One pseudo-query's texts for the reranker: its source first (the chunk it was
        drawn from, without the sentence), then its dense background (the other sources'
        best candidates); None when the source holds nothing but the sentence, or the RAG
        nothing else."""
        source = next((c for c in chunks if c.source_ref == ref and sentence in c.text), None)
        rest = strip_sentence(source.text, sentence) if source is not None else ""
        if len(rest.split()) < 3:
            return None
        ranked = self.chunks.query(scope, vector, RERANK_CALIBRATION_TEXTS)
        background = [h.text for h in ranked if h.source_ref != ref and h.text.strip()]
        if not background:
            return None
        return [rest, *background[: RERANK_CALIBRATION_TEXTS - 1]]

    def measure(self, rag: RagRecord) -> Calibration:
        """The calibration of ``rag`` as its chunks stand now (nothing is stored)."""
        scope = RagScope.of(rag)
        chunks = self.chunks.count_chunks(scope)
        # an empty RAG: nothing can match, the floor is the lowest cosine
        best = self.chunks.best_scores(scope, self.probe_vectors(rag))
        scores = [-1.0 if score is None else score for score in best]
        gap, spreads = self.measure_gap(rag)
        rerank, unmeasurable = self._rerank_or_kept(rag)
        return Calibration(
            min_score=derive_min_score(scores),
            chunks=chunks,
            probe_set=PROBE_SET_ID,
            scores=tuple(scores),
            calibrated_at=self.control.now(),
            gap=gap,
            spreads=spreads,
            rerank=rerank,
            rerank_unmeasurable=unmeasurable,
        )

    def _rerank_or_kept(
        self, rag: RagRecord
    ) -> tuple[RerankCalibration | None, RerankUnmeasurable | None]:
        """A new rerank calibration, or when none was measured the one ``rag`` holds of the
        same reranker (its scale still holds); and the measurement when it found nothing to
        measure (a failed one is not kept: it is measured again at the next refresh)."""
        settings = self.rerank_settings(rag)
        measured = self.measure_rerank(rag, settings)
        if isinstance(measured, RerankCalibration):
            return measured, None
        unmeasurable = measured
        kept = rag.calibration.rerank if rag.calibration is not None else None
        if kept is None or settings is None:
            return None, unmeasurable
        try:
            same = kept.identity == self.rags.reranking.identity(settings)
        except Exception:
            return None, unmeasurable
        return (kept if same else None), unmeasurable

    def calibrate(self, rag: RagRecord) -> Calibration:
        """Measure ``rag`` and store the result with it."""
        calibration = self.measure(rag)
        self.control.set_rag_calibration(rag.tenant_id, rag.project_id, rag.id, calibration)
        previous = rag.calibration.min_score if rag.calibration else None
        log.info(
            "RAG %s of %s/%s calibrated: minScore auto = %.4f (was %s), relevance gap %s, "
            "rerank cut %s, over %d chunks",
            rag.name,
            rag.tenant_id,
            rag.project_id,
            calibration.min_score,
            "uncalibrated" if previous is None else f"{previous:.4f}",
            "none" if calibration.gap is None else f"{calibration.gap:.4f}",
            "none" if calibration.rerank is None else calibration.rerank.describe(),
            calibration.chunks,
        )
        return calibration

    def calibrate_if_due(self, rag: RagRecord) -> Calibration | None:
        """Calibrate ``rag`` when :func:`calibration_due` says so; the new calibration, or
        None when the stored one still holds."""
        chunks = self.chunks.count_chunks(RagScope.of(rag))
        if calibration_due(rag.calibration, chunks):
            return self.calibrate(rag)
        return self.recalibrate_rerank(rag, chunks)

    def recalibrate_rerank(
        self,
        rag: RagRecord,
        chunks: int | None = None,
        settings: RerankSettings | None = None,
    ) -> Calibration | None:
        """Measure and store ``rag``'s rerank calibration alone when it is due (a reranker
        set without one, another reranker since, the RAG doubled since); the updated
        calibration, or None (not due, not calibrated yet, nothing to measure: stored as
        such, or the reranker failed). ``settings``: the project's reranker, already read
        (else read here)."""
        settings = settings or self.rerank_settings(rag)
        if settings is None or rag.calibration is None:
            return None
        if chunks is None:
            chunks = self.chunks.count_chunks(RagScope.of(rag))
        try:
            identity = self.rags.reranking.identity(settings)
        except Exception as exc:
            log.debug("RAG %s: no rerank calibration: %s", rag.name, error_text(exc))
            return None
        if not rerank_calibration_due(rag.calibration, identity, chunks):
            return None
        measured = self.measure_rerank(rag, settings)
        if isinstance(measured, RerankUnmeasurable):
            # kept so that no worker asks the reranker again for the same nothing
            nothing = replace(rag.calibration, rerank_unmeasurable=measured)
            self.control.set_rag_calibration(rag.tenant_id, rag.project_id, rag.id, nothing)
            log.info(
                "RAG %s of %s/%s: nothing to measure the relevance cut with the reranker at %d "
                "chunks; measured again once the RAG doubles or the reranker changes",
                rag.name,
                rag.tenant_id,
                rag.project_id,
                measured.chunks,
            )
            return None
        if measured is None:
            return None
        calibration = replace(rag.calibration, rerank=measured, rerank_unmeasurable=None)
        self.control.set_rag_calibration(rag.tenant_id, rag.project_id, rag.id, calibration)
        log.info(
            "RAG %s of %s/%s: the relevance cut with reranker %s keeps hits %s (separation "
            "%.2f over %d pseudo-queries)",
            rag.name,
            rag.tenant_id,
            rag.project_id,
            measured.reranker,
            measured.describe(),
            measured.separation,
            len(measured.sources),
        )
        return calibration

    def refresh_rerank(self, tenant_id: str, project_id: str) -> int:
        """Measure the rerank calibration of the project's RAGs that have none of the
        reranker the project ranks with now (set or changed without a chunk changing, or
        unreachable when last tried); how many were. One settings read when no reranker is
        set; a RAG where it found nothing to measure waits until it grows
        (:func:`rerank_calibration_due`); growth is otherwise :meth:`refresh_project`'s."""
        snapshot = self.rags.settings.snapshot(tenant_id, project_id)
        settings = self.rags.reranking.settings(snapshot)
        if settings is None:
            return 0
        try:
            identity = self.rags.reranking.identity(settings)
        except Exception:
            return 0
        done = 0
        for rag in self.control.list_rags(tenant_id, project_id):
            measured = rag.calibration.rerank if rag.calibration is not None else None
            if rag.calibration is None or (
                measured is not None
                and measured.identity == identity
                and measured.rule_set == RERANK_RULE_ID
            ):
                continue
            done += self.recalibrate_rerank(rag, settings=settings) is not None
        return done

    def refresh_project(self, tenant_id: str, project_id: str) -> int:
        """Calibrate every live RAG of the project that is due; how many were."""
        done = 0
        for rag in self.control.list_rags(tenant_id, project_id):
            done += self.calibrate_if_due(rag) is not None
        return done
