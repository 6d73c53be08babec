"""The proxy's ASGI application: routes, who the caller is, the rate, and the turn.

Routes, all below ``/p/{project}/v1`` (what an OpenAI client takes as its base URL):

* ``POST chat/completions``: ``pre_turn`` on the trailing user turn, the block inserted after
  the caller's system messages, the request forwarded, the answer streamed back;
* ``GET models`` and ``GET models/{model}``: passed through, the model id checked and the
  upstream path built from it (:func:`~vancetope_rag.proxy.messages.model_path`);
* anything else: a 404 in OpenAI's error shape that names the routes there are.

Outside ``/p/``: ``GET /healthz`` (the process runs), ``GET /readyz`` (keys loaded, upstream
configured) and ``GET /metrics`` (behind ``VANCETOPE_RAG_METRICS_TOKEN`` when set).

The tenant comes from the caller's credential only — a proxy key of the key table or a JWT as
the REST API verifies it — and the route's project must be one of the caller's. Every
request that goes upstream spends one of the caller's rate (one bucket per key or token,
whatever the project).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httpx
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vancetope_rag.api.auth import AuthError, TokenVerifier, check_secret
from vancetope_rag.api.errors import redact
from vancetope_rag.api.limits import BodyLimit, Receive, Scope, Send, WriteRate, retry_after
from vancetope_rag.api.router import check_metrics_token
from vancetope_rag.domain.texts import check_id
from vancetope_rag.errors import ApiConfigError, RagError
from vancetope_rag.health import PROBE_PATHS, UNAVAILABLE, request_id_of
from vancetope_rag.metrics import UNMATCHED_ROUTE
from vancetope_rag.proxy.config import ProxyConfig
from vancetope_rag.proxy.injection import SOURCES_HEADER, STATE_HEADER, Injection, arun_pre_turn
from vancetope_rag.proxy.keys import KeyFile
from vancetope_rag.proxy.messages import (
    EXTENSION_FIELD,
    OPT_OUT_HEADER,
    check_chat_body,
    insert_blocks,
    model_path,
    opted_out,
    parse_json,
    user_turn,
)
from vancetope_rag.proxy.metrics import ProxyMetrics, proxy_metrics
from vancetope_rag.proxy.upstream import Upstream, UpstreamResponse, openai_error
from vancetope_rag.recipes import RagParams, load_recipe
from vancetope_rag.secrets import get_logger

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp

#: The access lines (one a request: method, route template, status, duration, request id),
#: at INFO, the probes' and scrapes' at DEBUG (``health.PROBE_PATHS``); their numbers are
#: also the record's fields (``extra``) for a JSON formatter.
access_log = get_logger("vancetope_rag.access")

CHAT_ROUTE = "/p/{project}/v1/chat/completions"
MODELS_ROUTE = "/p/{project}/v1/models"
MODEL_ROUTE = "/p/{project}/v1/models/{model}"
HEALTH_ROUTES = ("/healthz", "/readyz", "/metrics")
_ROUTES = (
    (re.compile(r"^/p/[^/]+/v1/chat/completions/?$"), CHAT_ROUTE, "POST"),
    (re.compile(r"^/p/[^/]+/v1/models/?$"), MODELS_ROUTE, "GET"),
    (re.compile(r"^/p/[^/]+/v1/models/.+$"), MODEL_ROUTE, "GET"),
    *((re.compile(f"^{route}$"), route, "GET") for route in HEALTH_ROUTES),
)
#: The 503 of a proxy key while the key file does not load.
_KEYS_DOWN = (
    "the proxy's key file failed to load; no proxy key is accepted until the operator "
    "fixes it (see the proxy's log)"
)
_NOT_HERE = (
    "the vancetope-rag proxy serves only POST /p/<project>/v1/chat/completions and "
    "GET /p/<project>/v1/models; set your client's base URL to http://<proxy>/p/<project>/v1"
    " (/v1/responses, /v1/completions and /v1/embeddings are not proxied)"
)


class ProxyError(Exception):
    """A request the proxy answers itself: status, code, message (OpenAI's error shape)."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


def error_response(exc: ProxyError, secrets: list[str | None]) -> Response:
    body = openai_error(exc.status, exc.code, redact(exc.message, secrets))
    return Response(body, exc.status, exc.headers, media_type="application/json")


@dataclass(frozen=True)
class Caller:
    """Who sent a request, as their credential says."""

    id: str  # rate buckets and logs: never the credential
    tenant: str
    recipe: RagParams | None
    per_minute: int
    credential: str


class Gate:
    """Authenticates a bearer credential for a project and spends one request of its rate."""

    def __init__(
        self,
        keys: KeyFile | None,
        verifier: TokenVerifier | None,
        recipe: RagParams | None,
        per_minute: int,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        if keys is None and verifier is None:
            raise ApiConfigError(
                "the proxy needs callers it can authenticate: a key file "
                "(VANCETOPE_RAG_PROXY_KEYS_FILE or --keys; `vancetope-rag proxy-key` makes a "
                "key) or a JWT secret (VANCETOPE_RAG_JWT_SECRET); it never runs open"
            )
        self.keys = keys
        self.verifier = verifier
        self.recipe = recipe
        self.per_minute = per_minute
        self.metrics = metrics
        self._rates: dict[int, WriteRate] = {}

    def caller(self, authorization: str | None, project: str) -> Caller:
        """The caller of a request to ``project``, or a 401/403 :class:`ProxyError`."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise ProxyError(
                401,
                "UNAUTHENTICATED",
                "missing API key: send 'Authorization: Bearer <key>' (a proxy key or a JWT); "
                "OpenAI clients send their api_key that way",
            )
        key = self.keys.find(token) if self.keys is not None else None
        jwt_shaped = self.verifier is not None and token.count(".") == 2
        if key is None and not jwt_shaped and self.keys is not None and self.keys.failure:
            # Fail closed: the key may be valid, but nothing says it still is.
            raise ProxyError(503, "KEYS_UNAVAILABLE", _KEYS_DOWN, {"Retry-After": "30"})
        if key is not None:
            if not key.allows(project):
                raise ProxyError(
                    403, "FORBIDDEN", f"this key does not grant access to project {project!r}"
                )
            rate = self.per_minute if key.requests_per_minute is None else key.requests_per_minute
            recipe = key.recipe if key.recipe is not None else self.recipe
            return Caller(f"key:{key.name}", key.tenant, recipe, rate, token)
        if self.verifier is None or not jwt_shaped:
            raise ProxyError(401, "INVALID_API_KEY", "unknown API key")
        try:
            principal = self.verifier.principal(authorization)
            # The tenant is the token's own; only the project comes from the route.
            principal.may_write(principal.tenant, project)
        except AuthError as exc:
            raise ProxyError(exc.status, exc.code, exc.message) from None
        caller_id = f"jwt:{principal.tenant}:{principal.subject}"
        return Caller(caller_id, principal.tenant, self.recipe, self.per_minute, token)

    def spend(self, caller: Caller) -> None:
        """Raise a 429 :class:`ProxyError` when the caller is over their rate: one bucket per
        key (or token), whatever the project, spent by every request that goes upstream."""
        if caller.per_minute <= 0:
            return
        rate = self._rates.setdefault(caller.per_minute, WriteRate(caller.per_minute))
        wait = rate.take((caller.id,))
        if wait > 0:
            if self.metrics is not None:
                self.metrics.rate_limited.inc()
            raise ProxyError(
                429,
                "RATE_LIMITED",
                f"more than {caller.per_minute} requests a minute for this key (all its "
                f"projects together); retry in {retry_after(wait)} s",
                {"Retry-After": retry_after(wait)},
            )


def _route_of(path: str) -> tuple[str, str] | None:
    for pattern, template, method in _ROUTES:
        if pattern.match(path):
            return template, method
    return None


def request_id(scope: Scope) -> str:
    """The request's id: the caller's ``X-Request-Id`` when it is a plain token (else it is
    dropped), or a new one. Kept in the scope's state for the upstream request."""
    state = scope.setdefault("state", {})
    if "request_id" not in state:
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
        text = given.decode("latin-1") if given is not None else None
        state["request_id"] = request_id_of(text)
    return str(state["request_id"])


class AccessLog:
    """Logs and counts each request by its route template, after its answer ended (a stream
    included); pure ASGI, so streams and disconnects pass through untouched."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], rag: RagApp):
        self.app = app
        self.rag = rag

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        rid = request_id(scope)

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            found = _route_of(scope["path"])
            route = found[0] if found else UNMATCHED_ROUTE
            status = status or 499
            self.rag.metrics.http_request(scope["method"], route, status, seconds)
            # The route template: never a raw path (ids), a query string or a header.
            method = str(scope["method"])[:16]
            ms = round(seconds * 1000, 1)
            fields = {"method": method, "route": route, "status": status}
            fields |= {"duration_ms": ms, "request_id": rid}
            level = logging.DEBUG if scope["path"] in PROBE_PATHS else logging.INFO
            line = ("%s %s %d %.1fms %s", method, route, status, ms, rid)
            access_log.log(level, *line, extra=fields)


def create_proxy(
    app: RagApp, config: ProxyConfig, *, transport: httpx.AsyncBaseTransport | None = None
) -> Starlette:
    """The proxy's ASGI application for ``app``.

    Args:
        app: The wired :class:`~vancetope_rag.app.RagApp` (store, settings, plugins).
        config: Upstream, key file, recipe, limits, CORS.
        transport: An ``httpx`` transport for the upstream (tests; default: the network).

    Raises:
        ApiConfigError: No upstream, no way to authenticate callers, or a bad key file or
            recipe; the proxy never runs open.
    """
    if not config.upstream:
        raise ApiConfigError(
            "the proxy needs an upstream: --upstream URL or VANCETOPE_RAG_PROXY_UPSTREAM "
            "(e.g. https://api.openai.com/v1)"
        )
    raw_secret = app.config.jwt_secret.get_secret_value() if app.config.jwt_secret else None
    verifier = TokenVerifier(check_secret(raw_secret)) if raw_secret else None
    counts = proxy_metrics(app.metrics)
    keys = KeyFile(config.keys_file, counts.reloaded) if config.keys_file else None
    recipe = load_recipe(config.recipe).rag if config.recipe else None
    gate = Gate(keys, verifier, recipe, config.requests_per_minute, counts)
    upstream = Upstream(config, transport)
    ours = [raw_secret]
    metrics_token = (
        app.config.metrics_token.get_secret_value() if app.config.metrics_token else None
    )

    def forward(
        caller: Caller, route: str, extra: dict[str, str], req: httpx.Request
    ) -> UpstreamResponse:
        timer = counts.upstream_seconds.labels(route=route)
        return UpstreamResponse(upstream, req, extra, [caller.credential, *ours], timer.observe)

    def project_of(request: Request) -> str:
        project = str(request.path_params["project"])
        try:
            check_id(project, "project id")
        except RagError as exc:
            raise ProxyError(400, "INVALID_PROJECT", exc.message) from None
        return project

    async def chat(request: Request) -> Response | UpstreamResponse:
        project = project_of(request)
        caller = gate.caller(request.headers.get("authorization"), project)
        gate.spend(caller)
        raw = await request.body()
        try:
            body = check_chat_body(parse_json(raw))
            off = opted_out(request.headers, body)
        except ValueError as exc:  # InvalidInputError and JSONDecodeError alike
            message = exc.message if isinstance(exc, RagError) else f"invalid JSON: {exc}"
            raise ProxyError(400, "INVALID_REQUEST", message) from None
        changed = body.pop(EXTENSION_FIELD, None) is not None
        if off:
            injection = Injection("opted-out")
        else:
            tools = body.get("tools")
            injection = await arun_pre_turn(
                app,
                caller.tenant,
                project,
                user_turn(body["messages"]),
                caller.recipe,
                tools if isinstance(tools, list) else None,
            )
        if injection.blocks:
            body["messages"] = insert_blocks(body["messages"], injection.blocks, config.placement)
            changed = True
        counts.injection(injection.state)
        forwarded = json.dumps(body, ensure_ascii=False).encode() if changed else raw
        upstream_request = upstream.request(
            "POST",
            "/chat/completions",
            request.url.query,
            request.headers,
            forwarded,
            request_id(request.scope),
        )
        return forward(caller, CHAT_ROUTE, injection.headers(), upstream_request)

    async def models(request: Request) -> Response | UpstreamResponse:
        project = project_of(request)
        caller = gate.caller(request.headers.get("authorization"), project)
        gate.spend(caller)
        path, route = "/models", MODELS_ROUTE
        if request.path_params.get("model"):  # models/ is the list, as models
            # From the path as sent: the decoded one cannot tell "/" from "%2F".
            raw_path = request.scope.get("raw_path") or request.url.path.encode()
            parts = bytes(raw_path).decode("latin-1").split("/", 5)
            whole = len(parts) == 6 and [unquote(p) for p in parts[3:5]] == ["v1", "models"]
            checked = model_path(parts[5]) if whole else None
            if checked is None:
                raise ProxyError(
                    404,
                    "MODEL_NOT_FOUND",
                    "not a model id: each '/'-separated part is letters, digits and ._:@+=~- "
                    "(not '.' or '..'), percent-encoded at most once",
                )
            path, route = checked, MODEL_ROUTE
        upstream_request = upstream.request(
            "GET", path, request.url.query, request.headers, None, request_id(request.scope)
        )
        return forward(caller, route, {}, upstream_request)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        checks = {"upstream": "configured", "keys": "jwt only"}
        if keys is not None:
            keys.refresh()
            checks["keys"] = "failed to load" if keys.failure else "loaded"
        if keys is not None and keys.failure:
            reason = "the proxy key file failed to load: no proxy key is accepted"
            return JSONResponse(
                {"status": UNAVAILABLE, "reason": reason, "checks": checks}, status_code=503
            )
        return JSONResponse({"status": "ready", "checks": checks})

    async def metrics(request: Request) -> Response:
        if metrics_token:
            try:
                check_metrics_token(metrics_token, request.headers.get("authorization"))
            except AuthError as exc:
                raise ProxyError(exc.status, exc.code, exc.message) from None
        return Response(app.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def elsewhere(request: Request) -> Response:
        found = _route_of(request.url.path)
        if found is not None:
            raise ProxyError(
                405,
                "METHOD_NOT_ALLOWED",
                f"{request.url.path} takes {found[1]}, not {request.method}",
                {"Allow": found[1]},
            )
        raise ProxyError(404, "NOT_FOUND", f"no route {request.url.path}: {_NOT_HERE}")

    def guarded(
        endpoint: Callable[[Request], Awaitable[Response | UpstreamResponse]],
    ) -> Callable[[Request], Awaitable[Any]]:
        async def run(request: Request) -> Any:
            try:
                return await endpoint(request)
            except ProxyError as exc:
                return error_response(exc, [request.headers.get("authorization"), *ours])

        return run

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await upstream.aclose()

    every = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", guarded(metrics), methods=["GET"]),
        Route(CHAT_ROUTE, guarded(chat), methods=["POST"]),
        Route(MODELS_ROUTE, guarded(models), methods=["GET"]),
        Route("/p/{project}/v1/models/{model:path}", guarded(models), methods=["GET"]),
        Route("/{path:path}", guarded(elsewhere), methods=every),
    ]

    def too_large(limit: int) -> bytes:
        message = (
            f"the request body is larger than {limit:,} bytes (VANCETOPE_RAG_PROXY_MAX_BODY_BYTES)"
        )
        return openai_error(413, "REQUEST_TOO_LARGE", message)

    middleware = [Middleware(AccessLog, rag=app)]
    if config.origins():
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=config.origins(),
                allow_methods=["GET", "POST"],
                allow_headers=["*"],
                expose_headers=[STATE_HEADER, SOURCES_HEADER],
            )
        )
    middleware.append(
        Middleware(
            BodyLimit,
            max_text_chars=app.config.max_text_chars,
            max_bytes=config.max_body_bytes,
            refusal=too_large,
        )
    )
    proxy = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    proxy.state.upstream = upstream
    return proxy


__all__ = ["OPT_OUT_HEADER", "ProxyError", "create_proxy"]
