"""A loopback reranker speaking the published ``/rerank`` wire formats, for tests of the
rerank stage (no reranker model with weights can be installed here).

* ``tei``: text-embeddings-inference's ``POST /rerank {"query", "texts", "truncate",
  "raw_scores", "return_text"}`` → ``[{"index", "score"}]`` best first; its errors are
  ``{"error", "error_type"}`` with TEI's statuses (413 ``validation`` past
  ``--max-client-batch-size`` 32, 400 ``empty``, 422 ``tokenizer``, 424 ``backend``, 429
  ``overloaded``, 503 ``unhealthy``), and a 401 without a body for a wrong ``--api-key``.
* ``cohere``: Cohere's ``POST /v1/rerank {"model", "query", "documents", "top_n"}`` →
  ``{"id", "results": [{"index", "relevance_score"}], "meta"}`` (Jina, Infinity and vLLM
  answer the same ``results``); errors are ``{"message"}`` (a 401 quotes the token back, as
  careless servers do, so redaction is put to the test).

Scores: the share of the query's words found in the text, plus one for a text holding
:attr:`RerankServer.prefer` and minus one for a text holding :attr:`RerankServer.shun` — so a
test makes the reranker's order differ from the retrieval's. :attr:`RerankServer.top` caps the
ranks an answer holds whatever was asked (a server that answers its best few only). The
requests are kept (:attr:`RerankServer.requests`); :attr:`faults` are answered in turn first;
:attr:`delay_s` holds every answer (a timeout); :meth:`down` closes the port.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import LoopbackServer, OwnedHttp

KEY = "rerank-key-7f3a91c2"  # not key-shaped: only its registration can redact it
TEI_MAX_BATCH = 32


@dataclass(frozen=True)
class Seen:
    path: str
    authorization: str | None
    body: dict[str, Any]


@dataclass(frozen=True)
class Fault:
    """One answer instead of ranks: ``status``, its error body's words and ``headers``."""

    status: int
    message: str = "the reranker says no"
    error_type: str = "backend"  # TEI's
    headers: dict[str, str] = field(default_factory=dict)


def score(query: str, text: str, prefer: str | None, shun: str | None = None) -> float:
    words = set(re.findall(r"\w+", query.lower()))
    found = set(re.findall(r"\w+", text.lower()))
    share = len(words & found) / len(words) if words else 0.0
    bonus = (1.0 if prefer and prefer in text else 0.0) - (1.0 if shun and shun in text else 0.0)
    return round(share + bonus, 6)


class RerankServer(LoopbackServer[Seen]):
    def __init__(self, dialect: str, key: str | None = None, host: str = "127.0.0.1") -> None:
        assert dialect in ("tei", "cohere")
        super().__init__(_Handler, host)
        self.dialect = dialect
        self.key = key
        self.prefer: str | None = None
        self.shun: str | None = None
        self.top: int | None = None
        self.faults: list[Fault] = []
        self.delay_s = 0.0
        self.up()

    @property
    def base_url(self) -> str:
        """What ``ai.rerank.baseUrl`` is set to: TEI's root, Cohere-style ``…/v1``."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        root = f"http://{shown}:{self.port}"
        return root if self.dialect == "tei" else f"{root}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: OwnedHttp

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, error_type: str, headers: Any = None) -> None:
        if self.server.owner.dialect == "tei":
            self._send(status, {"error": message, "error_type": error_type}, headers)
        else:
            self._send(status, {"message": message}, headers)

    def do_POST(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._error(422, "Failed to parse the request body as JSON", "validation")
            return
        auth = self.headers.get("Authorization")
        with owner.lock:
            owner.seen.append(Seen(self.path, auth, body))
            fault = owner.faults.pop(0) if owner.faults else None
        if owner.delay_s:
            time.sleep(owner.delay_s)
        if fault is not None:
            self._error(fault.status, fault.message, fault.error_type, fault.headers)
            return
        if owner.dialect == "tei":
            self._tei(owner, body, auth)
        else:
            self._cohere(owner, body, auth)

    def _tei(self, owner: RerankServer, body: dict[str, Any], auth: str | None) -> None:
        if self.path != "/rerank":
            self._send(404, None)
            return
        if owner.key is not None and auth != f"Bearer {owner.key}":
            self._send(401, None)  # TEI's --api-key middleware: no body
            return
        texts = body.get("texts")
        if not isinstance(texts, list) or not isinstance(body.get("query"), str):
            self._error(422, "Failed to deserialize the JSON body", "validation")
            return
        if not texts:
            self._error(400, "`texts` cannot be empty", "empty")
            return
        if len(texts) > TEI_MAX_BATCH:
            message = f"batch size {len(texts)} > maximum allowed batch size {TEI_MAX_BATCH}"
            self._error(413, message, "validation")
            return
        ranks = [
            {"index": i, "score": score(body["query"], t, owner.prefer, owner.shun)}
            for i, t in enumerate(texts)
        ]
        ranks.sort(key=lambda r: -r["score"])
        self._send(200, ranks[: owner.top])

    def _cohere(self, owner: RerankServer, body: dict[str, Any], auth: str | None) -> None:
        if self.path != "/v1/rerank":
            self._error(404, f"path {self.path} not found", "")
            return
        if owner.key is not None and auth != f"Bearer {owner.key}":
            given = (auth or "").removeprefix("Bearer ")
            self._error(401, f"invalid api token: {given}", "")
            return
        docs, query = body.get("documents"), body.get("query")
        if not isinstance(body.get("model"), str):
            self._error(400, "invalid request: model is required", "")
            return
        if not isinstance(query, str) or not query.strip():
            self._error(400, "invalid request: query must not be empty", "")
            return
        if not isinstance(docs, list) or not docs:
            self._error(400, "invalid request: list of documents must not be empty", "")
            return
        if len(docs) > 1000:
            self._error(400, "invalid request: too many documents (max 1000)", "")
            return
        top_n = min(body.get("top_n", len(docs)), owner.top or len(docs))
        results = [
            {"index": i, "relevance_score": score(query, d, owner.prefer, owner.shun)}
            for i, d in enumerate(docs)
        ]
        results.sort(key=lambda r: -r["relevance_score"])
        self._send(
            200,
            {
                "id": str(uuid.uuid4()),
                "results": results[:top_n],
                "meta": {"api_version": {"version": "1"}, "billed_units": {"search_units": 1}},
            },
        )
