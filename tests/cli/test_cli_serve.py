"""`vancetope-rag token` and `vancetope-rag serve` (the latter as a real process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from loopback import raw_request
from vancetope_rag.api import TokenVerifier
from vancetope_rag.cli import cli

SECRET = "jwt-test-secret-0123456789abcdefghijklmnop"


def _invoke(*args: str, secret: str | None = SECRET, store: str | None = None) -> Result:
    prefix = ["--store", store] if store else []
    return CliRunner().invoke(cli, [*prefix, *args], env={"VANCETOPE_RAG_JWT_SECRET": secret})


def test_token_for_one_project() -> None:
    result = _invoke("--tenant", "t1", "token", "--project", "p1", "--ttl", "120")
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert "\n" not in token
    principal = TokenVerifier(SECRET).principal(f"Bearer {token}")
    assert (principal.tenant, principal.projects, principal.subject) == ("t1", ("p1",), "operator")
    assert principal.perms == {"WRITE"}
    principal.may_write("t1", "p1")


def test_token_options_and_defaults() -> None:
    star = _invoke("token", "--tenant", "acme", "--project", "*", "--subject", "ops")
    principal = TokenVerifier(SECRET).principal(f"Bearer {star.stdout.strip()}")
    assert (principal.tenant, principal.projects, principal.subject) == ("acme", None, "ops")
    default = _invoke("--tenant", "t9", "--project", "p9", "token")
    principal = TokenVerifier(SECRET).principal(f"Bearer {default.stdout.strip()}")
    assert (principal.tenant, principal.projects) == ("t9", ("p9",))


@pytest.mark.parametrize("command", [["token"], ["serve", "--port", "1"]])
def test_commands_refuse_to_work_without_a_secret(command: list[str], tmp_path: Path) -> None:
    result = _invoke(*command, secret=None, store=f"sqlite:///{tmp_path / 'rag.db'}")
    assert result.exit_code == 1
    assert "VANCETOPE_RAG_JWT_SECRET" in result.stderr
    assert "unauthenticated" in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_with_indexer_end_to_end(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a.md", "b.md", "c.txt"):
        (docs / name).write_text(f"contents of {name}")
    base = ["--store", store, "--tenant", "t1", "--project", "p1"]
    assert _invoke(*base, "settings", "set", "ai.embedding.provider", "hashing").exit_code == 0
    assert _invoke(*base, "import", str(docs)).exit_code == 0
    token = _invoke(*base, "token").stdout.strip()

    port = _free_port()
    env = {
        **os.environ,
        "VANCETOPE_RAG_JWT_SECRET": SECRET,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "VANCETOPE_RAG_INDEXER_INTERVAL_S": "0.1",
    }
    # Not `python -m vancetope_rag.cli`: the console-script entry point is what users run.
    code = "from vancetope_rag.cli import main; main()"
    args = [*base, "serve", "--port", str(port), "--with-indexer"]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        status = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            try:
                status = httpx.get(
                    f"{url}/brain/t1/projects/p1/rag/status",
                    headers={"Authorization": f"Bearer {token}"},
                ).json()
                if status["chunkCount"] == 3:
                    break
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.1)
        assert status is not None and status["chunkCount"] == 3, status
        assert status["documents"]["indexed"] == 3
        assert httpx.get(f"{url}/brain/t1/projects/p1/rag/status").status_code == 401
        assert httpx.get(f"{url}/ui/t1/p1?token={token}").status_code == 200
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"serving http://127.0.0.1:{port}" in err and "indexer on" in err
    assert SECRET not in out + err and token not in out + err


def test_serve_answers_a_refused_request_whose_body_is_still_arriving(tmp_path: Path) -> None:
    """The 413 of a body over the limit and uvicorn's 400 for a header it cannot parse come
    before the body is read, and the connection closes after them. Before, it closed while
    the body was arriving (more than the sockets' buffers hold): the kernel reset the
    connection, and the client got ECONNRESET instead of the answer."""
    port = _free_port()
    env = {**os.environ, "VANCETOPE_RAG_JWT_SECRET": SECRET, "VANCETOPE_RAG_MAX_TEXT_CHARS": "1000"}
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    code = "from vancetope_rag.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--store", store, "serve", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    body = b" " * (16 * 1024 * 1024)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "not listening"
                time.sleep(0.1)
        url, path = f"http://127.0.0.1:{port}", "/brain/t1/projects/p1/rag/reindex"
        answer = raw_request(url, "POST", path, {"Authorization": b"Bearer not-a-token"}, body, 60)
        assert (answer.status, b"TEXT_TOO_LONG" in answer.body) == (413, True), answer
        answer = raw_request(url, "POST", path, {"Authorization": b"Bearer \x00\xff"}, body, 60)
        assert answer.status == 400, answer
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_a_port_in_use_fails_at_once_with_the_reason_and_no_serving_line(
    command: str, tmp_path: Path
) -> None:
    """Bind first: a taken port exits non-zero naming it, never after a "serving" line."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "VANCETOPE_RAG_JWT_SECRET": SECRET}
        args = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", command, "--port", str(port)]
        if command == "proxy":
            args += ["--upstream", "http://127.0.0.1:9/v1"]
        code = "from vancetope_rag.cli import main; main()"
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0, done.stderr
    assert "serving" not in done.stderr and "proxying" not in done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and "in use" in done.stderr
    assert "Errno" not in done.stderr and "Traceback" not in done.stderr
