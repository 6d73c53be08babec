"""RagAutoInjectService: the pre-turn step that adds ``<rag-context>`` (spec §5, Variant C)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.block.budget import fit_to_budget
from vancetope_rag.domain.block.context_block import render_context_block
from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.hit_order import Verdict, explain_candidates
from vancetope_rag.domain.retrieval.relevance import RELEVANCE_OFF, Dropped
from vancetope_rag.domain.settings.cascade import explain_auto_inject
from vancetope_rag.errors import ProviderUnavailableError
from vancetope_rag.metrics import Metrics
from vancetope_rag.recipes import RagParams
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.retrieval.retriever import (
    PROJECT_RAG_DISABLED,
    ProjectRagRetriever,
    RetrievalParams,
    hits_of,
    resolve_params,
)
from vancetope_rag.services.settings import SettingsService, SettingsSnapshot
from vancetope_rag.services.tokens import count_tokens
from vancetope_rag.store.port.deadline import turn_deadline

log = get_logger(__name__)


@dataclass(frozen=True)
class InjectionDecision:
    """What the pre-turn step did and why (for logs, tests and ``--explain``)."""

    enabled: bool
    decided_by: str
    reason: str
    hits: tuple[Hit, ...] = ()
    block: str | None = None
    #: The candidates left out of the block, each with why: the relevance cut's reason
    #: (``gap 0.171 > 0.150``, ``fused 0.52 of best < 0.70``) or the token budget.
    dropped: tuple[Dropped, ...] = ()


#: The decisions of the current context, while :func:`observe_decisions` collects them.
_OBSERVED: ContextVar[list[InjectionDecision] | None] = ContextVar(
    "vancetope_rag_observed_decisions", default=None
)


@contextmanager
def observe_decisions() -> Iterator[list[InjectionDecision]]:
    """Collect every decision :meth:`RagAutoInjectService.decide` makes in this context.

    ``pre_turn`` gives system message texts only; a host that shows the injected sources
    (the chat proxy's response header) reads them from the decision behind the block, without
    a second retrieval. Context-local: concurrent turns in other threads or tasks never mix.
    """
    seen: list[InjectionDecision] = []
    token = _OBSERVED.set(seen)
    try:
        yield seen
    finally:
        _OBSERVED.reset(token)


@dataclass(eq=False, repr=False, kw_only=True)
class RagAutoInjectService:
    """Resolves ON/OFF/AUTO, queries ``_documents`` and renders the block. Never raises for
    retrieval problems: a failed embed or query is a warning and the turn goes on."""

    rags: RagService
    settings: SettingsService
    config: EngineConfig
    metrics: Metrics
    default_template: str | None = None

    def params(
        self,
        tenant_id: str,
        project_id: str,
        recipe: RagParams | None,
        snapshot: SettingsSnapshot | None = None,
    ) -> RetrievalParams:
        """Recipe param > cascade setting (project > tenant) > engine configuration."""
        snapshot = snapshot or self.settings.snapshot(tenant_id, project_id)
        return resolve_params(self.config, snapshot, recipe)

    def retriever(
        self,
        tenant_id: str,
        project_id: str,
        recipe: RagParams | None = None,
        snapshot: SettingsSnapshot | None = None,
    ) -> ProjectRagRetriever:
        """The retriever of one turn: the project's ``_documents`` with the recipe's and the
        cascade's parameters (``snapshot``: the settings this turn already read)."""
        return ProjectRagRetriever(
            rags=self.rags,
            config=self.config,
            tenant_id=tenant_id,
            project_id=project_id,
            recipe=recipe,
            snapshot=snapshot,
        )

    def decide(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        recipe: RagParams | None = None,
        tools: Sequence[object] | None = None,
    ) -> InjectionDecision:
        """What the pre-turn step does for this turn, and why.

        Args:
            tenant_id: Tenant of the conversation.
            project_id: Project whose ``_documents`` RAG is queried.
            user_messages: The turn's user messages.
            recipe: The recipe's ``params.rag``.
            tools: The tools the turn's model was given (LlamaIndex tools, tool names or
                OpenAI-style tool dicts); with ``rag.autoInject.whenToolsPresent=skip`` a
                cascade ON defers to a ``rag_query`` tool.
        """
        started = time.perf_counter()
        try:
            decision = self._decide(tenant_id, project_id, user_messages, recipe, tools)
        finally:
            self.metrics.pre_turn_seconds.observe(time.perf_counter() - started)
        seen = _OBSERVED.get()
        if seen is not None:
            seen.append(decision)
        return decision

    def _decide(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        recipe: RagParams | None,
        tools: Sequence[object] | None,
    ) -> InjectionDecision:
        snapshot = self.settings.snapshot(tenant_id, project_id)  # one read for the whole turn
        project_value, tenant_value = snapshot.auto_inject_scopes()
        enabled, decided_by = explain_auto_inject(
            recipe.auto_inject if recipe else None, project_value, tenant_value
        )
        if not enabled:
            return InjectionDecision(False, decided_by, "autoInject is off")
        if (
            decided_by in ("project", "tenant")
            and snapshot.effective["rag.autoInject.whenToolsPresent"] == "skip"
            and RAG_QUERY_TOOL in tool_names(tools)
        ):
            # The model can retrieve for itself; an explicit recipe ON still injects.
            reason = "the model has the rag_query tool (rag.autoInject.whenToolsPresent=skip)"
            return InjectionDecision(False, decided_by, reason)
        if not self.config.rag_enabled:
            return InjectionDecision(False, "engine", "RAG_ENABLED is false for this engine")
        retriever = self.retriever(tenant_id, project_id, recipe, snapshot)
        plan = retriever.plan()
        if plan.reason == PROJECT_RAG_DISABLED:
            return InjectionDecision(False, "project", plan.reason)
        text = "\n".join(m.strip() for m in user_messages if isinstance(m, str) and m.strip())
        if not text:
            return InjectionDecision(True, decided_by, "no user text in this turn")
        if plan.reason is not None:
            # Spec §4.5 and §5: the kill switch and a missing RAG are silent skips.
            return InjectionDecision(True, decided_by, plan.reason)
        p, rag = plan.params, plan.rag
        assert rag is not None  # no reason: the plan found the RAG
        try:
            # Through LlamaIndex's retrieve(): the same path (and spans) as a query engine;
            # within the turn's own deadline (a slow search skips the block, spec §5)
            with turn_deadline(self.config.turn_deadline_s):
                hits = hits_of(retriever.retrieve(text))
        except ProviderUnavailableError as exc:
            # refused at once, no call made: the provider's circuit logged the outage once
            log.debug("AutoInject skipped for %s/%s: %s", tenant_id, project_id, exc)
            return InjectionDecision(True, decided_by, f"provider unavailable: {exc}")
        except Exception as exc:
            log.warning(
                "AutoInject skipped for %s/%s: retrieval failed: %s", tenant_id, project_id, exc
            )
            return InjectionDecision(True, decided_by, f"retrieval failed: {exc}")
        if not hits:
            return InjectionDecision(True, decided_by, f"no hit scored {p.min_score} or more")
        # the cut runs on the final order (the retrieval's, or a reranker's: then by its
        # scores, when the RAG is calibrated for it); topK stays the most
        cut = retriever.turn_cut(rag, hits, p.relevance_cut, p.mode, snapshot, p.rerank, text)
        hits, dropped = list(cut.kept), cut.dropped
        template = (recipe.template if recipe else None) or self.default_template
        try:
            block, shown = fit_to_budget(
                hits,
                lambda some: render_context_block(some, template, project_rag=True),
                count_tokens,
                p.max_tokens,
            )
        except Exception as exc:
            log.warning("AutoInject skipped: the context template failed: %s", exc)
            return InjectionDecision(
                True, decided_by, f"template failed: {exc}", tuple(hits), dropped=dropped
            )
        if block is None:
            reason = f"not even the best excerpt fits rag.autoInject.maxTokens={p.max_tokens}"
            return InjectionDecision(True, decided_by, reason, tuple(hits), dropped=dropped)
        over = f"over rag.autoInject.maxTokens={p.max_tokens}"
        dropped += tuple(Dropped(h, over) for h in hits[len(shown) :])
        return InjectionDecision(True, decided_by, "injected", tuple(shown), block, dropped)

    def candidates(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        decision: InjectionDecision,
        recipe: RagParams | None = None,
    ) -> list[Verdict]:
        """Every candidate of ``decision``'s turn with why it was shown or left out
        (``context --explain``): the threshold, the per-document cap, ``topK``, the relevance
        cut or the token budget. One more retrieval through the same path, without the
        threshold, the cap and ``topK`` (:data:`EXPLAIN_DEPTH` candidates); nothing when the
        turn retrieved nothing."""
        if not decision.enabled or not (decision.hits or decision.dropped):
            return []
        retriever = self.retriever(tenant_id, project_id, recipe)
        plan = retriever.plan()
        if plan.rag is None:
            return []
        p = plan.params
        text = "\n".join(m.strip() for m in user_messages if isinstance(m, str) and m.strip())
        wide = retriever.query_rag(
            plan.rag,
            text,
            top_k=max(EXPLAIN_DEPTH, p.top_k),
            min_score=-1.0,
            max_per_doc=None,
            relevance_cut=RELEVANCE_OFF,
        )
        threshold = p.min_score if isinstance(p.min_score, float) else None
        return explain_candidates(
            wide,
            decision.hits,
            [(d.hit, d.reason) for d in decision.dropped],
            min_score=threshold,
            max_per_doc=p.max_per_doc,
            top_k=p.top_k,
        )

    def context_block(
        self,
        tenant_id: str,
        project_id: str,
        user_messages: Sequence[str],
        recipe: RagParams | None = None,
        tools: Sequence[object] | None = None,
    ) -> str | None:
        """The ``<rag-context>`` system message for this turn, or None (silent skip)."""
        return self.decide(tenant_id, project_id, user_messages, recipe, tools).block


#: How many candidates ``context --explain`` looks at (beyond them: past ``topK`` anyway).
EXPLAIN_DEPTH = 20

#: The tool whose presence lets AutoInject defer (``rag.autoInject.whenToolsPresent``).
RAG_QUERY_TOOL = "rag_query"


def tool_names(tools: Sequence[object] | None) -> set[str]:
    """The names of a turn's tools: LlamaIndex tools (``metadata.name``), objects with a
    ``name``, plain names, or OpenAI-style dicts (``{"name": …}`` or
    ``{"function": {"name": …}}``)."""
    names: set[str] = set()
    for tool in tools or ():
        name: object = None
        if isinstance(tool, str):
            name = tool
        elif isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
        else:
            metadata = getattr(tool, "metadata", None)
            name = getattr(metadata, "name", None) or getattr(tool, "name", None)
        if isinstance(name, str):
            names.add(name)
    return names
