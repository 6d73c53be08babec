"""Forwarding to the upstream: its own key, the answer streamed back as it comes, a client
disconnect cancelling the upstream request, and every answer scrubbed of secrets.

What comes back is cut down to what a client needs: the response headers of an explicit
allow-list (:data:`PASSED_RESPONSE_HEADERS`), and every body — JSON, an error, a stream — with
the operator's secrets replaced, a stream chunk by chunk (:class:`Scrubber` holds back only
the end of a chunk that could start a secret).

The answer is an ASGI response of its own (:class:`UpstreamResponse`) rather than a Starlette
``StreamingResponse``: it watches the client for ``http.disconnect`` from the moment the
request goes upstream, so a client that gives up while the model still thinks (a non-streamed
completion sends nothing until it is done) cancels the upstream request too, not only one
that leaves mid-stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping

import anyio
import httpx

from vancetope_rag.api.errors import redact
from vancetope_rag.api.limits import Receive, Scope, Send
from vancetope_rag.proxy.config import ProxyConfig
from vancetope_rag.secrets import MASK, get_logger, known_secrets, register_secret

log = get_logger(__name__)

#: Request headers passed upstream (when their value is printable ASCII); everything else (the
#: caller's Authorization, cookies, our opt-out header) stays here. ``X-Request-Id`` goes up
#: as the proxy checked it (:func:`vancetope_rag.health.request_id_of`).
_FORWARDED_REQUEST = ("accept", "content-type", "user-agent")
#: Response headers passed back to the caller: what a client needs, nothing an upstream may
#: put its session or debugging into (``set-cookie``, ``x-*``). Rate-limit headers by prefix.
PASSED_RESPONSE_HEADERS = frozenset(
    {
        "content-type",
        "cache-control",
        "retry-after",
        "retry-after-ms",
        "x-request-id",
        "request-id",
        "openai-processing-ms",
        "openai-version",
    }
)
PASSED_RESPONSE_PREFIXES = ("x-ratelimit-",)
#: An upstream error body is read (to scrub it) up to this size; the rest is dropped.
MAX_ERROR_BYTES = 1024 * 1024


def openai_error(status: int, code: str, message: str, kind: str | None = None) -> bytes:
    """An error body in the shape OpenAI clients parse (``error.message`` is what they show)."""
    kinds = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
    kinds |= {429: "rate_limit_error"}
    default = "api_error" if status >= 500 else "invalid_request_error"
    error = {"message": message, "type": kind or kinds.get(status, default), "code": code}
    return json.dumps({"error": {**error, "param": None}}).encode()


async def send_json(send: Send, status: int, payload: bytes, headers: Mapping[str, str]) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *raw,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Upstream:
    """The upstream server: base URL, its key, one connection pool."""

    def __init__(self, config: ProxyConfig, transport: httpx.AsyncBaseTransport | None = None):
        if not config.upstream:
            raise ValueError("the proxy needs an upstream URL (--upstream)")
        self.base = config.upstream
        key = config.upstream_api_key.get_secret_value() if config.upstream_api_key else None
        self._key = key or None
        register_secret(self._key)  # scrubbed from every log line and error from now on
        self._timeout = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        self._transport = transport
        self._client = self._new_client()

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            transport=self._transport,
            follow_redirects=False,
            trust_env=False,  # the operator's proxy variables are not the upstream's choice
        )

    @property
    def client(self) -> httpx.AsyncClient:
        """The connection pool; a new one after a shutdown closed it (an app served again)."""
        if self._client.is_closed:
            self._client = self._new_client()
        return self._client

    def __repr__(self) -> str:  # the key never shows, not even in a debugger dump
        return f"Upstream({self.base!r}, key=***)"

    @property
    def secrets(self) -> list[str | None]:
        return [self._key]

    def request(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes | None,
        request_id: str | None = None,
    ) -> httpx.Request:
        """The upstream request for a caller's request to ``path`` (below the base URL, built
        by the proxy from checked parts)."""
        out = {
            k: v
            for k in _FORWARDED_REQUEST
            if (v := headers.get(k)) is not None and v.isascii() and v.isprintable()
        }
        # Uncompressed: every body is scrubbed on its way back.
        out["accept-encoding"] = "identity"
        if request_id:
            out["x-request-id"] = request_id
        if self._key:
            out["authorization"] = f"Bearer {self._key}"
        url = self.base + path + (f"?{query}" if query else "")
        return self.client.build_request(method, url, headers=out, content=body)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as it arrives, decoded (asked for uncompressed, but an upstream may compress
    all the same). A response whose body was read already (a transport that answers from
    memory) gives it in one piece."""
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except httpx.StreamConsumed:
        yield response.content


def _passed_headers(
    response: httpx.Response, secrets: Iterable[str | None]
) -> list[tuple[str, str]]:
    """The upstream's response headers of the allow-list, values scrubbed (and dropped when
    not printable ASCII); never a length or an encoding: the body is decoded and may change
    length when scrubbed."""
    passed = [
        (k.lower(), redact(v, secrets))
        for k, v in response.headers.multi_items()
        if k.lower() in PASSED_RESPONSE_HEADERS or k.lower().startswith(PASSED_RESPONSE_PREFIXES)
    ]
    return [(k, v) for k, v in passed if v.isascii() and v.isprintable()]


