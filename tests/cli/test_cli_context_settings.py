"""The CLI's ``context`` and ``settings`` commands against a real SQLite store."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fakes import DOCS, P, T, call_tool
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.config import EngineConfig

SECRET = "sk-live-DO-NOT-PRINT-4b1d9e"
QUESTION = "zebra stripes and savanna grass"


class Cli:
    """Runs ``vancetope-rag --store … --tenant t1 --project p1 ARGS``."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.runner = CliRunner()

    def __call__(self, *args: str, ok: bool = True) -> Result:
        base = ["--store", self.store, "--tenant", T, "--project", P]
        result = self.runner.invoke(cli, [*base, *args], catch_exceptions=False)
        if ok:
            assert result.exit_code == 0, (args, result.output)
        return result


@pytest.fixture
def run(tmp_path: Path) -> Cli:
    run = Cli(f"sqlite:///{tmp_path / 'cli.db'}")
    docs = tmp_path / "docs"
    docs.mkdir()
    for path, text in DOCS.items():
        (docs / Path(path).name).write_text(text)
    run("settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    run("settings", "set", "rag.minScore", "0.05", "--scope", "tenant")
    assert "3 created" in run("import", str(docs)).stdout
    assert "indexed 3 documents" in run("index").stdout
    return run


def _recipe(tmp_path: Path, body: str, name: str = "recipe.yaml") -> str:
    path = tmp_path / name
    path.write_text(f"name: test\nparams:\n  rag:\n{body}")
    return str(path)


# -- context -----------------------------------------------------------------------------


def test_context_with_recipe_on(run: Cli, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "    autoInject: ON\n    topK: 2\n")
    out = run("context", QUESTION, "--recipe", recipe).stdout
    assert out.startswith("<rag-context>\nTop relevant excerpts")
    assert "- [S1] documents/zebra.md (score" in out
    assert out.count("- [S") <= 2
    assert out.rstrip().endswith("</rag-context>")


@pytest.mark.parametrize(
    ("recipe_line", "project", "tenant", "injected", "decider"),
    [
        ('autoInject: "OFF"', "ON", "ON", False, "recipe"),
        ("autoInject: off", "ON", None, False, "recipe"),
        ("autoInject: true", "OFF", "OFF", True, "recipe"),
        ("autoInject: AUTO", "ON", "OFF", True, "project"),
        ("autoInject: AUTO", "AUTO", "ON", False, "default"),
        ("autoInject: AUTO", None, "ON", True, "tenant"),
        ("autoInject: AUTO", None, None, False, "default"),
        ("topK: 3", None, "false", False, "tenant"),
    ],
)
def test_context_resolution(
    run: Cli,
    tmp_path: Path,
    recipe_line: str,
    project: str | None,
    tenant: str | None,
    injected: bool,
    decider: str,
) -> None:
    for scope, value in (("project", project), ("tenant", tenant)):
        args = [value] if value is not None else ["--unset"]
        run("settings", "set", "rag.autoInject.enabled", *args, "--scope", scope)
    recipe = _recipe(tmp_path, f"    {recipe_line}\n")
    result = run("context", QUESTION, "--recipe", recipe, "--explain")
    assert ("<rag-context>" in result.stdout) is injected
    assert f"decided by {decider}" in result.stderr
    assert f"autoInject {'on' if injected else 'off'}" in result.stderr


def test_context_without_recipe_follows_settings(run: Cli) -> None:
    assert run("context", QUESTION).stdout == ""
    run("settings", "set", "rag.autoInject.enabled", "ON", "--scope", "tenant")
    assert "<rag-context>" in run("context", QUESTION).stdout


def test_context_recipe_template_file(run: Cli, tmp_path: Path) -> None:
    (tmp_path / "block.j2").write_text(
        "<rag-context>\n{% for s in sources %}{{ s.label }}={{ s.path }}\n{% endfor %}"
        "</rag-context>"
    )
    recipe = _recipe(tmp_path, "    autoInject: ON\n    topK: 1\n    templateFile: block.j2\n")
    assert run("context", QUESTION, "--recipe", recipe).stdout == (
        "<rag-context>\nS1=documents/zebra.md\n</rag-context>\n"
    )


def test_context_bad_recipe_is_a_clean_error(run: Cli, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "    autoInject: sometimes\n")
    result = run("context", QUESTION, "--recipe", recipe, ok=False)
    assert result.exit_code == 1
    assert "autoInject must be one of ON, OFF, AUTO" in result.stderr
    missing = run("context", QUESTION, "--recipe", str(tmp_path / "nope.yaml"), ok=False)
    assert "recipe file not found" in missing.stderr


def test_context_takes_a_bundled_recipe_by_name(run: Cli) -> None:
    """``--recipe docs-assistant``: the recipe shipped in the package (autoInject ON) makes a
    block the cascade alone (AUTO, default OFF) would not; an unknown name lists the names."""
    assert run("context", QUESTION).stdout == ""
    out = run("context", QUESTION, "--recipe", "docs-assistant").stdout
    assert out.startswith("<rag-context>") and "documents/zebra.md" in out
    unknown = run("context", QUESTION, "--recipe", "docs-assistent", ok=False)
    assert unknown.exit_code == 1
    assert "no bundled recipe of that name" in unknown.stderr
    assert "docs-assistant, general-assistant" in unknown.stderr


# -- settings ----------------------------------------------------------------------------


def test_settings_get_and_set_per_scope(run: Cli) -> None:
    assert run("settings", "set", "rag.topK", "3", "--scope", "project").stdout == (
        "rag.topK = 3 (project)\n"
    )
    run("settings", "set", "rag.topK", "7", "--scope", "tenant")
    # each value says where it comes from
    got = run("settings", "get", "rag.topK", "--scope", "project").stdout
    assert got == "rag.topK = 3 (project)\n"
    got = run("settings", "get", "rag.topK", "--scope", "tenant").stdout
    assert got == "rag.topK = 7 (tenant)\n"
    assert run("settings", "get", "rag.topK").stdout == "rag.topK = 3 (project)\n"  # effective
    run("settings", "set", "rag.topK", "--unset", "--scope", "project")
    assert run("settings", "get", "rag.topK").stdout == "rag.topK = 7 (tenant)\n"

    run("settings", "set", "rag.autoInject.enabled", "true", "--scope", "project")
    out = run("settings", "get", "rag.autoInject.enabled", "--scope", "project").stdout
    assert out == 'rag.autoInject.enabled = "ON" (project)\n'  # legacy true is stored as ON

    everything = run("settings", "get").stdout.splitlines()
    assert [line.split(" = ")[0] for line in everything] == sorted(
        line.split(" = ")[0] for line in everything
    )
    assert 'ai.embedding.provider = "hashing" (tenant)' in everything


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rag.topK", "0", "rag.topK must be"),
        ("rag.minScore", "high", "rag.minScore must be"),
        ("rag.autoInject.enabled", "maybe", "rag.autoInject.enabled must be"),
        ("no.such.key", "1", "unknown setting 'no.such.key'"),
        # the close key first, before the list of every key
        ("rag.topk", "3", "unknown setting 'rag.topk'; did you mean rag.topK? known settings"),
    ],
)
def test_settings_set_rejects_bad_values(run: Cli, key: str, value: str, message: str) -> None:
    result = run("settings", "set", key, value, ok=False)
    assert result.exit_code == 1 and message in result.stderr


