"""Test fakes shared by every test folder: the tenant/project ids, a handful of documents, and
embedding providers that really compute (lexical hashing vectors) while a probe watches — and
may fail — every model call.

Importable as ``fakes`` from any test module: pytest puts this folder (the one holding the
root ``conftest.py``) on ``sys.path``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.embeddings.base import Embedding
from llama_index.core.tools import FunctionTool
from pydantic import PrivateAttr

from vancetope_rag.default_plugins.hashing import HashingEmbedding
from vancetope_rag.embeddings import EmbeddingRegistry, EmbeddingSettings, LoadedModel
from vancetope_rag.extraction.registry import ExtractorRegistry
from vancetope_rag.plugins import get_plugin_manager

#: The tenant and project most tests work in (``make_app`` sets up tenant ``t1``).
T, P = "t1", "p1"

#: Three documents on unrelated topics: a lexical query finds exactly one of them.
DOCS = {
    "documents/zebra.md": "Zebras graze on the savanna grass. Zebra stripes confuse biting flies.",
    "documents/cluster.md": "The cluster runs three pods with Mongo centric state and leases.",
    "documents/holiday.md": "Employees get thirty vacation days per year, booked in the portal.",
}

#: What a provider that refuses an input says (the poison probes and their tests share it).
POISON_MESSAGE = "provider rejected the input: unsupported token sequence"


# -- probes: called with ("text" | "query", texts) before a probe model answers; may raise --

Probe = Callable[[str, list[str]], None]


@dataclass
class CallLog:
    """Records every model call: ``calls`` holds (kind, texts)."""

    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, kind: str, texts: list[str]) -> None:
        with self._lock:
            self.calls.append((kind, list(texts)))

    @property
    def text_calls(self) -> list[list[str]]:
        return [texts for kind, texts in self.calls if kind == "text"]

    @property
    def embedded(self) -> list[str]:
        """Every text embedded for indexing, in call order."""
        return [t for texts in self.text_calls for t in texts]

    @property
    def queries(self) -> list[str]:
        """Every query text embedded, in call order."""
        return [t for kind, texts in self.calls if kind == "query" for t in texts]

    def clear(self) -> None:
        self.calls.clear()


class Flaky(CallLog):
    """Fails a share of the model calls at random (seeded), like a shaky network."""

    def __init__(self, rate: float, seed: int = 7) -> None:
        super().__init__()
        self.rate = rate
        self.rng = random.Random(seed)
        self.failures = 0

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if self.rng.random() < self.rate:
            self.failures += 1
            raise ConnectionError("simulated network failure (connection reset by peer)")


class Poison(CallLog):
    """Fails every call whose batch holds a text containing ``marker``."""

    message = POISON_MESSAGE

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if any(self.marker in t for t in texts):
            raise RuntimeError(self.message)


class FailFirst(CallLog):
    """Fails the first ``n`` text calls with ``error``, then answers."""

    def __init__(self, n: int, error: Exception) -> None:
        super().__init__()
        self.left = n
        self.error = error

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        if kind == "text" and self.left > 0:
            self.left -= 1
            raise self.error


class Refuse(CallLog):
    """Fails every call with ``message`` (a provider that rejects its credentials)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def __call__(self, kind: str, texts: list[str]) -> None:
        super().__call__(kind, texts)
        raise RuntimeError(self.message)


# -- the probe provider --------------------------------------------------------------------


class ProbeEmbedding(HashingEmbedding):
    """The lexical hashing embedder; every model call goes through its provider's probe."""

    _provider: ProbeProvider = PrivateAttr()
    _api_key: str = PrivateAttr(default="")

    def __init__(self, provider: ProbeProvider, api_key: str) -> None:
        super().__init__(dimension=provider.dimension, embed_batch_size=256)
        self._provider = provider
        self._api_key = api_key

    @classmethod
    def class_name(cls) -> str:
        return "ProbeEmbedding"

    def _call(self, kind: str, texts: list[str]) -> None:
        provider = self._provider
        try:
            if kind == "query" and provider.fail_queries:
                provider.probe(kind, texts)
                raise ConnectionError("embedding endpoint unreachable")
            provider.probe(kind, texts)
        except Exception as exc:
            if provider.echo_key:  # like some real clients: the credential in the error
                raise type(exc)(f"{exc} (request with key {self._api_key})") from exc
            raise

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        self._call("text", list(texts))
        return [self._vector(t) for t in texts]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> Embedding:
        self._call("query", [query])
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return self._get_query_embedding(query)


