"""The progress bars of `index` and `reindex --rebuild --wait` on a real terminal (a pty):
their position is the documents done, beside it done, failed and waiting as three numbers.

Before, the `index` bar moved on every failed attempt (85 % while 30 of 400 were done) and
both bars showed click's own ETA, timed from bar updates ("3% 00:30:23" for a 20 s rebuild).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_site import install_provider

# ``picky`` embeds like ``hashing`` but rejects any batch holding the word POISON (the
# document's own failure, retried until it fails for good).
PICKY = """
class Embedding(HashingEmbedding):
    def _get_text_embeddings(self, texts):
        if any("POISON" in t for t in texts):
            raise RuntimeError("the provider rejected this input")
        return [self._vector(t) for t in texts]
"""

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        self.env = {
            **os.environ,
            **install_provider(tmp_path / "site", "picky", PICKY),
            "VANCETOPE_RAG_MAX_ATTEMPTS": "3",
            "VANCETOPE_RAG_RETRY_BACKOFF_S": "0",
            "VANCETOPE_RAG_INDEXER_BATCH_SIZE": "4",
            "COLUMNS": "200",
        }
        self.base = [sys.executable, "-m", "vancetope_rag.cli"]
        self.base += ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t"]
        self.base += ["--project", "p"]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *args], env=self.env, capture_output=True, text=True, timeout=120
        )
        return done

    def on_terminal(self, *args: str) -> tuple[int, list[str]]:
        """Run with stderr on a pty (a person watching); the bar's renders, as text."""
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [*self.base, *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
        )
        os.close(slave)
        chunks: list[bytes] = []
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            assert ready, "no output for 120 s"
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert proc.stdout is not None
        proc.stdout.read()
        code = proc.wait(timeout=60)
        text = ANSI.sub("", b"".join(chunks).decode(errors="replace"))
        renders = [r.strip() for r in re.split(r"[\r\n]", text) if r.strip()]
        return code, renders


LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


def _bar(renders: list[str], label: str) -> list[str]:
    """The bar's renders, without the log lines written on the same terminal line."""
    return [LOG_LINE.split(r)[0].strip() for r in renders if r.startswith(label)]


def _percent(render: str) -> int:
    found = re.search(r"(\d+)%", render)
    assert found, render
    return int(found.group(1))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cli = Cli(tmp_path)
    assert cli.run("settings", "set", "ai.embedding.provider", "picky", "--scope", "tenant")
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"good{i}.md").write_text(f"a good note number {i} about topic {i}")
    for i in range(4):
        (docs / f"bad{i}.md").write_text(f"a note that holds POISON number {i}")
    imported = cli.run("import", str(docs))
    assert imported.returncode == 0, imported.stderr
    return cli


@pytest.mark.timeout(240)
def test_the_index_bar_counts_documents_done_not_failed_attempts(cli: Cli) -> None:
    code, renders = cli.on_terminal("index", "--until-idle")
    assert code == 1, renders  # four documents failed for good
    bar = _bar(renders, "indexing")
    assert bar, renders
    # 4 documents failed 3 times each: 12 failed attempts, never progress
    assert max(_percent(r) for r in bar) == 60, bar
    assert "6 done, 4 failed, 0 waiting" in bar[-1], bar
    assert not any(re.search(r"\d\d:\d\d:\d\d", r) for r in bar), bar  # no click ETA


@pytest.mark.timeout(240)
def test_the_rebuild_bar_shows_the_stores_numbers_and_no_clock_eta(cli: Cli) -> None:
    assert cli.run("index", "--until-idle").returncode == 1
    model = cli.run("settings", "set", "ai.embedding.model", "picky-32", "--scope", "tenant")
    assert model.returncode == 0, model.stderr
    code, renders = cli.on_terminal("reindex", "--rebuild", "--wait")
    assert code == 1, renders  # the new model fails 4 of 10 too: the rebuild fails
    bar = _bar(renders, "rebuild picky:picky-64 -> picky:picky-32")
    assert bar, renders
    assert not any(re.search(r"\d\d:\d\d:\d\d", r) for r in bar), bar  # no click ETA
    for render in bar:
        counts = re.search(r"(\d+) done, (\d+) failed, (\d+) waiting", render)
        assert counts, render
        done, failed, waiting = map(int, counts.groups())
        assert done + failed + waiting == 10, render
        assert _percent(render) == done * 10, render  # failed is not progress
    assert re.search(r"[1-9] failed", bar[-1]), bar
    assert "left" not in bar[-1], bar  # the rebuild ended: no ETA
