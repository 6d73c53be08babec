"""The scenario of a worker stopped during a PostgreSQL outage, for its test
(``tests/cli/test_worker_store_outage.py``) and its bench (``bench/worker_stop.py``).

A pgserver instance of its own (never the session's shared one), a loopback embeddings
server whose model call the scenario holds open, and the real ``vancetope-rag`` CLI in
subprocesses, run from ``src`` (another source tree: the bench measures the old code so).
The worker indexes a first import; a second import's batch is claimed and its model call
held; the server stops; after a moment of outage the worker gets SIGTERM.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from openai_server import KEY, MODEL, EmbeddingsServer


@dataclass
class Stopped:
    #: Seconds from SIGTERM to the process's exit (None: it outlived ``bound_s``).
    took: float | None
    returncode: int | None
    stderr: str


def _cli(env: dict[str, str] | None, *args: str) -> None:
    """One CLI command: in this process (``env`` None: this tree's code, seconds less per
    command), else in a subprocess with ``env`` (another tree's)."""
    if env is None:
        from click.testing import CliRunner

        from vancetope_rag.cli import cli

        result = CliRunner().invoke(cli, list(args))
        assert result.exit_code == 0, result.output
        return
    done = subprocess.run(
        [sys.executable, "-m", "vancetope_rag.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def stop_during_outage(
    tmp_path: Path, *, src: Path | None = None, bound_s: float = 300.0
) -> Stopped:
    """Run the scenario; the worker is killed if it outlives ``bound_s`` after SIGTERM.
    With ``src``, every command runs that tree's code; without, the worker runs the code
    this process imports (its PYTHONPATH is inherited)."""
    import pgserver

    folder = tempfile.mkdtemp(prefix="vtr-outage-")  # short: the socket's path has a limit
    server = pgserver.get_server(folder, cleanup_mode="stop")
    embedder = EmbeddingsServer(KEY)
    env = {
        **os.environ,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.5",
        "VANCETOPE_RAG_NODE_ID": "outage-test",
    }
    if src is not None:
        env["PYTHONPATH"] = str(src)
    setup = None if src is None else env  # the setup commands run in this process
    proc: subprocess.Popen[str] | None = None
    lines: queue.Queue[str] = queue.Queue()
    seen = ""
    try:
        store = server.get_uri()
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        docs = tmp_path / "docs"
        docs.mkdir()
        for i in range(3):
            (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
        base = ["--store", store, "--tenant", "t", "--project", "p"]
        _cli(setup, "--store", store, "init")
        for name, value in (
            ("provider", "openai"),
            ("apiKey", KEY),
            ("baseUrl", embedder.base_url),
            ("model", MODEL),
        ):
            _cli(
                setup, *base, "settings", "set", f"ai.embedding.{name}", value, "--scope", "tenant"
            )
        _cli(setup, *base, "import", str(docs))
        proc = subprocess.Popen(
            [sys.executable, "-m", "vancetope_rag.cli", *base, "worker"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        stream = proc.stderr
        assert stream is not None
        threading.Thread(target=lambda: [lines.put(x) for x in stream], daemon=True).start()
        deadline = time.monotonic() + 60
        while "indexer tick" not in seen and time.monotonic() < deadline:
            try:
                seen += lines.get(timeout=1)
            except queue.Empty:
                assert proc.poll() is None, seen
        assert "indexer tick" in seen, seen  # it worked while the server was up

        embedder.hold = threading.Event()  # the next model call stays open
        asked = len(embedder.requests)
        for i in range(3):
            (docs / f"n{i}.md").write_text(f"note number {i} rewritten about subject {i}")
        _cli(setup, *base, "import", str(docs))
        deadline = time.monotonic() + 60
        while len(embedder.requests) == asked and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(embedder.requests) > asked, "the worker never claimed the new versions"

        server.cleanup()  # the server stops under the running worker
        time.sleep(2)  # a tick or more meets the outage
        assert proc.poll() is None, "the worker must ride out an outage, not quit"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        took: float | None = None
        try:
            proc.wait(timeout=bound_s)
            took = time.monotonic() - started
        except subprocess.TimeoutExpired:
            pass
    finally:
        if embedder.hold is not None:
            embedder.hold.set()  # the held model call ends (before a kill: no broken pipe)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
        embedder.down()
    time.sleep(0.2)  # the reader thread drains what is left
    while not lines.empty():
        seen += lines.get()
    return Stopped(took, proc.returncode if proc else None, seen)