def test_api_key_is_never_shown(run: Cli, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    outputs: list[str] = []
    for scope in ("tenant", "project"):
        result = run("settings", "set", "ai.embedding.apiKey", SECRET, "--scope", scope)
        assert result.stdout == f'ai.embedding.apiKey = "********" ({scope})\n'
        outputs.append(result.output)
    for scope in ("tenant", "project", "effective"):
        one = run("settings", "get", "ai.embedding.apiKey", "--scope", scope)
        source = "project" if scope == "effective" else scope
        assert one.stdout == f'ai.embedding.apiKey = "********" ({source})\n'
        outputs += [one.output, run("settings", "get", "--scope", scope).output]

    # drive code paths that handle the key: an openai tenant whose server refuses connections
    # (loopback discard port) and whose model needs a dimension probe, so every path fails
    run("settings", "set", "ai.embedding.provider", "openai", "--scope", "tenant")
    run("settings", "set", "ai.embedding.model", "probe-needed-model", "--scope", "tenant")
    run("settings", "set", "ai.embedding.baseUrl", "http://127.0.0.1:9/v1", "--scope", "tenant")
    for args in (["-vv", "reindex", "--rebuild"], ["-vv", "index"], ["-vv", "status", "--json"]):
        outputs.append(run(*args, ok=False).output)
    outputs.append(run("-vv", "context", QUESTION, "--explain", ok=False).output)

    config = EngineConfig(store=run.store, node_id="test-node")
    with RagApp.open(config) as app:
        assert app.settings.get(T, P, "ai.embedding.apiKey") == SECRET  # it is set
        app.settings.set(T, None, "rag.autoInject.enabled", "ON")
        tools = app.tools(T, P)
        results = [
            call_tool(tools, "rag_create", name="fresh"),
            call_tool(tools, "rag_list"),
            call_tool(tools, "rag_query", ragId="_documents", query="zebra"),
            call_tool(tools, "rag_add_text", ragId="_documents", text="more"),
        ]
        outputs += [str(r) for r in results]
        outputs += app.pre_turn(T, P, [QUESTION])
        app.bring(T, "p-new")  # best effort: warns that the default RAG was not created
        assert app.settings.get_public(T, P, "ai.embedding.apiKey") == "********"

    assert any("default RAG not created" in r.getMessage() for r in caplog.records)
    for text in [*outputs, caplog.text, *(str(r.args) for r in caplog.records)]:
        assert SECRET not in text
