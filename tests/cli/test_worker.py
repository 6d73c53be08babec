"""`vancetope-rag worker` as a real process: indexes in the background, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from vancetope_rag.cli import cli


def test_worker_indexes_and_stops_on_sigterm(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(5):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    runner = CliRunner()
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    assert runner.invoke(
        cli, [*base, "settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
    ).exit_code == 0
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
