"""Fixtures of the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from vancetope_rag.cli import cli


@pytest.fixture
def run(tmp_path: Path):
    """``vancetope-rag --store <this test's SQLite file> --tenant t --project p ARGS``; with
    ``ok`` (the default) the command must succeed."""
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> Result:
        result = runner.invoke(cli, ["--store", store, "--tenant", "t", "--project", "p", *args])
        if ok:
            assert result.exit_code == 0, result.output + result.stderr
        return result

    return invoke