@dataclass
class ProbeProvider:
    """An embedding provider (any name) whose model calls go through ``probe``.

    ``fail_queries`` makes query embeddings fail (an unreachable endpoint at chat time);
    ``echo_key`` makes every failure quote the configured API key, as badly behaved clients
    do; a base URL ending in ``/dimN`` makes the model produce ``N``-dimensional vectors
    (a provider whose model changed under a pinned RAG).
    """

    name: str = "probe"
    probe: Probe = field(default_factory=CallLog)
    dimension: int = 64
    fail_queries: bool = False
    echo_key: bool = False

    @property
    def log(self) -> CallLog:
        assert isinstance(self.probe, CallLog), "this probe does not record calls"
        return self.probe

    @property
    def queries(self) -> list[str]:
        return self.log.queries

    def default_model(self) -> str:
        return f"{self.name}-{self.dimension}"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        dim = self.dimension
        base = (settings.base_url or "").rstrip("/")
        if base.rsplit("/", 1)[-1].startswith("dim"):
            dim = int(base.rsplit("/dim", 1)[-1])
        provider = self if dim == self.dimension else _resized(self, dim)
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dim,
            embed_model=ProbeEmbedding(provider, settings.api_key or ""),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


def _resized(provider: ProbeProvider, dimension: int) -> ProbeProvider:
    return ProbeProvider(
        provider.name, provider.probe, dimension, provider.fail_queries, provider.echo_key
    )


class LeakyProvider:
    """A badly written plugin: loading its model fails with ``error``, quoting the API key."""

    def __init__(self, name: str, error: type[Exception]) -> None:
        self.name = name
        self.error = error

    def default_model(self) -> str:
        return f"{self.name}-1"

    def load(self, settings: EmbeddingSettings, model: str) -> LoadedModel:
        raise self.error(f"the server refused key {settings.api_key!s} for {model}")


def registry(*providers: object) -> EmbeddingRegistry:
    """The built-in providers (registered by the default plugins) plus ``providers``."""
    reg = EmbeddingRegistry()
    get_plugin_manager(load_entrypoints=False).hook.register_embedding_providers(
        register=reg.register
    )
    for p in providers:
        reg.register(p)  # type: ignore[arg-type]
    return reg


def default_extractors() -> ExtractorRegistry:
    """The extractors the default plugins register, built as the app builds its registry."""
    reg = ExtractorRegistry()
    get_plugin_manager(load_entrypoints=False).hook.register_extractors(register=reg.register)
    return reg


# -- tools ---------------------------------------------------------------------------------


def call_tool(tools: Sequence[Any], tool_name: str, /, **kwargs: Any) -> dict[str, Any]:
    """Call one of ``app.tools(...)`` by name and parse its JSON result."""
    tool = next(t for t in tools if t.metadata.name == tool_name)
    assert isinstance(tool, FunctionTool)
    result: dict[str, Any] = json.loads(tool.call(**kwargs).content)
    return result


def count_extractions(app: Any) -> Counter[str]:
    """Count every extraction ``app`` runs from now on (imports and retries), by file path."""
    calls: Counter[str] = Counter()
    real = app.extraction.extract

    def extract(data: bytes, *, path: str, mime: str, plan: Any) -> Any:
        calls[path] += 1
        return real(data, path=path, mime=mime, plan=plan)

    app.extraction.extract = extract
    return calls


def send_json(handler: Any, payload: object, status: int = 200) -> None:
    """Answer a ``BaseHTTPRequestHandler`` request with ``payload`` as JSON (loopback fakes)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def record_outcome(results: dict[Any, object], key: Any, call: Callable[[], object]) -> None:
    """Store ``call()``'s result, or the exception it raised, in ``results[key]``: what a
    thread under test got."""
    try:
        results[key] = call()
    except Exception as exc:
        results[key] = exc


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds (threads under test reach a state); fail after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)
