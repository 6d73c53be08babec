from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import vancetope_rag_eml
from click.testing import CliRunner

import vancetope_rag
from vancetope_rag import EngineConfig, ExtractionError, RagApp, extract_text, get_plugin_manager
from vancetope_rag.cli import cli

MAIL = b"""From: Ada <ada@example.org>
To: team@example.org
Subject: Release freeze
Date: Mon, 02 Mar 2026 10:00:00 +0000
Content-Type: text/plain; charset=utf-8

The release freeze starts Thursday at noon.
"""


def test_entry_point_loads_the_plugin() -> None:
    pm = get_plugin_manager(allowed=["eml"])
    assert pm.is_registered(vancetope_rag_eml)


def test_plugin_can_be_excluded() -> None:
    pm = get_plugin_manager(allowed=[])
    assert not pm.is_registered(vancetope_rag_eml)


def test_app_extracts_eml_through_the_plugin(tmp_path: Path) -> None:
    app = RagApp.open(EngineConfig(store=f"sqlite:///{tmp_path / 'r.db'}", plugins="eml"))
    try:
        text = extract_text(MAIL, path="mail/freeze.eml", registry=app.extractors).text
    finally:
        app.close()
    assert "Subject: Release freeze" in text
    assert "freeze starts Thursday" in text


def test_without_the_plugin_eml_is_unsupported(tmp_path: Path) -> None:
    app = RagApp.open(EngineConfig(store=f"sqlite:///{tmp_path / 'r.db'}", plugins=""))
    try:
        with pytest.raises(ExtractionError):
            extract_text(b"\x00\x01binary", path="x.eml", registry=app.extractors)
    finally:
        app.close()


HTML_MAIL = b"""From: Ada <ada@example.org>
Subject: Menu
Content-Type: text/html; charset=utf-8

<html><head><style>p { color: red }</style></head>
<body><p>Soup &amp; bread</p><p>Cake</p></body></html>
"""


def test_html_only_mail_gives_the_visible_text() -> None:
    text = vancetope_rag_eml.extract_eml(HTML_MAIL, "menu.eml")
    assert text == "From: Ada <ada@example.org>\nSubject: Menu\n\nSoup & bread\nCake"


def test_plugin_uses_only_the_public_api() -> None:
    tree = ast.parse(Path(vancetope_rag_eml.__file__).read_text(encoding="utf-8"))
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vancetope_rag"):
            assert node.module == "vancetope_rag", f"imports a private module: {node.module}"
            used |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("vancetope_rag.") for a in node.names)
    assert "html_to_text" in used
    assert used <= set(vancetope_rag.__all__)


def test_broken_mail_is_a_clear_error() -> None:
    with pytest.raises(ExtractionError, match="no e-mail headers"):
        vancetope_rag_eml.extract_eml(b"", "empty.eml")


def test_cli_import_extracts_eml_through_the_plugin(tmp_path: Path) -> None:
    """Regression (the import's own registry): `import` extracted with a module-level
    registry plugins never reach, so it skipped `.eml` files as unsupported although the
    app's registry knew them."""
    root = tmp_path / "mail"
    root.mkdir()
    (root / "freeze.eml").write_bytes(MAIL)
    (root / "notes.md").write_text("Lunch is at one.")
    runner = CliRunner()
    base = ["--store", f"sqlite:///{tmp_path / 'r.db'}", "--tenant", "t", "--project", "p"]

    def run(*args: str) -> str:
        result = runner.invoke(cli, [*base, *args], env={"VANCETOPE_RAG_PLUGINS": "eml"})
        assert result.exit_code == 0, result.output + result.stderr
        return result.stdout

    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    imported = json.loads(run("import", str(root), "--json"))
    assert imported["skippedFiles"] == []
    assert imported["created"] == 2
    run("index")
    hits = json.loads(run("query", "release freeze Thursday", "--json"))
    assert hits[0]["path"] == "documents/freeze.eml"
    assert "Subject: Release freeze" in hits[0]["text"]
    assert "freeze starts Thursday" in hits[0]["text"]