class Scrubber:
    """Replaces secrets in a body that comes in chunks, without waiting for its end: a chunk
    goes on at once but for its last bytes when they could be the start of a secret (then
    they wait for the next chunk, at most a secret's length minus one)."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        found = {s for s in [*secrets, *known_secrets()] if s and len(s) >= 4}
        self._secrets = sorted((s.encode() for s in found), key=len, reverse=True)
        self._mask = MASK.encode()
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` (after what was held back) can go on now, scrubbed."""
        data = self._held + chunk
        for secret in self._secrets:
            data = data.replace(secret, self._mask)
        keep = 0
        for secret in self._secrets:
            for n in range(min(len(secret) - 1, len(data)), keep, -1):
                if data.endswith(secret[:n]):
                    keep = n
                    break
        self._held = data[len(data) - keep :]
        return data[: len(data) - keep]

    def end(self) -> bytes:
        """The bytes held back at the end of the body (no secret: it ended)."""
        held, self._held = self._held, b""
        return held


class UpstreamResponse:
    """The ASGI response of one proxied request.

    Args:
        upstream: Where the request goes.
        request: The upstream request, built by :meth:`Upstream.request`.
        extra_headers: Headers of ours added to the answer (the injected sources).
        secrets: Texts scrubbed from every answer besides the registered secrets and the
            upstream key (the caller's credential, the JWT secret).
        waited: Called with the seconds the upstream took to start its answer (or to fail).
    """

    def __init__(
        self,
        upstream: Upstream,
        request: httpx.Request,
        extra_headers: Mapping[str, str],
        secrets: Iterable[str | None],
        waited: Callable[[float], None] | None = None,
    ) -> None:
        self.upstream = upstream
        self.request = request
        self.extra_headers = dict(extra_headers)
        self.secrets = [*secrets, *upstream.secrets]
        self.status: int | None = None
        self._waited = waited

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tasks:

            async def watch() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        log.debug("client left; upstream request cancelled")
                        tasks.cancel_scope.cancel()
                        return

            tasks.start_soon(watch)
            try:
                await self._relay(send)
            finally:
                tasks.cancel_scope.cancel()

    async def _relay(self, send: Send) -> None:
        started = time.perf_counter()
        try:
            response = await self.upstream.client.send(self.request, stream=True)
        except httpx.TimeoutException as exc:
            await self._fail(send, 504, "UPSTREAM_TIMEOUT", f"the upstream did not answer: {exc!r}")
            return
        except httpx.HTTPError as exc:
            await self._fail(
                send, 502, "UPSTREAM_UNREACHABLE", f"cannot reach the upstream: {exc!r}"
            )
            return
        finally:
            if self._waited is not None:
                self._waited(time.perf_counter() - started)
        try:
            if response.status_code >= 400:
                await self._relay_error(response, send)
            else:
                await self._relay_stream(response, send)
        finally:
            await response.aclose()  # also what cancels it when the client left

    async def _relay_stream(self, response: httpx.Response, send: Send) -> None:
        headers = _passed_headers(response, self.secrets)
        self.status = response.status_code
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": self._encoded(headers),
            }
        )
        scrubber = Scrubber(self.secrets)
        try:
            async for chunk in _chunks(response):
                if clean := scrubber.feed(chunk):
                    await send({"type": "http.response.body", "body": clean, "more_body": True})
        except httpx.HTTPError as exc:
            # Headers are sent: the status cannot change any more. End the body; the client
            # sees a stream without its final event, as if the upstream had dropped it.
            log.warning("upstream stream broke off: %r", exc)
        await send({"type": "http.response.body", "body": scrubber.end(), "more_body": False})

    async def _relay_error(self, response: httpx.Response, send: Send) -> None:
        raw = b""
        try:
            async for chunk in _chunks(response):
                raw += chunk
                if len(raw) > MAX_ERROR_BYTES:
                    raw = raw[:MAX_ERROR_BYTES]
                    break
        except httpx.HTTPError as exc:
            log.warning("upstream error body broke off: %r", exc)
        text = redact(raw.decode("utf-8", "replace"), self.secrets)
        payload = text.encode()
        self.status = response.status_code
        headers = _passed_headers(response, self.secrets)
        if not any(k == "content-type" for k, _ in headers):
            headers.append(("content-type", "application/json"))
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": self._encoded([("content-length", str(len(payload))), *headers]),
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def _fail(self, send: Send, status: int, code: str, message: str) -> None:
        self.status = status
        clean = redact(message, self.secrets)
        log.warning("proxy: %s", clean)
        await send_json(send, status, openai_error(status, code, clean), self.extra_headers)

    def _encoded(self, headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
        ours = {k.lower() for k in self.extra_headers}
        merged = [(k, v) for k, v in headers if k.lower() not in ours]
        merged += list(self.extra_headers.items())
        return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in merged]
