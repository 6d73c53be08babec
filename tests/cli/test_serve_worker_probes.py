"""`serve` and `worker --metrics-port` as real processes, as a load balancer and Prometheus
see them: /healthz and /readyz without a token, the process collectors on /metrics, and
log lines an operator reads (access lines at INFO by default; with ``--log-format json``
their numbers, and the tick summary's, as fields; the worker's last line says why it
stopped).

Before: no probe routes on either, no ``process_*`` families, serve's access lines were
hidden without ``-v`` and named raw paths, and the worker ended without a word.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from vancetope_rag.cli import cli

SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _project(tmp_path: Path) -> list[str]:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    base = ["--store", store, "--tenant", "t1", "--project", "p1"]
    runner = CliRunner()
    setting = [*base, "settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
    assert runner.invoke(cli, setting).exit_code == 0
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0
    return base


def _wait_until_up(url: str, proc: subprocess.Popen[str]) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            assert time.monotonic() < deadline, "not listening"
            time.sleep(0.1)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def _probes_answer(url: str, proc: subprocess.Popen[str]) -> None:
    """Both probes answer without a token once the process listens."""
    live = _wait_until_up(f"{url}/healthz", proc)
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}


def _json_lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


@pytest.mark.timeout(120)
def test_serve_probes_and_access_lines(tmp_path: Path) -> None:
    base = _project(tmp_path)
    token = CliRunner().invoke(cli, [*base, "token"], env={"VANCETOPE_RAG_JWT_SECRET": SECRET})
    bearer = {"Authorization": f"Bearer {token.stdout.strip()}"}
    port = _free_port()
    env = {**os.environ, "VANCETOPE_RAG_JWT_SECRET": SECRET}
    proc = _start([*base, "--log-format", "json", "serve", "--port", str(port)], env)
    url = f"http://127.0.0.1:{port}"
    try:
        _probes_answer(url, proc)
        assert "process_cpu_seconds_total" in httpx.get(f"{url}/metrics").text
        status = httpx.get(
            f"{url}/brain/t1/projects/p1/rag/status?", headers={**bearer, "X-Request-Id": "r-1"}
        )
        assert status.status_code == 200
        assert status.json()["indexer"]["note"].startswith("no indexer has run yet")
        assert httpx.get(f"{url}/brain/t1/projects/p1/rag/documents?q=private").status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    access = [e for e in _json_lines(err) if e["logger"] == "vancetope_rag.access"]
    # shown without -v; the probes' and the scrape's lines are DEBUG, so not shown
    assert [(e["method"], e["route"], e["status"]) for e in access] == [
        ("GET", "/brain/{tenant}/projects/{project}/rag/status", 200),
        ("GET", "/brain/{tenant}/projects/{project}/rag/documents", 401),
    ], err
    assert access[0]["request_id"] == "r-1" and access[0]["level"] == "INFO"
    assert isinstance(access[0]["duration_ms"], float)
    assert "private" not in err and bearer["Authorization"][7:] not in err


@pytest.mark.timeout(120)
def test_worker_probes_metrics_and_its_last_line(tmp_path: Path) -> None:
    base = _project(tmp_path)
    port = _free_port()
    env = {
        **os.environ,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.2",
        "VANCETOPE_RAG_NODE_ID": "probe-test",
    }
    proc = _start([*base, "--log-format", "json", "worker", "--metrics-port", str(port)], env)
    url = f"http://127.0.0.1:{port}"
    try:
        _probes_answer(url, proc)
        metrics = httpx.get(f"{url}/metrics").text
        assert "process_resident_memory_bytes" in metrics and "python_info{" in metrics
        deadline = time.monotonic() + 60
        status: dict[str, object] = {}
        while time.monotonic() < deadline:
            out = CliRunner().invoke(cli, [*base, "status", "--json"])
            status = json.loads(out.stdout)
            if status["documents"]["indexed"] == 3:  # type: ignore[index]
                break
            time.sleep(0.2)
        (worker,) = status["indexer"]["workers"]  # type: ignore[index]
        assert worker["nodeId"] == "probe-test"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    entries = _json_lines(err)
    ticks = [e for e in entries if str(e["message"]).startswith("indexer tick")]
    assert sum(int(e["indexed"]) for e in ticks) == 3, err  # type: ignore[call-overload]
    assert all(isinstance(e["duration_s"], float) for e in ticks)
    (last,) = [e for e in entries if e["logger"] == "vancetope_rag.worker"]
    assert "stopped (SIGTERM)" in str(last["message"]) and last["signal"] == "SIGTERM"
    after = CliRunner().invoke(cli, [*base, "status", "--json"])
    assert json.loads(after.stdout)["indexer"]["workers"] == []  # it said it stopped
