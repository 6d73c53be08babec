"""Servers for real in a test, on loopback: an ASGI app under uvicorn, or a plain HTTP handler
that can go down and come back on its port (:class:`LoopbackServer`); and a raw HTTP client
(:func:`raw_request`): :mod:`http.client` with the request line written as given (httpx and
requests normalise ``../`` and re-encode paths before sending, so they cannot test what an
attacker's own client sends)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar
from urllib.parse import urlparse


@contextmanager
def serving(asgi: Any, lifespan: str = "on", http: type | None = None) -> Iterator[str]:
    """An ASGI app under uvicorn in a background thread, on a loopback socket bound before it
    starts (no port race), with the HTTP protocol ``serve`` and ``proxy`` run (or ``http``, a
    subclass of it); yields its base URL."""
    import uvicorn

    from vancetope_rag.api.lingering import LingeringH11Protocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        asgi,
        log_level="warning",
        access_log=False,
        lifespan=lifespan,
        http=http or LingeringH11Protocol,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # a real server has no clock to fake: wait for the flag
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def ipv6_loopback() -> bool:
    """Whether this machine has IPv6's loopback (``::1``) to bind."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


Request = TypeVar("Request")


class OwnedHttp(ThreadingHTTPServer):
    """A threading HTTP server whose handlers reach their test server as ``server.owner``."""

    daemon_threads = True

    def __init__(
        self,
        port: int,
        handler: type[BaseHTTPRequestHandler],
        owner: Any,
        host: str = "127.0.0.1",
    ) -> None:
        if ":" in host:  # IPv6 loopback (``::1``)
            self.address_family = socket.AF_INET6
        super().__init__((host, port), handler)
        self.owner = owner


class LoopbackServer(Generic[Request]):
    """``handler`` served on a loopback port that stays the same across :meth:`down` and
    :meth:`up` (an outage and its end); the handler appends what it received to ``seen``
    under ``lock``. A subclass sets its own state, then calls :meth:`up`. ``host`` is
    ``127.0.0.1`` or IPv6's ``::1``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.host = host
        self.seen: list[Request] = []
        self.lock = threading.Lock()
        self._http: OwnedHttp | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def up(self) -> None:
        """Serve (again, on the same port once it had one)."""
        self._http = OwnedHttp(self.port, self.handler, self, self.host)
        self.port = int(self._http.server_address[1])
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop answering: the port refuses connections until :meth:`up`."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def requests(self) -> list[Request]:
        with self.lock:
            return list(self.seen)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]  # lower-cased names, as received
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def raw_request(
    url: str,
    method: str,
    path: str,
    headers: Mapping[str, str | bytes] | None = None,
    body: bytes | None = None,
    timeout: float = 30.0,
) -> Answer:
    """``method path`` sent to ``url`` exactly as written (no normalisation, no encoding);
    header values may be bytes (sent as they are, UTF-8 for instance)."""
    where = urlparse(url)
    assert where.hostname and where.port
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, [(k.lower(), v) for k, v in response.getheaders()], data)
    finally:
        conn.close()
