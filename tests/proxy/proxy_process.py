"""A real ``vancetope-rag proxy`` process on loopback; its tests' raw HTTP client is
:func:`loopback.raw_request`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from proxy_support import ROOT, SECRET, populate

from chat_upstream import ChatUpstream
from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig


def prepared_store(directory: Path) -> str:
    """A SQLite store in ``directory`` as the proxy tests' ``rag`` fixture makes it: tenants
    t1 and t2, each with an indexed project ``handbook``, AutoInject ON."""
    uri = f"sqlite:///{directory / 'rag.db'}"
    app = RagApp.open(EngineConfig(store=uri, indexer_initial_delay_s=0.0))  # type: ignore[call-arg]
    try:
        populate(app)
    finally:
        app.close()
    return uri


@dataclass
class ProxyProcess:
    url: str
    child: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """What the process wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _start(command: list[str], env: dict[str, str], directory: Path) -> ProxyProcess:
    """The proxy started on a free port and accepting connections. The port is probed free
    before the child binds it: when another process takes it in between (tests run in
    parallel), the child exits and it is tried again on another port."""
    for _ in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log_path = directory / f"proxy-{port}.log"
        with log_path.open("wb") as log:
            child = subprocess.Popen(
                [*command, "--port", str(port)], env=env, stderr=log, stdout=subprocess.DEVNULL
            )
        process = ProxyProcess(f"http://127.0.0.1:{port}", child, log_path)
        deadline = time.monotonic() + 60
        while child.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return process
            except OSError:
                assert time.monotonic() < deadline, "the proxy did not start: " + process.log()
                time.sleep(0.1)
        assert "address already in use" in process.log().lower(), process.log()
    raise AssertionError("no free port for the proxy after 3 tries")


@contextmanager
def running_proxy(
    store: str,
    upstream: ChatUpstream,
    keys: Path,
    directory: Path,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[ProxyProcess]:
    """``vancetope-rag proxy`` in a child process (this worktree's source), on a free
    loopback port, its stderr in ``directory/proxy-<port>.log``; stopped with SIGTERM."""
    child_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("VANCETOPE_RAG_", "RAG_"))
    }
    child_env |= {
        "PYTHONPATH": str(ROOT / "src"),
        "VANCETOPE_RAG_PROXY_UPSTREAM_API_KEY": upstream.key,
        "VANCETOPE_RAG_JWT_SECRET": SECRET,
        "VANCETOPE_RAG_EMBEDDED_BACKEND": "torch",
        **(env or {}),
    }
    command = [sys.executable, "-m", "vancetope_rag.cli", "--store", store, *args, "proxy"]
    command += ["--upstream", upstream.base_url, "--keys", str(keys)]
    process = _start(command, child_env, directory)
    try:
        yield process
    finally:
        process.child.terminate()
        try:
            process.child.wait(20)
        except subprocess.TimeoutExpired:
            process.child.kill()
            process.child.wait(10)
