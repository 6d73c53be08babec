"""The limits of the REST API: the request body, derived from the engine's text limit, and
the rate of write requests.

The body limit is a pure ASGI middleware outside every route, parser and error handler: a
body over the limit is refused before any of them reads it, with the API's JSON error shape
(413, ``TEXT_TOO_LONG``). Only the access middleware, which reads no body, is outside it, so
the refusal is logged and counted in ``/metrics``. Bodies sent without a ``Content-Length``
(chunked) are read up to the limit and replayed. The write rate (:class:`WriteRate`) is a
token bucket per token subject and project, checked after authentication: a test query costs
an embedding call.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Room for a request's JSON framing and other fields beside its text.
FRAMING_BYTES = 64 * 1024
#: UTF-8 needs at most this many bytes per character.
BYTES_PER_CHAR = 4


def max_body_bytes(max_text_chars: int) -> int:
    """The largest body that can carry a text within the limit, with its framing."""
    return BYTES_PER_CHAR * max_text_chars + FRAMING_BYTES


#: What a refused body is answered with: the JSON payload for a limit of so many bytes.
Refusal = Callable[[int], bytes]


class BodyLimit:
    """Refuse request bodies larger than :func:`max_body_bytes` of the text limit, or than
    ``max_bytes`` where given (the chat proxy's own limit), answered by ``refusal`` (the
    REST API's error shape by default)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_text_chars: int,
        max_bytes: int | None = None,
        refusal: Refusal | None = None,
    ) -> None:
        self.app = app
        self.max_text_chars = max_text_chars
        self.max_bytes = max_body_bytes(max_text_chars) if max_bytes is None else max_bytes
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None:
            if length.strip().isdigit() and int(length) > self.max_bytes:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        body, more, first = b"", True, None
        while more:  # no declared length: read up to the limit, then replay what was read
            message = await receive()
            if message["type"] != "http.request":
                first = message
                break
            body += message.get("body", b"")
            more = bool(message.get("more_body", False))
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if first is not None:
                    return first
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        if self.refusal is not None:
            payload = self.refusal(self.max_bytes)
        else:
            payload = json.dumps(
                {
                    "error": f"the request body is larger than {self.max_bytes:,} bytes; texts "
                    f"are limited to {self.max_text_chars:,} characters "
                    "(VANCETOPE_RAG_MAX_TEXT_CHARS)",
                    "code": "TEXT_TOO_LONG",
                }
            ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


class WriteRate:
    """``per_minute`` write requests per key, in bursts of up to a minute's worth (a token
    bucket refilled continuously); 0 means no limit. Buckets of keys that are full again
    are dropped, so the table holds only the callers of the last minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[tuple[str, ...], tuple[float, float]] = {}  # key: (tokens, at)
        self._lock = threading.Lock()

    def take(self, key: tuple[str, ...]) -> float:
        """Spend one request of ``key``: 0.0 when allowed, else the seconds until one is."""
        if self.per_minute <= 0:
            return 0.0
        capacity, per_s = float(self.per_minute), self.per_minute / 60.0
        with self._lock:
            now = self._clock()
            if len(self._buckets) > 10_000:  # forget callers whose buckets are full again
                self._buckets = {
                    k: (t, at)
                    for k, (t, at) in self._buckets.items()
                    if t + (now - at) * per_s < capacity
                }
            tokens, at = self._buckets.get(key, (capacity, now))
            tokens = min(capacity, tokens + (now - at) * per_s)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                return (1.0 - tokens) / per_s
            self._buckets[key] = (tokens - 1.0, now)
            return 0.0


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, at least one."""
    return str(max(1, math.ceil(seconds)))
