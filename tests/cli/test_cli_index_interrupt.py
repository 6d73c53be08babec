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


#: A stop takes 1-2 s on a quiet machine (a Python exit and a store write), ~10 s at a load of
#: 10 on 2 cores; the embedding it leaves behind would take 60 s, and the old worker waited
#: 30 s for it. The bound tells those apart and is 10x the quiet time, so load cannot fail it.
STOP_BOUND_S = 25


class SlowProject:
    """Four imported documents of a project whose provider is ``slow``, on the test's store."""

    def __init__(self, tmp_path: Path) -> None:
        self.marker = tmp_path / "embedding-started"
        self.env = {
            **os.environ,
            **install_provider(tmp_path / "site", "slow", SLOW),
            "SLOW_EMBED_MARKER": str(self.marker),
            "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
            "RAG_INDEXER_POLL_SECONDS": "0.2",
            "VANCETOPE_RAG_NODE_ID": "interrupt-test",
        }
        store = f"sqlite:///{tmp_path / 'rag.db'}"
        self.base = ["--store", store, "--tenant", "t", "--project", "p"]
        self.cmd = [sys.executable, "-m", "vancetope_rag.cli", *self.base]
        docs = tmp_path / "docs"
        docs.mkdir()
        for i in range(4):
            (docs / f"n{i}.md").write_text(f"note number {i} about topic {i}")
        setting = subprocess.run(
            [*self.cmd, "settings", "set", "ai.embedding.provider", "slow", "--scope", "tenant"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert setting.returncode == 0, setting.stderr
        assert CliRunner().invoke(cli, [*self.base, "import", str(docs)]).exit_code == 0

    def documents(self) -> dict[str, int]:
        status = json.loads(CliRunner().invoke(cli, [*self.base, "status", "--json"]).stdout)
        counts: dict[str, int] = status["documents"]
        return counts

    def interrupt(self, command: str, signum: signal.Signals) -> tuple[int, str, float]:
        """Start ``command``, signal it once its batch is claimed and in the model; its exit
        code, stderr and the seconds it took to exit."""
        proc = subprocess.Popen(
            [*self.cmd, command],
            env=self.env,
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not self.marker.exists() and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            assert self.marker.exists(), "the indexer never reached the model"
            assert self.documents()["processing"] == 4  # the batch is claimed
            sent = time.monotonic()
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=30)
            return proc.returncode, err, time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("signum", "name", "code"),
    [(signal.SIGINT, "SIGINT", 130), (signal.SIGTERM, "SIGTERM", 143)],
)
def test_interrupted_index_gives_its_claims_back(
    tmp_path: Path, signum: signal.Signals, name: str, code: int
) -> None:
    project = SlowProject(tmp_path)
    returncode, err, took = project.interrupt("index", signum)
    assert took < STOP_BOUND_S, f"exited {took:.1f}s after {name}"
    assert returncode == code, err
    assert f"interrupted ({name})" in err, err
    assert "gave back 4 claimed documents" in err, err
    assert "Traceback" not in err, err
    documents = project.documents()
    assert documents["processing"] == 0
    assert documents["pending"] == 4


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_worker_gives_its_claims_back_at_once(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Before, `worker` waited up to 30 s for the batch its model was busy with before it
    gave the claims back: longer than a container's stop grace (10 s in Docker), after which
    SIGKILL left the documents ``processing`` until their lease expired (600 s)."""
    project = SlowProject(tmp_path)
    returncode, err, took = project.interrupt("worker", signum)
    assert took < STOP_BOUND_S, f"the worker took {took:.1f}s to stop"
    assert returncode == 0, err
    assert "gave back 4 claimed documents" in err, err
    assert "Traceback" not in err, err
    documents = project.documents()
    assert documents["processing"] == 0
    assert documents["pending"] == 4
