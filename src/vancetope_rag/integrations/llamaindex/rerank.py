"""Rerankers and LlamaIndex node postprocessors, both ways.

* :class:`PostprocessorReranker`: a LlamaIndex ``BaseNodePostprocessor`` of one's own (e.g.
  ``SentenceTransformerRerank``) as a reranker of the rerank stage::

      app.rerankers.register(PostprocessorReranker("minilm-ce", SentenceTransformerRerank(
          model="cross-encoder/ms-marco-MiniLM-L-6-v2", top_n=50)))
      app.settings.set(tenant, None, "ai.rerank.provider", "minilm-ce")

  It runs in process (no circuit, no pacing); the texts it leaves out (its ``top_n``) rank
  after the ones it scored.
* :class:`VancetopeRerank`: the project's reranker (``ai.rerank.*``, behind its circuit and
  pace) as a LlamaIndex postprocessor, for a query engine of one's own::

      engine = index.as_query_engine(node_postprocessors=[
          app.rerank_postprocessor(tenant, project, top_n=5)])

  The nodes come back in the reranker's order, each with the reranker's score; when the
  reranker is off or fails they come back in their given order (``top_n`` still applies).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from vancetope_rag.errors import InvalidInputError
from vancetope_rag.rerankers import Reranker, RerankSettings
from vancetope_rag.services.retrieval.rerank import RerankStage, rerank_order

__all__ = ["PostprocessorReranker", "VancetopeRerank"]


class PostprocessorReranker:
    """A LlamaIndex node postprocessor as a reranker provider (and its loaded reranker).

    Args:
        name: The value of ``ai.rerank.provider`` that selects it.
        postprocessor: Reorders (and scores) nodes for a query.
        model: The name logs and metrics show (the postprocessor's class by default).
    """

    remote = False

    def __init__(
        self, name: str, postprocessor: BaseNodePostprocessor, *, model: str | None = None
    ) -> None:
        if not isinstance(postprocessor, BaseNodePostprocessor):
            raise InvalidInputError(
                "postprocessor must be a llama_index BaseNodePostprocessor, got "
                f"{type(postprocessor).__name__}"
            )
        self.name = name
        self.postprocessor = postprocessor
        self.model = model or type(postprocessor).__name__

    def default_model(self) -> str:
        return self.model

    def load(self, settings: RerankSettings, model: str) -> Reranker:
        return self

    def rerank(self, query: str, texts: Sequence[str]) -> Mapping[int, float]:
        nodes = [NodeWithScore(node=TextNode(id_=str(i), text=t)) for i, t in enumerate(texts)]
        ranked = self.postprocessor.postprocess_nodes(nodes, query_str=query)
        found: dict[int, float] = {}
        count = len(ranked)
        for place, scored in enumerate(ranked):
            index = int(scored.node.node_id)
            # a postprocessor that only reorders scores by its order
            found[index] = float(scored.score) if scored.score is not None else count - place
        return found


class VancetopeRerank(BaseNodePostprocessor):
    """The rerank stage as a LlamaIndex postprocessor (see the module's docstring).

    Build it with :meth:`RagApp.rerank_postprocessor
    <vancetope_rag.app.RagApp.rerank_postprocessor>` (the project's settings, read at every
    call), or from a stage and explicit settings.
    """

    top_n: int | None = Field(default=None, description="Nodes kept at most (None: all).")
    _stage: RerankStage = PrivateAttr()
    _settings: Callable[[], RerankSettings] = PrivateAttr()

    def __init__(
        self,
        stage: RerankStage,
        settings: RerankSettings | Callable[[], RerankSettings],
        *,
        top_n: int | None = None,
    ) -> None:
        if top_n is not None and (not isinstance(top_n, int) or top_n < 1):
            raise InvalidInputError(f"top_n must be a positive integer, got {top_n!r}")
        super().__init__(top_n=top_n)  # type: ignore[call-arg]  # a field of ours
        self._stage = stage
        self._settings = settings if callable(settings) else (lambda: settings)

    @classmethod
    def class_name(cls) -> str:
        return "VancetopeRerank"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InvalidInputError("VancetopeRerank needs the query (query_str or query_bundle)")
        settings = self._settings()
        ranked = list(nodes)
        if nodes and settings.enabled:
            texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
            scores, _ = self._stage.scores(query_bundle.query_str, texts, settings)
            if scores is not None:
                ranked = [
                    NodeWithScore(node=nodes[i].node, score=scores[i]) if i in scores else nodes[i]
                    for i in rerank_order(len(nodes), scores)
                ]
        return ranked if self.top_n is None else ranked[: self.top_n]
