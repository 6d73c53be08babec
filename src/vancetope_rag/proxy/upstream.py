"""Forwarding to the upstream: its own key, the answer streamed back byte for byte, a client
disconnect cancelling the upstream request, and upstream errors scrubbed of secrets.

The answer is an ASGI response of its own (:class:`UpstreamResponse`) rather than a Starlette
``StreamingResponse``: it watches the client for ``http.disconnect`` from the moment the
request goes upstream, so a client that gives up while the model still thinks (a non-streamed
completion sends nothing until it is done) cancels the upstream request too, not only one
that leaves mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping

import anyio
import httpx

from vancetope_rag.api.errors import redact
from vancetope_rag.api.limits import Receive, Scope, Send
from vancetope_rag.proxy.config import ProxyConfig
from vancetope_rag.secrets import get_logger, register_secret

log = get_logger(__name__)

#: Request headers passed upstream; everything else (the caller's Authorization, cookies,
#: our opt-out header) stays here.
_FORWARDED_REQUEST = ("accept", "accept-encoding", "content-type", "user-agent", "x-request-id")
#: Response headers never passed back: hop-by-hop ones (RFC 9110 §7.6.1) and those the
#: proxy's own server sets.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "server",
        "date",
        "www-authenticate",  # the upstream's realm: the client authenticates with us
    }
)
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
        self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes | None
    ) -> httpx.Request:
        """The upstream request for a caller's request to ``path`` (below the base URL)."""
        out = {k: v for k in _FORWARDED_REQUEST if (v := headers.get(k)) is not None}
        out.setdefault("accept-encoding", "identity")
        if self._key:
            out["authorization"] = f"Bearer {self._key}"
        url = self.base + path + (f"?{query}" if query else "")
        return self.client.build_request(method, url, headers=out, content=body)

    async def aclose(self) -> None:
        await self._client.aclose()


async def _chunks(response: httpx.Response, *, decoded: bool) -> AsyncIterator[bytes]:
    """The body as it arrives: raw (as sent, compressed or not) or decoded. A response whose
    body was read already (a transport that answers from memory) gives it in one piece."""
    try:
        async for chunk in response.aiter_bytes() if decoded else response.aiter_raw():
            yield chunk
    except httpx.StreamConsumed:
        yield response.content


def _passed_headers(response: httpx.Response, *, body_changed: bool) -> list[tuple[str, str]]:
    drop = set(_HOP_BY_HOP)
    if body_changed:
        drop |= {"content-length", "content-encoding"}
    return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in drop]


class UpstreamResponse:
    """The ASGI response of one proxied request.

    Args:
        upstream: Where the request goes.
        request: The upstream request, built by :meth:`Upstream.request`.
        extra_headers: Headers of ours added to the answer (the injected sources).
        secrets: Texts scrubbed from an upstream error besides the registered secrets (the
            caller's credential, the upstream key).
    """

    def __init__(
        self,
        upstream: Upstream,
        request: httpx.Request,
        extra_headers: Mapping[str, str],
        secrets: Iterable[str | None],
    ) -> None:
        self.upstream = upstream
        self.request = request
        self.extra_headers = dict(extra_headers)
        self.secrets = [*secrets, *upstream.secrets]
        self.status: int | None = None

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
        try:
            if response.status_code >= 400:
                await self._relay_error(response, send)
            else:
                await self._relay_stream(response, send)
        finally:
            await response.aclose()  # also what cancels it when the client left

    async def _relay_stream(self, response: httpx.Response, send: Send) -> None:
        headers = _passed_headers(response, body_changed=False)
        self.status = response.status_code
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": self._encoded(headers),
            }
        )
        try:
            async for chunk in _chunks(response, decoded=False):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            # Headers are sent: the status cannot change any more. End the body; the client
            # sees a stream without its final event, as if the upstream had dropped it.
            log.warning("upstream stream broke off: %r", exc)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _relay_error(self, response: httpx.Response, send: Send) -> None:
        raw = b""
        try:
            async for chunk in _chunks(response, decoded=True):
                raw += chunk
                if len(raw) > MAX_ERROR_BYTES:
                    raw = raw[:MAX_ERROR_BYTES]
                    break
        except httpx.HTTPError as exc:
            log.warning("upstream error body broke off: %r", exc)
        text = redact(raw.decode("utf-8", "replace"), self.secrets)
        payload = text.encode()
        self.status = response.status_code
        headers = [
            (k, v)
            for k, v in _passed_headers(response, body_changed=True)
            if k.lower() != "content-type"
        ]
        content_type = response.headers.get("content-type", "application/json")
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": self._encoded(
                    [
                        ("content-type", content_type),
                        ("content-length", str(len(payload))),
                        *headers,
                    ]
                ),
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
