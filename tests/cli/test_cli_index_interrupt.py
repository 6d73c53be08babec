"""Ctrl-C / SIGTERM of `vancetope-rag index` as a real process: the claims it holds go back.

Before, the claimed documents stayed ``processing`` until their lease expired (600 s): no
other worker (and no second `index`) could take them in the meantime.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from plugin_site import install_provider
from vancetope_rag.cli import cli

# ``slow`` embeds like ``hashing`` but takes its time, and says on a marker file when the
# indexer first calls it (the batch is claimed by then).
SLOW = """
import os
import time
from pathlib import Path


class Embedding(HashingEmbedding):
    def _get_text_embeddings(self, texts):
        Path(os.environ["SLOW_EMBED_MARKER"]).touch()
        time.sleep(60)
        return [self._vector(t) for t in texts]
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("signum", "name", "code"),
    [(signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)],
)
def test_interrupted_index_gives_its_claims_back(
    tmp_path: Path, signum: signal.Signals, name: str, code: int
) -> None:
    marker = tmp_path / "embedding-started"
    env = {
        **os.environ,
        **install_provider(tmp_path / "site", "slow", SLOW),
        "SLOW_EMBED_MARKER": str(marker),
    }
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    base = ["--store", store, "--tenant", "t", "--project", "p"]
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vancetope_rag.cli", *base, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    setting = run("settings", "set", "ai.embedding.provider", "slow", "--scope", "tenant")
    assert setting.returncode == 0, setting.stderr
    assert run("import", str(docs)).returncode == 0

    proc = subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", *base, "index"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the indexer never reached the model"
        claimed = json.loads(CliRunner().invoke(cli, [*base, "status", "--json"]).stdout)
        assert claimed["documents"]["processing"] == 4  # the batch is claimed
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 10, f"exited {took:.1f}s after {name}"
    assert proc.returncode == code, err
    assert f"interrupted ({name})" in err, err
    assert "gave back 4 claimed documents" in err, err
    assert "Traceback" not in err, err
    status = json.loads(CliRunner().invoke(cli, [*base, "status", "--json"]).stdout)
    assert status["documents"]["processing"] == 0
    assert status["documents"]["pending"] == 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_worker_gives_its_claims_back_at_once(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Before, `worker` waited up to 30 s for the batch its model was busy with before it
    gave the claims back: longer than a container's stop grace (10 s in Docker), after which
    SIGKILL left the documents ``processing`` until their lease expired (600 s)."""
    marker = tmp_path / "embedding-started"
    env = {
        **os.environ,
        **install_provider(tmp_path / "site", "slow", SLOW),
        "SLOW_EMBED_MARKER": str(marker),
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.2",
        "VANCETOPE_RAG_NODE_ID": "worker-test",
    }
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
    cli_cmd = [sys.executable, "-m", "vancetope_rag.cli", *base]
    setting = subprocess.run(
        [*cli_cmd, "settings", "set", "ai.embedding.provider", "slow", "--scope", "tenant"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert setting.returncode == 0, setting.stderr
    assert CliRunner().invoke(cli, [*base, "import", str(docs)]).exit_code == 0
    proc = subprocess.Popen(
        [*cli_cmd, "worker"], env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the worker never reached the model"
        claimed = json.loads(CliRunner().invoke(cli, [*base, "status", "--json"]).stdout)
        assert claimed["documents"]["processing"] == 4
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 8, f"the worker took {took:.1f}s to stop"
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    status = json.loads(CliRunner().invoke(cli, [*base, "status", "--json"]).stdout)
    assert status["documents"]["processing"] == 0
    assert status["documents"]["pending"] == 4
