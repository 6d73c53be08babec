"""Every failure leaves the API as ``{"error": <message>, "code": <CODE>}``, never a traceback.

:class:`~vancetope_rag.errors.RagError` subclasses map to HTTP statuses by kind; messages are
written for users already, and are scrubbed once more of the JWT secret and the project's
``ai.embedding.apiKey`` in case a third-party provider echoed its key into an exception.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from vancetope_rag import errors as e
from vancetope_rag.api.auth import AuthError
from vancetope_rag.secrets import MASK, get_logger
from vancetope_rag.secrets import redact as redact_known

log = get_logger(__name__)

REDACTED = MASK

#: Checked in order; the first matching base class decides the status.
_STATUS: tuple[tuple[type[e.RagError], int], ...] = (
    (e.ProjectNotFoundError, 404),
    (e.ProjectClosedError, 409),
    (e.RagNotFoundError, 404),
    (e.DocumentNotFoundError, 404),
    (e.TextTooLongError, 413),
    (e.NoRebuildError, 404),
    (e.RebuildRunningError, 409),
    (e.InvalidInputError, 400),
    (e.ReservedNameError, 400),
    (e.PathNotAllowedError, 400),
    (e.RecipeError, 400),
    (e.EmbeddingDisabledError, 409),
    (e.EmbeddingConfigError, 409),
    (e.DimensionMismatchError, 409),
    (e.MissingDependencyError, 409),
    (e.RagAlreadyExistsError, 409),
    (e.CopyConflictError, 409),
    (e.ProviderUnavailableError, 503),  # its circuit is open: try again later
    (e.EmbeddingError, 502),  # the provider itself failed (network, rate limit)
    (e.StoreError, 503),
)

_HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    429: "RATE_LIMITED",
}


def status_for(exc: e.RagError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with ``secrets``, every secret the process knows and key-shaped tokens
    replaced (:mod:`vancetope_rag.secrets` does the work; short secrets too here)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return redact_known(text)


SecretsFor = Callable[[Request], list[str | None]]


def error_body(code: str, message: str) -> dict[str, str]:
    return {"error": message, "code": code}


def _location(loc: Iterable[object]) -> str:
    parts = [str(p) for p in loc]
    where = {"query": "query parameter", "path": "path parameter", "body": "body field"}
    if parts and parts[0] in where:
        kind, rest = where[parts[0]], parts[1:]
        return f"{kind} {'.'.join(rest)!r}" if rest else "request body"
    return ".".join(parts) or "request"


def install_error_handlers(api: FastAPI, secrets_for: SecretsFor) -> None:
    """Register the handlers that turn every exception into the JSON error shape."""

    def respond(
        request: Request,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        try:
            secrets = secrets_for(request)
        except Exception:  # the store may be what failed; still answer, with what we know
            secrets = []
        return JSONResponse(
            error_body(code, redact(message, secrets)), status_code=status, headers=headers
        )

    @api.exception_handler(AuthError)
    async def _auth(request: Request, exc: AuthError) -> JSONResponse:
        headers = None
        if exc.status == 401:  # RFC 6750 §3
            error = "invalid_request" if exc.code == "UNAUTHENTICATED" else "invalid_token"
            headers = {"WWW-Authenticate": f'Bearer realm="vancetope-rag", error="{error}"'}
        return respond(request, exc.status, exc.code, exc.message, headers)

    @api.exception_handler(e.RagError)
    async def _rag(request: Request, exc: e.RagError) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc.code)
        return respond(request, status, exc.code, exc.message)

    @api.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            msg = str(err.get("msg", "invalid value"))
            kind = err.get("type")
            if kind == "extra_forbidden":
                msg = "unknown field; this endpoint accepts only the documented fields"
            elif kind == "bool_parsing":
                msg = "must be true or false"
            problems.append(f"{_location(err.get('loc', ()))}: {msg}")
        return respond(request, 422, "INVALID_REQUEST", "; ".join(problems) or "invalid request")

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"HTTP_{exc.status_code}")
        message = str(exc.detail) if exc.detail else code.replace("_", " ").lower()
        return respond(request, exc.status_code, code, message, dict(exc.headers or {}))

    @api.middleware("http")
    async def _unexpected(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # A middleware, not an Exception handler: Starlette re-raises from the latter, and
        # the server would then log the raw traceback, which may hold what a provider echoed.
        try:
            return await call_next(request)
        except Exception as exc:
            try:
                secrets = secrets_for(request)
            except Exception:
                secrets = []
            trace = "".join(traceback.format_exception(exc))
            log.error("%s %s failed:\n%s", request.method, request.url.path, redact(trace, secrets))
            return JSONResponse(
                error_body("INTERNAL_ERROR", "internal error; the server log has the details"),
                status_code=500,
            )
