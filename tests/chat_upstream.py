"""A loopback server speaking OpenAI's chat-completions wire format, for the chat proxy's
tests and benchmark: it records every request it received (path, headers, JSON body), answers
with the last user text echoed back (streamed as SSE, with tool calls when the request has
tools and ``stream_options.include_usage`` honoured), refuses a wrong bearer key with a 401
that quotes the key it got (as OpenAI's own message does), and can be told to think slowly
(:attr:`ChatUpstream.delay_s`), noting when its client left (:attr:`ChatUpstream.aborted`).

As an upstream account an attacker would like to reach, it also lists files and batches (what
other tenants of the same account uploaded), and a request for the model :data:`LEAKY` is
answered with the upstream's key echoed everywhere an upstream might echo it: in a cookie, an
``x-*`` header, the JSON body and a streamed chunk (split across two writes).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "upstream-key-7f3a9c1e55"  # not key-shaped: only the proxy's own scrubbing hides it
MODEL = "echo-1"
#: The model whose answers (and whose GET /v1/models/<it>) echo the upstream key.
LEAKY = "leaky-1"
#: GET /v1/models/<it> answers a 401 that echoes the upstream key in headers and body.
LEAKY_401 = "leaky-401"
#: What GET /v1/files and /v1/batches answer: other tenants' uploads on the same account.
OTHER_TENANTS_FILES = "file-of-another-tenant-91c2"


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


def completion(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", MODEL),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "echo: " + last_user_text(body)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


def stream_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed answer: role, words, a tool call if tools were given, the
    finish, and the usage chunk when ``stream_options.include_usage`` asks for it."""
    base = {"id": "chatcmpl-2", "object": "chat.completion.chunk", "created": 1_700_000_000}
    base["model"] = body.get("model", MODEL)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    for word in ("echo:", *last_user_text(body).split()):
        events.append(chunk({"content": word + " "}))
    finish = "stop"
    if body.get("tools"):
        name = body["tools"][0]["function"]["name"]
        call = {"index": 0, "id": "call_1", "type": "function"}
        call["function"] = {"name": name, "arguments": '{"query": "vacation"}'}
        events.append(chunk({"tool_calls": [call]}))
        finish = "tool_calls"
    events.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
        events.append({**base, "choices": [], "usage": usage})
    return events


class _Http(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: ChatUpstream) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner


