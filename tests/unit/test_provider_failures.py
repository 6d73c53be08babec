"""Whose failure an embedding call's error is, read from real client exceptions: the
provider's (outage), the settings' (config) or the input's; and Retry-After in both forms."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from vancetope_rag.errors import EmbeddingError
from vancetope_rag.services.providers import FailureKind, classify
from vancetope_rag.services.providers.failures import MAX_RETRY_AFTER_S, parse_retry_after

openai = pytest.importorskip("openai")
try:
    import httpx2 as httpx  # the transport openai 3 speaks
except ImportError:  # older openai releases: httpx
    import httpx  # type: ignore[no-redef]


def status_error(status: int, headers: dict[str, str] | None = None) -> Exception:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/embeddings")
    response = httpx.Response(status, request=request, headers=headers or {})
    cls = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        404: openai.NotFoundError,
        429: openai.RateLimitError,
    }.get(status, openai.InternalServerError)
    return cls("the server says no", response=response, body=None)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, FailureKind.INPUT),
        (401, FailureKind.CONFIG),
        (403, FailureKind.CONFIG),
        (404, FailureKind.CONFIG),
        (422, FailureKind.INPUT),  # TEI: the input does not tokenize
        (424, FailureKind.OUTAGE),  # TEI: its model failed to run ("backend")
        (429, FailureKind.OUTAGE),
        (500, FailureKind.OUTAGE),
        (503, FailureKind.OUTAGE),
    ],
)
def test_http_statuses(status: int, kind: FailureKind) -> None:
    failure = classify(status_error(status))
    assert (failure.kind, failure.status) == (kind, status)
    assert failure.provider_side is (kind is not FailureKind.INPUT)


def test_transport_failures_are_outages() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/embeddings")
    for exc in (
        openai.APIConnectionError(request=request),
        openai.APITimeoutError(request=request),
        ConnectionRefusedError(111, "Connection refused"),
        socket.gaierror(-2, "Name or service not known"),
        TimeoutError("timed out"),
    ):
        assert classify(exc).kind is FailureKind.OUTAGE, exc


def test_the_cause_chain_is_read() -> None:
    try:
        try:
            raise status_error(503)
        except Exception as inner:
            raise EmbeddingError("the batch failed") from inner
    except EmbeddingError as outer:
        assert classify(outer).kind is FailureKind.OUTAGE


def test_anything_else_is_the_inputs() -> None:
    assert classify(ValueError("text too long")).kind is FailureKind.INPUT


def test_retry_after_in_seconds_and_as_a_date() -> None:
    assert classify(status_error(429, {"Retry-After": "7"})).retry_after_s == 7.0
    assert classify(status_error(429, {"retry-after-ms": "1500"})).retry_after_s == 1.5
    now = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
    when = format_datetime(now + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(when, now=now.timestamp()) == 90.0
    assert parse_retry_after("in a while") is None
    assert parse_retry_after("-5") == 0.0
    assert parse_retry_after(str(10 * MAX_RETRY_AFTER_S)) == MAX_RETRY_AFTER_S
