"""The CLI's JSON log lines: one object a record, UTC timestamps, secrets redacted first."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from vancetope_rag.cli.logs import JsonFormatter
from vancetope_rag.secrets import get_logger

KEY = "sk-test-d41d8cd98f00b204e9800998ecf8427e"


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = get_logger("vancetope_rag.test_log_format")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


def test_a_record_is_one_json_object_with_the_secret_masked(lines: io.StringIO) -> None:
    log = get_logger("vancetope_rag.test_log_format")
    log.info("indexer tick %s: %d claimed", "node-a:1", 3)
    log.warning("provider said: invalid key %s", KEY)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("tick failed")
    entries = [json.loads(line) for line in lines.getvalue().splitlines()]

    assert [e["level"] for e in entries] == ["INFO", "WARNING", "ERROR"]
    assert entries[0]["message"] == "indexer tick node-a:1: 3 claimed"
    assert all(e["ts"].endswith("+00:00") and "T" in e["ts"] for e in entries)
    assert all(e["logger"] == "vancetope_rag.test_log_format" for e in entries)
    assert KEY not in lines.getvalue() and "********" in entries[1]["message"]
    assert "RuntimeError: boom" in entries[2]["exc"]


def test_a_records_extras_are_fields_of_its_object(lines: io.StringIO) -> None:
    """Before, the numbers of an access line or a tick summary were only inside
    ``message``: a log shipper had to parse English to chart them."""
    log = get_logger("vancetope_rag.test_log_format")
    log.info(
        "GET /healthz 200 0.4ms",
        extra={"method": "GET", "route": "/healthz", "status": 200, "duration_ms": 0.4},
    )
    log.info("provider failed", extra={"detail": f"key {KEY} refused", "when": object()})
    log.info("clash", extra={"ts_note": 1, "tags": ("a", "b")})
    access, leaky, clash = (json.loads(line) for line in lines.getvalue().splitlines())

    assert access["message"] == "GET /healthz 200 0.4ms"
    assert (access["method"], access["route"], access["status"]) == ("GET", "/healthz", 200)
    assert access["duration_ms"] == 0.4
    assert KEY not in lines.getvalue() and "********" in leaky["detail"]
    assert isinstance(leaky["when"], str)  # what JSON cannot hold is written as text
    assert clash["ts_note"] == 1 and clash["tags"] == ["a", "b"]
    assert set(access) >= {"ts", "level", "logger", "message"}
    assert "args" not in access and "levelno" not in access  # no LogRecord internals
