"""The built-in rerankers: the ``/rerank`` APIs people already run.

* ``tei``: Hugging Face text-embeddings-inference serving a reranker model:
  ``POST {baseUrl}/rerank {"query", "texts", "truncate"}`` → ``[{"index", "score"}]``.
  TEI refuses more texts than its ``--max-client-batch-size`` (32 by default) with a 413, so
  the texts go in requests of at most 32 (a cross-encoder scores each pair alone: the
  batches' scores compare).
* ``cohere``: the Cohere-style ``POST {baseUrl}/rerank {"model", "query", "documents",
  "top_n"}`` → ``{"results": [{"index", "relevance_score"}]}`` that Cohere
  (``https://api.cohere.com/v1``, the default), Jina (``https://api.jina.ai/v1``), Infinity
  and vLLM (``http://host:8000/v1``) serve.

Both send ``ai.rerank.apiKey`` as a bearer token when it is set. No extra is needed: the
calls use the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vancetope_rag.errors import RerankError
from vancetope_rag.hookspecs import hookimpl
from vancetope_rag.outbound_http import base_url_problem, shown_url
from vancetope_rag.rerankers import (
    Reranker,
    RerankerProvider,
    RerankSettings,
    post_json,
    scores_of,
)

#: TEI's default ``--max-client-batch-size``: more texts in one request are refused (413).
TEI_BATCH = 32
COHERE_BASE_URL = "https://api.cohere.com/v1"


@dataclass(frozen=True)
class _HttpReranker:
    """One ``/rerank`` endpoint: ``body(query, texts)`` is a request, ``items``/``score`` say
    where the answer keeps the ranks, ``batch`` caps the texts per request."""

    model: str
    url: str
    body: Callable[[str, list[str]], dict[str, object]]
    items: str | None
    score: str
    batch: int
    timeout_s: float
    api_key: str | None = field(default=None, repr=False)
    remote: bool = True

    def rerank(self, query: str, texts: Sequence[str]) -> Mapping[int, float]:
        found: dict[int, float] = {}
        for start in range(0, len(texts), self.batch):
            part = list(texts[start : start + self.batch])
            answer = post_json(
                self.url, self.body(query, part), api_key=self.api_key, timeout_s=self.timeout_s
            )
            where = shown_url(self.url)
            ranks = scores_of(answer, len(part), items=self.items, score=self.score, where=where)
            found.update({start + i: s for i, s in ranks.items()})
        return found


def _endpoint(settings: RerankSettings, default: str | None) -> str:
    base = settings.base_url or default
    if not base:
        raise RerankError(
            f"ai.rerank.baseUrl is required for reranker {settings.provider!r} (the server's "
            "root, e.g. http://localhost:8080); set it with: vancetope-rag settings set "
            "ai.rerank.baseUrl <url>"
        )
    problem = base_url_problem(base, "ai.rerank.baseUrl")
    if problem:
        raise RerankError(problem)
    return base.rstrip("/") + "/rerank"


class TeiProvider:
    """text-embeddings-inference serving a reranker (one model per server)."""

    name = "tei"

    def default_model(self) -> str:
        return "tei"  # the server ranks with the model it was started with

    def load(self, settings: RerankSettings, model: str) -> Reranker:
        return _HttpReranker(
            model=model,
            url=_endpoint(settings, None),
            body=lambda query, texts: {"query": query, "texts": texts, "truncate": True},
            items=None,
            score="score",
            batch=TEI_BATCH,
            timeout_s=settings.timeout_s,
            api_key=settings.api_key,
        )


class CohereProvider:
    """Cohere's rerank API, and the servers that speak it (Jina, Infinity, vLLM)."""

    name = "cohere"

    def default_model(self) -> str:
        return "rerank-v3.5"

    def load(self, settings: RerankSettings, model: str) -> Reranker:
        if not settings.base_url and not settings.api_key:
            raise RerankError(
                "ai.rerank.apiKey is required for Cohere's API (or set ai.rerank.baseUrl to a "
                "keyless server that speaks it, such as Infinity or vLLM)"
            )
        return _HttpReranker(
            model=model,
            url=_endpoint(settings, COHERE_BASE_URL),
            body=lambda query, texts: {
                "model": model,
                "query": query,
                "documents": texts,
                "top_n": len(texts),
            },
            items="results",
            score="relevance_score",
            batch=1000,  # Cohere's limit; the stage never sends more
            timeout_s=settings.timeout_s,
            api_key=settings.api_key,
        )


@hookimpl(tryfirst=True)
def register_rerankers(register: Callable[[RerankerProvider], None]) -> None:
    register(TeiProvider())
    register(CohereProvider())
