"""REST surface (spec §7) and web UI (spec §8) of the project RAG, on FastAPI.

Needs the ``server`` extra: ``pip install 'vancetope-rag[server]'``. Run it with
``vancetope-rag serve``, or mount :func:`create_api` in your own ASGI server; in that case
switch the server's own access log off (uvicorn ``access_log=False``): it would write the
query string, and the UI accepts a token as ``?token=``. This app logs requests without it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from vancetope_rag.errors import ApiConfigError, MissingDependencyError
from vancetope_rag.health import PROBE_PATHS, Readiness, liveness, request_id_of
from vancetope_rag.metrics import UNMATCHED_ROUTE
from vancetope_rag.secrets import get_logger

try:
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse
    from starlette.routing import Mount, Route
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingDependencyError("the REST API", "server") from exc

from vancetope_rag.api.auth import (
    AuthError,
    Principal,
    TokenVerifier,
    check_secret,
    issue_token,
)
from vancetope_rag.api.errors import install_error_handlers
from vancetope_rag.api.limits import BodyLimit
from vancetope_rag.api.models import ProbeResponse
from vancetope_rag.api.router import build_router
from vancetope_rag.api.web import install_web_ui
from vancetope_rag.domain.settings.registry import SETTINGS

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp

__all__ = [
    "ApiConfigError",
    "AuthError",
    "Principal",
    "TokenVerifier",
    "create_api",
    "issue_token",
]

#: One line per request: method, route template, status, duration and request id, as the
#: message and as the record's fields (``method``, ``route``, ``status``, ``duration_ms``,
#: ``request_id``; ``--log-format json`` writes them as JSON fields). Never a query string
#: (the UI accepts ``?token=``), never a raw path (ids), never a header's value but the
#: request id's.
access_log = get_logger("vancetope_rag.access")


def create_api(app: RagApp) -> FastAPI:
    """The FastAPI application for ``app``.

    Raises:
        ApiConfigError: no JWT secret is configured (``VANCETOPE_RAG_JWT_SECRET``) or it is
            too short; the API never runs unauthenticated.
    """
    raw = app.config.jwt_secret.get_secret_value() if app.config.jwt_secret else None
    secret = check_secret(raw)
    verifier = TokenVerifier(secret)
    api = FastAPI(
        title="vancetope-rag",
        summary="Project RAG: status, reindex, document overrides",
        docs_url=None,  # Swagger UI and ReDoc load assets from a CDN
        redoc_url=None,
    )

    def secrets_of(tenant: str, project: str) -> list[str | None]:
        eff = app.settings.effective(tenant, project)
        keys = [eff[k] for k in SETTINGS if SETTINGS[k].secret]  # the API keys of providers
        return [secret, *(k if isinstance(k, str) else None for k in keys)]

    def secrets_for(request: Request) -> list[str | None]:
        tenant = request.path_params.get("tenant")
        project = request.path_params.get("project")
        if isinstance(tenant, str) and isinstance(project, str):
            return secrets_of(tenant, project)
        return [secret]

    install_error_handlers(api, secrets_for)
    install_probes(api, Readiness(app.store.control.check_ready))
    api.include_router(build_router(app, verifier, secrets_of))
    install_web_ui(api)
    # Before any route, parser or error handler reads an oversized body; inside the access
    # middleware below, so that a refused body is counted and logged like any answer.
    api.add_middleware(BodyLimit, max_text_chars=app.config.max_text_chars)

    templates = plain_route_templates(api)

    @api.middleware("http")
    async def _access(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        start = time.perf_counter()
        request_id = request_id_of(request.headers.get("x-request-id"))
        response = await call_next(request)
        seconds = time.perf_counter() - start
        # The route's template, never the raw path: ids in paths would make the label
        # unbounded (and put tenant names into the metrics). No route took a request for a
        # path no route has (404) or whose body was refused before routing (413).
        route = (
            getattr(request.scope.get("route"), "path", None)
            or templates.get(request.scope.get("endpoint"))
            or UNMATCHED_ROUTE
        )
        app.metrics.http_request(request.method, route, response.status_code, seconds)
        if request.url.path.startswith("/brain/"):
            response.headers.setdefault("Cache-Control", "no-store")
        # Every answer (JSON, static files, errors), not only the page: a browser must never
        # guess another type than the one declared.
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers["X-Request-Id"] = request_id
        duration_ms = round(seconds * 1000, 1)
        access_log.log(
            logging.DEBUG if request.url.path in PROBE_PATHS else logging.INFO,
            "%s %s %d %.1fms %s",
            request.method,
            route,
            response.status_code,
            duration_ms,
            request_id,
            extra={
                "method": request.method,
                "route": route,
                "status": response.status_code,
                "duration_ms": duration_ms,
                "request_id": request_id,
            },
        )
        return response

    return api


def install_probes(api: FastAPI, readiness: Readiness) -> None:
    """``GET /healthz`` (the process answers) and ``GET /readyz`` (the store answers and is
    initialised; 503 with a reason when not): unauthenticated, and saying nothing of the
    deployment (see :mod:`vancetope_rag.health`)."""

    @api.get("/healthz", tags=["ops"], response_model=ProbeResponse)
    def healthz() -> JSONResponse:
        """Liveness: 200 while the process serves requests. Needs no token."""
        code, body = liveness()
        return JSONResponse(body, status_code=code, headers={"Cache-Control": "no-store"})

    @api.get(
        "/readyz",
        tags=["ops"],
        response_model=ProbeResponse,
        responses={503: {"description": "not ready", "model": ProbeResponse}},
    )
    def readyz() -> JSONResponse:
        """Readiness: 200 when the store answers and holds this package's schema; 503 with a
        reason (no host or database named) when not. Needs no token; the store is asked at
        most once a second."""
        code, body = readiness.answer()
        return JSONResponse(body, status_code=code, headers={"Cache-Control": "no-store"})


def plain_route_templates(api: FastAPI) -> dict[object, str]:
    """The paths of the app's plain Starlette routes and mounts (the OpenAPI document, the
    static files), by the endpoint routing puts in the scope: FastAPI names only its own
    API routes in ``scope["route"]``."""
    templates: dict[object, str] = {}
    for route in api.router.routes:
        if isinstance(route, Route):
            templates[route.endpoint] = route.path
        elif isinstance(route, Mount):
            templates[route.app] = route.path
    return templates
