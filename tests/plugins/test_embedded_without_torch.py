"""Provider ``embedded`` where torch is not installed (the ``embedded`` extra without the CPU
torch the README's install section puts first): the first use fails with the install line,
not with an import error from deep inside sentence-transformers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The CLI in a process where ``import torch`` fails as on a machine without it.
WITHOUT_TORCH = """
import sys


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoTorch())
from vancetope_rag.cli import main

sys.argv[0] = "vancetope-rag"
main()
"""


def test_embedded_without_torch_names_the_install_line(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "vacation.md").write_text("Every employee gets 28 days of paid vacation.")
    base = ["--store", f"sqlite:///{tmp_path / 'rag.db'}", "--tenant", "t", "--project", "p"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_TORCH, *base, *args],
            env={**os.environ, "VANCETOPE_RAG_EMBEDDED_BACKEND": "torch"},
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert run("settings", "set", "ai.embedding.provider", "embedded").returncode == 0
    assert run("import", str(docs)).returncode == 0
    index = run("index")
    assert index.returncode == 1, index.stderr
    assert "error: " in index.stderr and "Traceback" not in index.stderr, index.stderr
    assert "torch is not installed" in index.stderr, index.stderr
    assert "pip install torch==2.13.0" in index.stderr, index.stderr
    assert "pip install 'vancetope-rag[embedded]'" in index.stderr, index.stderr
