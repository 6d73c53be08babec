"""Rerankers: what reorders a query's candidates by a model that reads the query and each
text together (a cross-encoder), before ``topK`` and ``maxPerDocument`` apply.

``ai.rerank.provider`` names a provider in the :class:`RerankerRegistry`, or ``none`` (the
default: no rerank stage). Every provider comes from the ``register_rerankers`` hook: the
built-in ``tei`` and ``cohere`` are a default plugin
(:mod:`vancetope_rag.default_plugins.rerankers`), registered like a third party's; a
LlamaIndex ``BaseNodePostprocessor`` becomes one with
:class:`~vancetope_rag.integrations.llamaindex.rerank.PostprocessorReranker`. This module holds
what they share: the protocols, the registry and the JSON call over HTTP. The stage itself
(candidates, circuit, pacing, the skip on failure) is
:mod:`vancetope_rag.services.retrieval.rerank`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vancetope_rag.errors import RerankError
from vancetope_rag.outbound_http import error_detail, quote, shown_url
from vancetope_rag.provider_table import PROVIDER_NONE, ProviderTable, key_digest

#: Largest answer read from a reranker (scores of 1,000 texts are far smaller).
MAX_ANSWER_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RerankSettings:
    """The effective ``ai.rerank.*`` settings of a project (cascade already applied)."""

    provider: str = PROVIDER_NONE
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never printed
    base_url: str | None = None
    timeout_s: float = 10.0
    #: ``ai.rerank.requestsPerMinute``: past it a query goes without the reranker.
    requests_per_minute: int | None = None

    @property
    def enabled(self) -> bool:
        return self.provider != PROVIDER_NONE


class Reranker(Protocol):
    """A loaded reranker."""

    @property
    def model(self) -> str:
        """The model it ranks with (the circuit's key, for logs and metrics)."""
        ...

    @property
    def remote(self) -> bool:
        """Called over the network: the stage's circuit and pacing apply."""
        ...

    def rerank(self, query: str, texts: Sequence[str]) -> Mapping[int, float]:
        """The score of each text it ranked, by the text's index in ``texts`` (higher is more
        relevant). A text left out ranks after the scored ones, in its given order.

        Raises:
            RerankError: The reranker refused or failed (``status_code`` set when it
                answered with an HTTP error).
            ConnectionError, TimeoutError: It was not reached, or did not answer in time.
        """
        ...


class RerankerProvider(Protocol):
    """What a plugin hands to ``register_rerankers``.

    Attributes:
        name: The value of ``ai.rerank.provider`` that selects it (not ``none``).
    """

    name: str

    def default_model(self) -> str:
        """The model used when ``ai.rerank.model`` is unset."""
        ...

    def load(self, settings: RerankSettings, model: str) -> Reranker:
        """The reranker for these settings (the registry caches it per settings and model).

        Raises:
            RerankError: Bad settings (a missing URL or key); no secret in the message.
        """
        ...


class RerankerRegistry(ProviderTable[RerankerProvider, Reranker]):
    """Provider name → reranker provider. The app fills it through the ``register_rerankers``
    hook; :meth:`register` also takes one programmatically (a LlamaIndex postprocessor's)."""

    what, off = "reranker", "the rerank stage"

    def error(self, message: str) -> RerankError:
        return RerankError(message)

    def model_of(self, settings: RerankSettings) -> str:
        """The model these settings rank with (the provider's default when unset)."""
        return settings.model or self.provider(settings.provider).default_model()

    def load(self, settings: RerankSettings) -> Reranker:
        """The reranker for these settings (loaded once per provider, model, URL and key)."""
        if not settings.enabled:
            raise RerankError("no reranker is set (ai.rerank.provider=none)")
        provider = self.provider(settings.provider)
        model = self.model_of(settings)
        digest = key_digest(settings.api_key)
        key = (settings.provider, model, settings.base_url, digest, settings.timeout_s)
        return self.cached(key, lambda: provider.load(settings, model))


# -- the JSON call the built-in providers make ------------------------------------------------


def post_json(url: str, body: object, *, api_key: str | None, timeout_s: float) -> object:
    """POST ``body`` as JSON to ``url`` (the key as a bearer token) and decode the answer.

    Raises:
        RerankError: An HTTP error status (``status_code`` and the headers kept for the
            circuits), or an answer that is not JSON.
        ConnectionError: The server was not reached.
        TimeoutError: It did not answer within ``timeout_s``.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), headers=headers, method="POST"
    )
    where = shown_url(url)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = error_detail(exc, api_key)
        raise RerankError(
            f"the reranker at {where} answered HTTP {exc.code}{detail}",
            status_code=exc.code,
            headers=exc.headers,
        ) from None
    except TimeoutError:
        raise _late(where, timeout_s) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _late(where, timeout_s) from None
        reason = quote(str(exc.reason), api_key)
        raise ConnectionError(f"cannot reach the reranker at {where}: {reason}") from None
    except OSError as exc:  # reset or refused mid-answer
        raise ConnectionError(
            f"cannot reach the reranker at {where}: {quote(str(exc), api_key)}"
        ) from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise RerankError(f"the reranker at {where} sent an oversized answer")
    try:
        return json.loads(raw)
    except ValueError:
        shown = quote(raw[:200].decode("utf-8", "replace"), api_key)
        raise RerankError(f"the reranker at {where} did not answer with JSON: {shown!r}") from None


def _late(where: str, timeout_s: float) -> TimeoutError:
    return TimeoutError(
        f"the reranker at {where} did not answer within {timeout_s:g}s (ai.rerank.timeoutSeconds)"
    )


def scores_of(
    answer: object, count: int, *, items: str | None, score: str, where: str
) -> dict[int, float]:
    """Scores by index from a ``/rerank`` answer: a list of ``{"index", <score>}`` (TEI, with
    ``items`` None) or an object whose ``items`` key holds that list (Cohere's ``results``).

    Raises:
        RerankError: The answer has another shape, or an index outside the texts sent.
    """
    listed = answer.get(items) if items is not None and isinstance(answer, dict) else answer
    if not isinstance(listed, list):
        raise RerankError(f"the reranker at {where} answered without a list of ranks")
    found: dict[int, float] = {}
    for entry in listed:
        index = entry.get("index") if isinstance(entry, dict) else None
        value = entry.get(score) if isinstance(entry, dict) else None
        if (
            not isinstance(index, int)
            or isinstance(index, bool)
            or not 0 <= index < count
            or not isinstance(value, int | float)
            or isinstance(value, bool)
            or value != value  # NaN
        ):
            raise RerankError(
                f"the reranker at {where} answered a rank that is not an index below {count} "
                f"with a numeric {score}: {str(entry)[:200]!r}"
            )
        found[index] = float(value)
    return found
