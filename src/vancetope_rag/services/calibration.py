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
"""

from __future__ import annotations

from collections.abc import Sequence

from vancetope_rag.domain.records import RagRecord
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
from vancetope_rag.embeddings import text_hash
from vancetope_rag.secrets import get_logger
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

    def measure(self, rag: RagRecord) -> Calibration:
        """The calibration of ``rag`` as its chunks stand now (nothing is stored)."""
        scope = RagScope.of(rag)
        chunks = self.chunks.count_chunks(scope)
        # an empty RAG: nothing can match, the floor is the lowest cosine
        best = self.chunks.best_scores(scope, self.probe_vectors(rag))
        scores = [-1.0 if score is None else score for score in best]
        gap, spreads = self.measure_gap(rag)
        return Calibration(
            min_score=derive_min_score(scores),
            chunks=chunks,
            probe_set=PROBE_SET_ID,
            scores=tuple(scores),
            calibrated_at=self.control.now(),
            gap=gap,
            spreads=spreads,
        )

    def calibrate(self, rag: RagRecord) -> Calibration:
        """Measure ``rag`` and store the result with it."""
        calibration = self.measure(rag)
        self.control.set_rag_calibration(rag.tenant_id, rag.project_id, rag.id, calibration)
        previous = rag.calibration.min_score if rag.calibration else None
        log.info(
            "RAG %s of %s/%s calibrated: minScore auto = %.4f (was %s), relevance gap %s, "
            "over %d chunks",
            rag.name,
            rag.tenant_id,
            rag.project_id,
            calibration.min_score,
            "uncalibrated" if previous is None else f"{previous:.4f}",
            "none" if calibration.gap is None else f"{calibration.gap:.4f}",
            calibration.chunks,
        )
        return calibration

    def calibrate_if_due(self, rag: RagRecord) -> Calibration | None:
        """Calibrate ``rag`` when :func:`calibration_due` says so; the new calibration, or
        None when the stored one still holds."""
        chunks = self.chunks.count_chunks(RagScope.of(rag))
        if not calibration_due(rag.calibration, chunks):
            return None
        return self.calibrate(rag)

    def refresh_project(self, tenant_id: str, project_id: str) -> int:
        """Calibrate every live RAG of the project that is due; how many were."""
        done = 0
        for rag in self.control.list_rags(tenant_id, project_id):
            done += self.calibrate_if_due(rag) is not None
        return done
