"""``ProjectRagRetriever``: the one retrieval path, as a LlamaIndex retriever.

It answers with :meth:`RagService.query <vancetope_rag.services.rag.RagService.query>` —
the project's ``_documents`` RAG (or a manual RAG by name), the ``topK`` / ``minScore`` /
``maxPerDocument`` / mode cascade (call > recipe > project > tenant > engine configuration),
filters by path prefix, kind and LlamaIndex metadata filters, and the kill switch — and
returns ``NodeWithScore``s whose node carries the document id as ``ref_doc_id`` and whose
score is the cosine similarity. AutoInject (``pre_turn``) retrieves through it too, so
LlamaIndex's instrumentation sees a retrieval span for every turn, and a user's own query or
chat engine gets exactly what the ``<rag-context>`` block would show. The ``rag_query`` tool
and the CLI's ``query`` ask through it as well (:meth:`ProjectRagRetriever.query_rag`: the
cascade unless they pass a value, and a refusal instead of a silent skip).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.callbacks import CallbackManager
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.limits import AUTOINJECT_MAX_TOKENS
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, Hit, RagRecord
from vancetope_rag.domain.retrieval.calibration import AUTO, MinScore, resolve_min_score
from vancetope_rag.domain.retrieval.metadata_filters import (
    HitPredicate,
    all_of,
    compile_filters,
    pushdown,
)
from vancetope_rag.domain.retrieval.ranking import check_query_args, parse_retrieval_mode
from vancetope_rag.domain.retrieval.relevance import (
    RELEVANCE_AUTO,
    RELEVANCE_OFF,
    CutResult,
    RelevanceCut,
    parse_relevance_cut,
    resolve_floor,
    resolve_gap,
)
from vancetope_rag.domain.retrieval.rerank_cut import cut_turn
from vancetope_rag.domain.texts import check_id
from vancetope_rag.errors import InvalidInputError, ProjectRagDisabledError
from vancetope_rag.recipes import RagParams, Recipe, load_recipe
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.settings import SettingsSnapshot
from vancetope_rag.store.port.llamaindex_store import hit_to_node
from vancetope_rag.store.port.types import ChunkFilter

log = get_logger(__name__)

#: What ``recipe=`` accepts: parsed ``params.rag``, a parsed recipe, or a recipe file.
RecipeLike = RagParams | Recipe | str | os.PathLike[str]

#: Why a retrieval returns nothing without asking the store (AutoInject shows these).
PROJECT_RAG_DISABLED = "rag.project.enabled is false"
EMBEDDINGS_OFF = "embeddings are off for this tenant (ai.embedding.provider=none)"


@dataclass(frozen=True)
class RetrievalParams:
    """The resolved query parameters of one retrieval."""

    top_k: int
    #: A cosine, or ``auto`` until the RAG is known (:meth:`for_rag` resolves it).
    min_score: MinScore
    max_per_doc: int
    mode: str = "dense"
    max_tokens: int = AUTOINJECT_MAX_TOKENS
    #: Use the project's reranker, when ``ai.rerank.provider`` sets one.
    rerank: bool = True
    #: The ``<rag-context>`` block's relevance cut (AutoInject's; recipe > setting) as asked:
    #: ``auto``, ``off`` or a gap; :meth:`ProjectRagRetriever.turn_cut` resolves it with the
    #: turn's hits (``auto``: by the reranker's scores or the calibrated gap and noise floor).
    relevance_cut: RelevanceCut = RELEVANCE_OFF

    def for_rag(self, rag: RagRecord) -> RetrievalParams:
        """These parameters with ``minScore`` ``auto`` resolved to ``rag``'s calibrated
        threshold (the relevance cut stays as asked: its ``auto`` depends on the turn's
        hits)."""
        score = resolve_min_score(self.min_score, rag.calibration)
        return replace(self, min_score=self.min_score if score is None else score)


def rag_gap(cut: RelevanceCut | None, rag: RagRecord, mode: str) -> float | None:
    """The gap ``cut`` means for ``rag``'s hits in ``mode`` (None: no cut); ``auto`` reads
    the RAG's calibration."""
    return resolve_gap(cut, rag.calibration.gap if rag.calibration else None, mode)


