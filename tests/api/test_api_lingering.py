"""The lingering close's bounds (api.lingering), with short bounds in a protocol subclass so
a test waits them out in a second, and each bound below the other so either test fails
without its own bound: a client silent for longer than the idle bound, one that keeps
sending for longer than the whole linger."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from loopback import serving
from vancetope_rag.api.lingering import LingeringH11Protocol

pytest.importorskip("uvicorn", reason="needs the 'server' extra")

#: More than the sockets' buffers hold: still arriving when the answer has gone out.
SIZE = 16 * 1024 * 1024


async def _refuse(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A 413 that ends the connection, sent without reading the body (as the limits do)."""
    headers = [(b"connection", b"close"), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


class _ShortIdle(LingeringH11Protocol):
    linger_s = 30.0
    linger_idle_s = 0.2


class _ShortLinger(LingeringH11Protocol):
    linger_s = 0.5
    linger_idle_s = 30.0


def _refused(url: str) -> socket.socket:
    """A connection whose refused request's body stops halfway, its answer read whole."""
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: {SIZE}\r\n\r\n".encode()
    sock.sendall(head + b"x" * 1024 * 1024)
    answer = b""
    while chunk := sock.recv(65536):  # until the server's side ends
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    return sock


def test_a_client_silent_after_a_refusal_is_closed_after_the_idle_bound() -> None:
    idle = _ShortIdle.linger_idle_s
    with serving(_refuse, lifespan="off", http=_ShortIdle) as url, _refused(url) as sock:
        deadline = time.monotonic() + 12 * idle  # far below linger_s
        with pytest.raises(OSError):  # ECONNRESET or EPIPE once the server has closed
            while time.monotonic() < deadline:
                time.sleep(idle + 0.1)  # silent for longer than the bound
                sock.sendall(b"x")
                time.sleep(0.1)
                sock.sendall(b"x")


def test_a_client_that_keeps_sending_after_a_refusal_is_closed_after_the_linger() -> None:
    linger = _ShortLinger.linger_s
    with serving(_refuse, lifespan="off", http=_ShortLinger) as url, _refused(url) as sock:
        deadline = time.monotonic() + 12 * linger  # far below linger_idle_s
        with pytest.raises(OSError):
            while time.monotonic() < deadline:
                sock.sendall(b"x" * 1024)  # never silent for long
                time.sleep(0.05)
