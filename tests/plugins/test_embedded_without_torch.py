"""Provider ``embedded`` where torch is not installed (the ``embedded`` extra without the CPU
torch the README's install section puts first): the first use fails with the install line,
not with an import error from deep inside sentence-transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: CLI commands (one per line of stdin, as JSON argument lists, after a first line naming the
#: modules to hide) in one process where importing those fails as on a machine without them;
#: prints each command's exit code.
WITHOUT_TORCH = """
import json
import sys


BLOCKED = tuple(json.loads(sys.stdin.readline()))


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
from vancetope_rag.cli import cli

for line in sys.stdin:
    try:
        cli.main(json.loads(line), prog_name="vancetope-rag")
    except SystemExit as exc:
        print("exit", exc.code or 0, flush=True)
    print("--- end of command", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize(
    "hidden",
    [
        ["torch"],  # the extra installed without the CPU torch
        ["torch", "llama_index.embeddings.huggingface"],  # neither: a plain install of the wheel
    ],
)
def test_embedded_without_torch_names_the_install_line(tmp_path: Path, hidden: list[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vacation.md").write_text("Every employee gets 28 days of paid vacation.")
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]

    commands = [
        [*base, "settings", "set", "ai.embedding.provider", "embedded"],
        [*base, "import", str(docs)],
        [*base, "index"],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH],
        input="".join(json.dumps(c) + "\n" for c in [hidden, *commands]),
        env={**os.environ, "VANCETOPE_RAG_EMBEDDED_BACKEND": "torch"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    codes = [line for line in proc.stdout.splitlines() if line.startswith("exit ")]
    assert codes == ["exit 0", "exit 0", "exit 1"], (proc.stdout, proc.stderr)
    index = proc.stderr.split("--- end of command")[2]
    assert "error: " in index and "Traceback" not in proc.stderr, proc.stderr
    assert "torch is not installed" in index, index
    assert "pip install torch==2.13.0" in index, index
    assert "pip install 'vancetope-rag[embedded]'" in index, index
