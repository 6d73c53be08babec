"""`vancetope-rag worker` as a real process: indexes in the background, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from vancetope_rag.cli import cli


def test_worker_indexes_and_stops_on_sigterm(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    runner = CliRunner()
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    assert (
        runner.invoke(
            cli, [*base, "settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
        ).exit_code
        == 0
    )
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0

    env = {
        **os.environ,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.2",
        "VANCETOPE_RAG_NODE_ID": "worker-test",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", *base, "worker"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        status: dict = {}
        while time.monotonic() < deadline:
            out = runner.invoke(cli, [*base, "status", "--json"])
            status = json.loads(out.stdout)
            if status["documents"]["indexed"] == 5:
                break
            time.sleep(0.2)
        assert status["documents"]["indexed"] == 5
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving node worker-test" in err


def test_worker_with_indexer_disabled_indexes_nothing(tmp_path: Path) -> None:
    """Regression (the indexer switch was never read): `RAG_INDEXER_ENABLED=false
    vancetope-rag worker` indexed anyway, nothing read the setting. Now the worker says the
    indexer is off, idles until SIGTERM and exits 0; an explicit `index` run still works."""
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    runner = CliRunner()
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    assert (
        runner.invoke(
            cli, [*base, "settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
        ).exit_code
        == 0
    )
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0

    env = {
        **os.environ,
        "RAG_INDEXER_ENABLED": "false",
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.1",
        "VANCETOPE_RAG_NODE_ID": "worker-test",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", *base, "worker"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)
    reader.start()
    err = ""
    try:
        first = lines.get(timeout=60)  # the worker is up (and has its signal handlers)
        err += first
        # Long enough for a running scheduler to tick many times (0 s delay, 0.1 s interval);
        # the enabled worker of the test above indexes its documents well within it.
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and proc.poll() is None:
            status = json.loads(runner.invoke(cli, [*base, "status", "--json"]).stdout)
            assert status["documents"]["indexed"] == 0, "the disabled worker indexed"
            time.sleep(0.2)
        assert proc.poll() is None, "the worker should idle until it is stopped"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=5)
    while not lines.empty():
        err += lines.get()
    assert proc.returncode == 0, err
    assert "RAG_INDEXER_ENABLED=false" in err
    status = json.loads(runner.invoke(cli, [*base, "status", "--json"]).stdout)
    assert status["documents"]["pending"] == 3

    # The switch stops the background scheduler only: an explicit run still indexes.
    indexed = runner.invoke(cli, [*base, "index", "--json"], env={"RAG_INDEXER_ENABLED": "false"})
    assert indexed.exit_code == 0, indexed.output
    assert json.loads(indexed.stdout)["indexed"] == 3


def test_help_says_what_the_indexer_switch_stops() -> None:
    index = CliRunner().invoke(cli, ["index", "--help"])
    assert "RAG_INDEXER_ENABLED=false" in index.stdout and "explicit run" in index.stdout
    worker = CliRunner().invoke(cli, ["worker", "--help"])
    assert "RAG_INDEXER_ENABLED=false" in worker.stdout and "idles" in worker.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.timeout(120)
def test_worker_serves_metrics_and_logs_one_json_line_per_tick(tmp_path: Path) -> None:
    """Before, the worker had no /metrics (only `serve` had) and its log lines had no
    timestamps, no tick summary and no JSON form."""
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    runner = CliRunner()
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    set_provider = [*base, "settings", "set", "ai.embedding.provider", "hashing"]
    assert runner.invoke(cli, [*set_provider, "--scope", "tenant"]).exit_code == 0
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0
    port = _free_port()
    env = {
        **os.environ,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.2",
        "VANCETOPE_RAG_NODE_ID": "worker-test",
        "VANCETOPE_RAG_METRICS_STATE_TTL_S": "0",
    }
    cmd = [sys.executable, "-m", "vancetope_rag.cli", *base, "--log-format", "json", "worker"]
    proc = subprocess.Popen(
        [*cmd, "--metrics-port", str(port)], env=env, stderr=subprocess.PIPE, text=True
    )
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:  # not listening yet
                time.sleep(0.2)
                continue
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            # The store shows a document indexed once it is marked clean; the worker's
            # counter counts it just after: a scrape in between sees the gauge ahead.
            written = ("vance_rag_indexed_documents_total", (("result", "written"),))
            if (
                samples.get(("vance_rag_documents", (("state", "indexed"),))) == 4
                and samples.get(written) == 4
            ):
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert samples.get(("vance_rag_documents", (("state", "indexed"),))) == 4, samples
    assert samples[("vance_rag_documents", (("state", "pending"),))] == 0
    assert samples[("vance_rag_indexed_documents_total", (("result", "written"),))] == 4
    entries = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    ticks = [e for e in entries if e["message"].startswith("indexer tick")]
    assert ticks, err
    assert "4 indexed (0 unchanged)" in " ".join(e["message"] for e in ticks)
    assert all(e["ts"].endswith("+00:00") and e["level"] == "INFO" for e in ticks)
    assert f"metrics at http://127.0.0.1:{port}/metrics" in err


def test_log_lines_carry_a_timestamp_and_a_tick_summary(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("a note about apples")
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    runner = CliRunner()
    set_provider = [*base, "settings", "set", "ai.embedding.provider", "hashing"]
    assert runner.invoke(cli, [*set_provider, "--scope", "tenant"]).exit_code == 0
    assert runner.invoke(cli, [*base, "import", str(tmp_path / "docs")]).exit_code == 0
    proc = subprocess.run(
        [sys.executable, "-m", "vancetope_rag.cli", *base, "-v", "index"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if " INFO " in line]
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO ", x) for x in lines)
    ticks = [line for line in lines if "indexer tick" in line]
    assert len(ticks) == 1, proc.stderr  # the ticks that did nothing say nothing
    assert "1 claimed in 1 projects; 1 indexed (0 unchanged)" in ticks[0]


def test_worker_names_the_metrics_option_when_it_cannot_serve(tmp_path: Path) -> None:
    """Before: ``error: [Errno 98] Address already in use``, naming neither the port nor the
    option to change."""
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(cli, [*base, "worker", "--metrics-port", str(port)])
    assert result.exit_code == 1
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "--metrics-port" in result.stderr
    unknown = CliRunner().invoke(
        cli, [*base, "worker", "--metrics-port", "9464", "--metrics-host", "no-such-host.invalid"]
    )
    assert unknown.exit_code == 1
    assert "cannot serve /metrics on no-such-host.invalid:9464" in unknown.stderr
    assert "--metrics-host" in unknown.stderr
