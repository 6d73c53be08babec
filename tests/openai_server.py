"""A loopback server speaking the OpenAI embeddings wire format (what Ollama, TEI, vLLM and
OpenRouter expose), for tests of the ``openai`` provider: bag-of-words vectors, a bearer key,
the requests it saw (each with its time on a clock the test may give), faults to answer with
in turn (a status and headers), inputs it refuses with a 400, vectors of another dimension
than the model's (``dimension``), and a port that stops answering
(:meth:`EmbeddingsServer.down`) and comes back (:meth:`EmbeddingsServer.up`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import LoopbackServer, OwnedHttp
from vancetope_rag.model_profiles import known_profile

KEY = "local-embed-key-5c1d9e"  # not key-shaped: only its registration can redact it
WRONG_KEY = "stale-embed-key-0b7e44"
MODEL = "local-embedder"  # a model no profile describes: its dimension is probed
DIM = 48


def _dimension(model: str) -> int:
    """A known model's own dimension (as its profile says); DIM for any other name."""
    profile = known_profile(model)
    return profile.dimension if profile is not None and profile.dimension else DIM


def vector(text: str, dim: int = DIM) -> list[float]:
    """Feature-hashing bag of words, unit length: lexical overlap → cosine similarity."""
    v = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        v[h % dim] += 1.0 if (h >> 32) & 1 else -1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


@dataclass(frozen=True)
class Seen:
    path: str
    authorization: str | None
    model: str | None
    inputs: list[str]
    encoding_format: str | None
    at: float = 0.0


@dataclass(frozen=True)
class Fault:
    """One answer instead of embeddings: ``status`` with ``headers`` (e.g. Retry-After)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "the server says no"


class EmbeddingsServer(LoopbackServer[Seen]):
    def __init__(self, key: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(_Handler)
        self.key = key
        self.clock = clock
        #: Answered in turn, one per request, before any embedding is made.
        self.faults: list[Fault] = []
        #: An input containing one of these is refused with a 400 (the input's fault).
        self.refused_inputs: set[str] = set()
        #: While set to an unset Event, requests wait for it (at most a minute) before any
        #: answer: a model call in flight for as long as the test needs.
        self.hold: threading.Event | None = None
        #: The dimension of every vector answered, when set (a model swapped behind the
        #: same name, a wrong base URL); None: the model's own.
        self.dimension: int | None = None
        self.up()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def serve(
    key: str = KEY, clock: Callable[[], float] = time.monotonic
) -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer(key, clock)
    yield srv
    srv.down()


class _Handler(BaseHTTPRequestHandler):
    server: OwnedHttp

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(
        self, status: int, message: str, code: str | None, headers: dict[str, str] | None = None
    ) -> None:
        error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
        self._send(status, {"error": error}, headers)

    def do_POST(self) -> None:
        owner = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        raw = body.get("input")
        inputs = [raw] if isinstance(raw, str) else list(raw or [])
        auth = self.headers.get("Authorization")
        with owner.lock:
            owner.seen.append(
                Seen(
                    self.path,
                    auth,
                    body.get("model"),
                    inputs,
                    body.get("encoding_format"),
                    owner.clock(),
                )
            )
            fault = owner.faults.pop(0) if owner.faults else None
            refused = [t for t in inputs if any(r in t for r in owner.refused_inputs)]
            hold = owner.hold
            dimension = owner.dimension
        if hold is not None:
            hold.wait(60)
        if fault is not None:
            self._error(fault.status, fault.message, None, fault.headers)
            return
        if self.path != "/v1/embeddings":
            self._error(404, f"Unknown path {self.path}", None)
            return
        if auth != f"Bearer {owner.key}":
            given = (auth or "").removeprefix("Bearer ")
            # Worse than OpenAI (which masks most of it): quote the whole key back.
            self._error(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
            return
        if refused:
            self._error(400, "This input cannot be embedded.", "invalid_input")
            return
        data = []
        for i, text in enumerate(inputs):
            vec = vector(text, dimension or _dimension(str(body.get("model"))))
            emb: Any = vec
            if body.get("encoding_format") == "base64":
                emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(t.split()) for t in inputs)
        self._send(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def openai_app(
    make_app: Any, server: EmbeddingsServer, key: str = KEY, model: str = MODEL, **kwargs: Any
) -> Any:
    """An app (from the ``make_app`` fixture) whose tenant embeds with ``model`` through
    ``server`` as the ``openai`` provider."""
    from fakes import T

    app = make_app(provider="openai", **kwargs)
    app.settings.set(T, None, "ai.embedding.apiKey", key)
    app.settings.set(T, None, "ai.embedding.baseUrl", server.base_url)
    app.settings.set(T, None, "ai.embedding.model", model)
    return app