def as_rag_params(recipe: RecipeLike | None) -> RagParams | None:
    """``params.rag`` of a recipe given in any of the accepted forms."""
    if recipe is None or isinstance(recipe, RagParams):
        return recipe
    if isinstance(recipe, Recipe):
        return recipe.rag
    if isinstance(recipe, str | os.PathLike):
        return load_recipe(recipe).rag
    raise InvalidInputError(
        f"recipe must be RagParams, a Recipe or a recipe file path, got {type(recipe).__name__}"
    )


def resolve_params(
    config: EngineConfig, snapshot: SettingsSnapshot, recipe: RagParams | None
) -> RetrievalParams:
    """Recipe param > cascade setting (project > tenant) > engine configuration."""
    eff = snapshot.effective
    r = recipe or RagParams()

    def pick(recipe_value: float | None, key: str, default: float) -> float:
        if recipe_value is not None:
            return recipe_value
        value = eff.get(key)
        return default if value is None else float(value)

    c = config
    # innermost first, auto included: a recipe's auto beats a tenant's number, and back
    min_score = next(
        v for v in (r.min_score, eff.get("rag.minScore"), c.retrieval_min_score) if v is not None
    )
    return RetrievalParams(
        top_k=int(pick(r.top_k, "rag.topK", c.retrieval_top_k)),
        min_score=AUTO if min_score == AUTO else float(min_score),
        max_per_doc=int(pick(r.max_per_document, "rag.maxPerDocument", c.retrieval_max_per_doc)),
        mode=r.retrieval_mode or str(eff["rag.retrieval.mode"]),
        max_tokens=int(pick(r.max_tokens, "rag.autoInject.maxTokens", c.autoinject_max_tokens)),
        rerank=r.rerank is not False,
        relevance_cut=next(
            v
            for v in (r.relevance_cut, eff.get("rag.autoInject.relevanceCut"), RELEVANCE_OFF)
            if v is not None
        ),
    )


@dataclass(frozen=True)
class RetrievalPlan:
    """What a retrieval will query: the RAG and the parameters, or why nothing is queried."""

    params: RetrievalParams
    rag: RagRecord | None = None
    reason: str | None = None
    snapshot: SettingsSnapshot | None = None


class HitNodeWithScore(NodeWithScore):
    """A ``NodeWithScore`` that keeps the :class:`Hit` it was made from (the fused rank of a
    hybrid query, the RAG id), so AutoInject renders exactly what the retriever returned."""

    _hit: Hit = PrivateAttr()

    @classmethod
    def of(cls, hit: Hit) -> HitNodeWithScore:
        made = cls(node=hit_to_node(hit), score=hit.score)
        made._hit = hit
        return made

    @property
    def hit(self) -> Hit:
        return self._hit


def hits_of(nodes: Sequence[NodeWithScore]) -> list[Hit]:
    """The hits behind a :class:`ProjectRagRetriever`'s nodes."""
    return [n.hit for n in nodes if isinstance(n, HitNodeWithScore)]