class ChatUpstream:
    def __init__(self, key: str = KEY) -> None:
        self.key = key
        self.received: list[Received] = []
        #: Seconds to think before the answer (and between streamed chunks).
        self.delay_s = 0.0
        #: Set when a client left before the answer was complete.
        self.aborted = threading.Event()
        #: Set when a streamed answer was written to its end.
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._server = _Http(self)
        self.port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def record(self, item: Received) -> None:
        with self._lock:
            self.received.append(item)

    @property
    def chats(self) -> list[Received]:
        return [r for r in self.received if r.path.startswith("/v1/chat/completions")]

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _peer_left(sock: socket.socket, seconds: float) -> bool:
    """Wait ``seconds``; True as soon as the peer closed the connection."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], min(left, 0.02))
        if readable:
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    return True
            except OSError:
                return True
    return False


class _Handler(BaseHTTPRequestHandler):
    server: _Http
    protocol_version = "HTTP/1.1"
    #: Headers and body go out in separate writes: without TCP_NODELAY the body waits for
    #: the peer's delayed ACK (~40 ms), as no production server lets it.
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        return

    def _json(self, status: int, payload: object, *, leak: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Request-Id", "req-upstream-1")
        self.send_header("X-Ratelimit-Remaining-Requests", "99")
        if leak:
            self._leak_headers()
        self.end_headers()
        self.wfile.write(data)

    def _leak_headers(self, key: str | None = None) -> None:
        key = key or self.server.owner.key
        self.send_header("Set-Cookie", f"session={key}; Path=/")
        self.send_header("X-Upstream-Debug", f"authorized with {key}")
        self.send_header("X-Ratelimit-Limit-Requests", f"100 ({key})")
        # UTF-8 bytes of "100 €" (sent as they are): no latin-1 text once decoded
        self.send_header("X-Ratelimit-Reset-Requests", "100 \xe2\x82\xac")

    def _read(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _authorised(self) -> bool:
        given = self.headers.get("Authorization") or ""
        if given == f"Bearer {self.server.owner.key}":
            return True
        shown = given.removeprefix("Bearer ")
        message = f"Incorrect API key provided: {shown}. You can find your API key elsewhere."
        self._json(
            401,
            {"error": {"message": message, "type": "invalid_request_error", "code": "bad_key"}},
        )
        return False

    def do_GET(self) -> None:
        owner = self.server.owner
        owner.record(
            Received("GET", self.path, {k.lower(): v for k, v in self.headers.items()}, None)
        )
        if not self._authorised():
            return
        if self.path.startswith("/v1/models"):
            model = {"id": MODEL, "object": "model", "created": 1, "owned_by": "test"}
            if self.path.rstrip("/") == "/v1/models":
                self._json(200, {"object": "list", "data": [model]})
            else:
                name = self.path.removeprefix("/v1/models/")
                if name == LEAKY_401:
                    message = f"key {owner.key} is not allowed to read this model"
                    self._json(401, {"error": {"message": message}}, leak=True)
                    return
                leak = name == LEAKY
                owner_key = {"owned_by": owner.key} if leak else {}
                self._json(200, {**model, "id": name, **owner_key}, leak=leak)
            return
        if self.path.startswith(("/v1/files", "/v1/batches")):
            self._json(200, {"object": "list", "data": [{"id": OTHER_TENANTS_FILES}]})
            return
        self._json(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        try:
            body = self._read()
        except ValueError:  # what a fuzzer sends may not be JSON an upstream reads
            body = None
        owner.record(
            Received("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        if not self._authorised():
            return
        try:
            self._answer(body)
        except (AttributeError, KeyError, IndexError, TypeError):
            self._json(400, {"error": {"message": "bad request", "type": "invalid_request"}})

    def _answer(self, body: dict[str, Any] | None) -> None:
        owner = self.server.owner
        if not isinstance(body, dict):
            raise TypeError("not an object")
        leak = body.get("model") == LEAKY
        if not body.get("stream"):
            if owner.delay_s and _peer_left(self.connection, owner.delay_s):
                owner.aborted.set()
                return
            answer = completion(body)
            if leak:
                answer["choices"][0]["message"]["content"] += f" (key {owner.key})"
            self._json(200, answer, leak=leak)
            return
        events: list[Any] = [*stream_events(body), "[DONE]"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the body ends with the connection
        self.send_header("X-Request-Id", "req-upstream-1")
        self.send_header("X-Ratelimit-Remaining-Requests", "99")
        if leak:
            self._leak_headers()
        self.end_headers()
        self.close_connection = True
        try:
            for i, event in enumerate(events):
                data = event if isinstance(event, str) else json.dumps(event)
                raw = f"data: {data}\n\n".encode()
                if leak and i == 1:  # the key, split across two writes (and TCP segments)
                    half = len(owner.key) // 2
                    raw = f"data: {owner.key[:half]}".encode()
                    self.wfile.write(raw)
                    self.wfile.flush()
                    time.sleep(0.05)
                    raw = f"{owner.key[half:]}\n\n".encode()
                self.wfile.write(raw)
                self.wfile.flush()
                if owner.delay_s and _peer_left(self.connection, owner.delay_s):
                    owner.aborted.set()
                    return
            owner.finished.set()
        except OSError:
            owner.aborted.set()


@contextmanager
def running_upstream(key: str = KEY) -> Iterator[ChatUpstream]:
    upstream = ChatUpstream(key)
    upstream.start()
    try:
        yield upstream
    finally:
        upstream.stop()