def _strings(value: str | Sequence[str] | None, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    if not all(isinstance(v, str) and v.strip() for v in items):
        raise InvalidInputError(f"{name} must be a non-empty text or a list of them")
    return tuple(items)


class ProjectRagRetriever(BaseRetriever):
    """A LlamaIndex retriever over one project's RAG.

    Build it with :meth:`RagApp.as_retriever <vancetope_rag.app.RagApp.as_retriever>`. Every
    ``retrieve`` reads the project's settings afresh (a retriever built with ``snapshot`` —
    AutoInject's, for one turn — uses that one). A project without the RAG, with
    ``rag.project.enabled=false`` (for ``_documents``) or under the kill switch
    (``ai.embedding.provider=none``) retrieves nothing, silently, without an embedding call.

    Args:
        rags: The RAG service that answers.
        config: Engine configuration (the innermost defaults of the cascade).
        tenant_id: Tenant of the project.
        project_id: Project whose RAG is queried.
        rag: RAG name; ``_documents`` (the project's documents) by default.
        recipe: A recipe (``RagParams``, ``Recipe`` or file path) whose ``params.rag`` sets
            ``topK``, ``minScore``, ``maxPerDocument`` and the mode unless overridden here.
        top_k: Hits to return at most (1-1000).
        min_score: Cosine threshold (-1..1), or ``auto``: the RAG's calibrated threshold.
        max_per_doc: At most this many hits per document.
        mode: ``dense`` or ``hybrid``.
        path_prefix: Keep only chunks whose path starts with this (or one of these).
        kinds: Keep only these chunk kinds (``content``, ``summary``).
        filters: LlamaIndex metadata filters on the chunk fields and the chunk's metadata.
        relevance_cut: ``auto`` (the RAG's calibrated gap), a fixed gap, or ``off`` (the
            default here: ``top_k`` hits when that many pass; AutoInject cuts its block by
            ``rag.autoInject.relevanceCut`` instead).
        snapshot: The project's settings, already read (one turn's retriever).
        callback_manager: LlamaIndex callbacks.
        rerank: False: no rerank stage even with ``ai.rerank.provider`` set (None: the
            recipe's ``rerank``, else on when a reranker is set).
    """

    def __init__(
        self,
        rags: RagService,
        config: EngineConfig,
        tenant_id: str,
        project_id: str,
        *,
        rag: str = DEFAULT_RAG_NAME,
        recipe: RecipeLike | None = None,
        top_k: int | None = None,
        min_score: MinScore | None = None,
        max_per_doc: int | None = None,
        mode: str | None = None,
        path_prefix: str | Sequence[str] | None = None,
        kinds: str | Sequence[str] | None = None,
        filters: MetadataFilters | None = None,
        relevance_cut: RelevanceCut | str | None = None,
        snapshot: SettingsSnapshot | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        rerank: bool | None = None,
    ) -> None:
        check_id(tenant_id, "tenant id")
        check_id(project_id, "project id")
        if not isinstance(rag, str) or not rag.strip():
            raise InvalidInputError("rag must name a RAG of the project, e.g. '_documents'")
        # Wrong overrides fail here, when the retriever is built, not at the first question.
        check_query_args(1 if top_k is None else top_k, min_score, max_per_doc)
        if mode is not None:
            mode = parse_retrieval_mode(mode).value
        if filters is not None and not isinstance(filters, MetadataFilters):
            raise InvalidInputError("filters must be llama_index MetadataFilters")
        if rerank is not None and not isinstance(rerank, bool):
            raise InvalidInputError(f"rerank must be true or false, got {rerank!r}")
        self.rerank = rerank
        self.relevance_cut = parse_relevance_cut(relevance_cut, "relevance_cut")
        self.rags = rags
        self.config = config
        self.tenant_id = tenant_id
        self.project_id = project_id
        self.rag_name = rag
        self.recipe = as_rag_params(recipe)
        self.top_k, self.min_score, self.max_per_doc, self.mode = (
            top_k,
            min_score,
            max_per_doc,
            mode,
        )
        self.path_prefixes = _strings(path_prefix, "path_prefix")
        self.kinds = _strings(kinds, "kinds")
        self.filters = filters
        self._keep = self._predicate(compile_filters(filters))
        self._store_filter = self._pushdown()
        self._snapshot = snapshot
        self._plan: RetrievalPlan | None = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _predicate(self, metadata: HitPredicate | None) -> HitPredicate | None:
        prefixes, kinds = self.path_prefixes, frozenset(self.kinds)
        by_path: HitPredicate | None = None
        if prefixes:
            by_path = lambda h: h.path is not None and h.path.startswith(prefixes)  # noqa: E731
        by_kind: HitPredicate | None = (lambda h: h.kind in kinds) if kinds else None
        return all_of([by_path, by_kind, metadata])

    def _pushdown(self) -> ChunkFilter | None:
        pushed: dict[str, str | Sequence[str]] = dict(pushdown(self.filters))
        if self.kinds and "kind" not in pushed:
            pushed["kind"] = list(self.kinds)
        return pushed or None

    # -- planning ----------------------------------------------------------------------

    def params(self, snapshot: SettingsSnapshot) -> RetrievalParams:
        """The cascade's parameters with this retriever's overrides on top."""
        base = resolve_params(self.config, snapshot, self.recipe)
        return RetrievalParams(
            top_k=base.top_k if self.top_k is None else self.top_k,
            min_score=base.min_score if self.min_score is None else self.min_score,
            max_per_doc=base.max_per_doc if self.max_per_doc is None else self.max_per_doc,
            mode=base.mode if self.mode is None else self.mode,
            max_tokens=base.max_tokens,
            rerank=base.rerank if self.rerank is None else self.rerank,
            relevance_cut=base.relevance_cut,
        )

    def plan(self) -> RetrievalPlan:
        """The RAG and parameters the next retrieval uses, or the reason it finds nothing
        (reused for the retriever's lifetime when it was built with a snapshot)."""
        if self._plan is not None:
            return self._plan
        snapshot = self._snapshot or self.rags.settings.snapshot(self.tenant_id, self.project_id)
        params = self.params(snapshot)
        plan = RetrievalPlan(params, snapshot=snapshot, reason=self._skip_reason(snapshot))
        if plan.reason is None:
            rag = self.rags.find(self.tenant_id, self.project_id, self.rag_name)
            reason = None if rag else f"the project has no {self.rag_name} RAG"
            plan = RetrievalPlan(params.for_rag(rag) if rag else params, rag, reason, snapshot)
        if self._snapshot is not None:
            self._plan = plan
        return plan

    def _skip_reason(self, snapshot: SettingsSnapshot) -> str | None:
        if self.rag_name == DEFAULT_RAG_NAME and not snapshot.project_rag_enabled():
            return PROJECT_RAG_DISABLED
        if not snapshot.embeddings_enabled():
            # Spec §4.5: provider `none` is the kill switch: no embed call, no warning.
            return EMBEDDINGS_OFF
        return None

    def gap_for(self, rag: RagRecord, mode: str) -> float | None:
        """The gap this retriever's own ``relevance_cut`` cuts ``rag``'s hits at (None: no
        cut)."""
        return rag_gap(self.relevance_cut, rag, mode)

    def turn_cut(
        self,
        rag: RagRecord,
        hits: Sequence[Hit],
        cut: RelevanceCut | None,
        mode: str,
        snapshot: SettingsSnapshot | None = None,
        rerank: bool = True,
        query: str | None = None,
    ) -> CutResult:
        """``hits`` (``rag``'s for ``query``, in their final order) cut by ``cut``: ``auto``
        cuts hits a reranker scored by the RAG's calibration of that reranker when it has one
        (:mod:`~vancetope_rag.domain.retrieval.rerank_cut`), else by the calibrated cosine
        gap and the turn's words; a fixed gap is a cosine gap whatever ordered the hits;
        ``off`` or None keeps them all."""
        rule = None
        if cut == RELEVANCE_AUTO and hits and hits[0].rerank_score is not None:
            snapshot = snapshot or self.rags.settings.snapshot(self.tenant_id, self.project_id)
            rule = self.rags.reranking.calibrated_rule(rag, snapshot, rerank)
        floor = resolve_floor(cut, rag.calibration)
        return cut_turn(hits, rag_gap(cut, rag, mode), rule, floor, query)

    # -- retrieval ---------------------------------------------------------------------

    def retrieve_hits(self, text: str) -> list[Hit]:
        """The hits for ``text`` (what :meth:`retrieve` wraps in nodes), without LlamaIndex's
        span and events."""
        return list(self.retrieve_cut(text).kept)

    def retrieve_cut(self, text: str) -> CutResult:
        """:meth:`retrieve_hits` with what this retriever's relevance cut dropped and why, and
        what it cut by (the REST test query shows them)."""
        plan = self.plan()
        if plan.rag is None:
            log.debug("retrieval for %s/%s: %s", self.tenant_id, self.project_id, plan.reason)
            return CutResult(())
        p = plan.params
        return self._query(
            plan.rag,
            text,
            top_k=p.top_k,
            min_score=p.min_score,
            max_per_doc=p.max_per_doc,
            mode=p.mode,
            snapshot=plan.snapshot,
            rerank=p.rerank,
            relevance_cut=self.relevance_cut,
        )

    def query_rag(
        self,
        rag: RagRecord,
        text: str,
        *,
        top_k: int | None = None,
        min_score: MinScore | None = None,
        max_per_doc: int | None = None,
        mode: str | None = None,
        rerank: bool | None = None,
        relevance_cut: RelevanceCut | str | None = None,
    ) -> list[Hit]:
        """The hits of ``rag`` (a RAG of this retriever's project, already looked up) for
        ``text``: the explicit query of the ``rag_query`` tool and the CLI's ``query``. A
        parameter left None is this retriever's, else the cascade's (recipe > project >
        tenant > engine configuration), as for :meth:`retrieve`. Unlike :meth:`retrieve`,
        nothing is skipped silently: a disabled ``_documents`` RAG, the kill switch or a bad
        argument raise. The retriever's filters apply.

        Raises:
            InvalidInputError: ``rag`` belongs to another project, or a bad argument.
            ProjectRagDisabledError: ``rag`` is ``_documents`` and ``rag.project.enabled`` is
                false for the project.
        """
        return list(
            self.query_rag_cut(
                rag,
                text,
                top_k=top_k,
                min_score=min_score,
                max_per_doc=max_per_doc,
                mode=mode,
                rerank=rerank,
                relevance_cut=relevance_cut,
            ).kept
        )

    def query_rag_cut(
        self,
        rag: RagRecord,
        text: str,
        *,
        top_k: int | None = None,
        min_score: MinScore | None = None,
        max_per_doc: int | None = None,
        mode: str | None = None,
        rerank: bool | None = None,
        relevance_cut: RelevanceCut | str | None = None,
    ) -> CutResult:
        """:meth:`query_rag` with what the relevance cut dropped and why, and what it cut by
        (the CLI's ``query`` shows them)."""
        if (rag.tenant_id, rag.project_id) != (self.tenant_id, self.project_id):
            raise InvalidInputError("the RAG belongs to another project than the retriever")
        check_query_args(1 if top_k is None else top_k, min_score, max_per_doc)
        cut = parse_relevance_cut(relevance_cut, "relevance_cut")
        snapshot = self._snapshot or self.rags.settings.snapshot(self.tenant_id, self.project_id)
        if rag.name == DEFAULT_RAG_NAME and not snapshot.project_rag_enabled():
            raise ProjectRagDisabledError(
                f"the project's documents are not searchable: {PROJECT_RAG_DISABLED} for "
                f"project {self.project_id!r}; set it to true to index and search them",
                tenant_id=self.tenant_id,
                project_id=self.project_id,
                rag_name=rag.name,
            )
        p = self.params(snapshot).for_rag(rag)
        return self._query(
            rag,
            text,
            top_k=p.top_k if top_k is None else top_k,
            min_score=p.min_score if min_score is None else min_score,
            max_per_doc=p.max_per_doc if max_per_doc is None else max_per_doc,
            mode=p.mode if mode is None else mode,
            snapshot=snapshot,
            rerank=p.rerank if rerank is None else rerank,
            relevance_cut=self.relevance_cut if cut is None else cut,
        )

    def _query(
        self,
        rag: RagRecord,
        text: str,
        *,
        top_k: int,
        min_score: MinScore | None,
        max_per_doc: int | None,
        mode: str,
        snapshot: SettingsSnapshot | None = None,
        rerank: bool = True,
        relevance_cut: RelevanceCut | None = None,
    ) -> CutResult:
        """The one call into :meth:`RagService.query`, with this retriever's filters, then
        the relevance cut asked for (on the final order: after any rerank the query does,
        by the reranker's scores when it has its calibration, see :meth:`turn_cut`)."""
        hits = self.rags.query(
            rag,
            text,
            top_k=top_k,
            min_score=min_score,
            max_per_doc=max_per_doc,
            filters=self._store_filter,
            snapshot=snapshot,
            mode=mode,
            keep=self._keep,
            rerank=rerank,
        )
        return self.turn_cut(rag, hits, relevance_cut, mode, snapshot, rerank, text)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [HitNodeWithScore.of(h) for h in self.retrieve_hits(query_bundle.query_str)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # The model and the store block: a worker thread (with its own store connection).
        return await asyncio.to_thread(self._retrieve, query_bundle)

    def __repr__(self) -> str:
        return (
            f"ProjectRagRetriever(tenant_id={self.tenant_id!r}, project_id={self.project_id!r}, "
            f"rag={self.rag_name!r})"
        )


#: The options of :class:`ProjectRagRetriever` an engine factory takes beside its own.
RETRIEVER_OPTIONS = frozenset(
    {
        "rag",
        "top_k",
        "min_score",
        "max_per_doc",
        "mode",
        "path_prefix",
        "kinds",
        "filters",
        "rerank",
        "relevance_cut",
    }
)


def check_retriever_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` when each names a :class:`ProjectRagRetriever` option: a misspelt one
    (``topK=``) is refused, never silently ignored."""
    known = RETRIEVER_OPTIONS | {"callback_manager", "verbose"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidInputError(
            f"unknown retriever option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return options


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` as (the retriever's, the LlamaIndex engine's): as with LlamaIndex's own
    ``index.as_query_engine(**kwargs)``, one set of keywords serves both."""
    mine = {k: v for k, v in options.items() if k in RETRIEVER_OPTIONS}
    return mine, {k: v for k, v in options.items() if k not in RETRIEVER_OPTIONS}


#: ``chat_mode`` values of :func:`chat_engine`.
CHAT_MODES = ("condense_plus_context", "context")


def query_engine(retriever: ProjectRagRetriever, llm: LLM | None, **kwargs: Any) -> BaseQueryEngine:
    """LlamaIndex's ``RetrieverQueryEngine`` over ``retriever`` (``kwargs``: its
    ``from_args`` options: ``response_mode``, ``node_postprocessors``, ``streaming``…)."""
    from llama_index.core.query_engine import RetrieverQueryEngine

    factory = RetrieverQueryEngine.from_args
    return factory(retriever, llm=llm, **_engine_options(factory, kwargs))


def chat_engine(
    retriever: ProjectRagRetriever,
    llm: LLM | None,
    chat_mode: str = "condense_plus_context",
    **kwargs: Any,
) -> BaseChatEngine:
    """LlamaIndex's ``CondensePlusContextChatEngine`` (or ``ContextChatEngine`` for
    ``chat_mode="context"``) over ``retriever``; ``kwargs`` go to its ``from_defaults``."""
    from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine

    if chat_mode == "condense_plus_context":
        factory: Callable[..., BaseChatEngine] = CondensePlusContextChatEngine.from_defaults
    elif chat_mode == "context":
        factory = ContextChatEngine.from_defaults
    else:
        raise InvalidInputError(
            f"chat_mode must be one of {', '.join(CHAT_MODES)}, got {chat_mode!r}"
        )
    return factory(retriever, llm=llm, **_engine_options(factory, kwargs))


def _engine_options(factory: Callable[..., Any], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` when the factory names each of them: LlamaIndex's factories swallow
    unknown keywords, so a misspelt option would be ignored without a word."""
    params = inspect.signature(factory).parameters
    named = {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD} - {"retriever", "llm"}
    unknown = sorted(set(options) - named)
    if unknown:
        raise InvalidInputError(
            f"unknown option(s) {', '.join(unknown)}; the retriever takes "
            f"{', '.join(sorted(RETRIEVER_OPTIONS))}, the engine {', '.join(sorted(named))}"
        )
    return options
