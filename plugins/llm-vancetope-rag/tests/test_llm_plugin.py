"""The llm plugin in the real host: the ``llm`` CLI (a subprocess, as users run it) and llm's
Python API, with ``llm-echo`` as the model (it answers with the prompt and system prompt it
got) and ``LLM_USER_PATH`` in a temporary directory.

The project's store uses the ``hashing`` provider (lexical, instant); the embedding model test
loads the real embedded model.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import llm
import pytest
from click.testing import CliRunner
from llm_vancetope_rag.host import close_apps

from vancetope_rag import EmbeddingSettings, EngineConfig, RagApp
from vancetope_rag.cli import cli

TENANT, PROJECT = "acme", "handbook"
VACATION_Q = "How many vacation days do employees get per year?"
CAFETERIA_Q = "When does the cafeteria open in the morning?"
DOCS = {
    "vacation.md": "Employees get 30 vacation days per year.",
    "cafeteria.md": "The cafeteria opens at eight in the morning.",
}
PLUGINS = "llm-echo,llm-vancetope-rag"


def _vancetope(store: str, *args: str) -> str:
    base = ["--store", store, "--tenant", TENANT, "--project", PROJECT]
    result = CliRunner().invoke(cli, [*base, *args])
    assert result.exit_code == 0, result.output + result.stderr
    return result.stdout


@pytest.fixture(autouse=True)
def _plugin_installed() -> None:
    try:
        metadata.distribution("llm-vancetope-rag")
    except metadata.PackageNotFoundError:  # a test that cannot reach the host must not pass
        pytest.fail("the plugin is not installed: pip install -e plugins/llm-vancetope-rag")


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store whose project has both documents indexed and AutoInject ON (tenant scope)."""
    uri = f"sqlite:///{tmp_path / 'rag.db'}"
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    _vancetope(uri, "settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant")
    _vancetope(uri, "settings", "set", "rag.autoInject.enabled", "ON", "--scope", "tenant")
    _vancetope(uri, "import", str(root))
    _vancetope(uri, "index")
    return uri


@pytest.fixture
def env(tmp_path: Path, store: str) -> dict[str, str]:
    """The environment of an llm run: only llm-echo and this plugin load; our code (the
    worktree's ``src``, as PYTHONPATH gives it) is what runs."""
    return {
        **os.environ,
        "LLM_USER_PATH": str(tmp_path / "llm"),
        "LLM_LOAD_PLUGINS": PLUGINS,
        "VANCETOPE_RAG_STORE": store,
        "VANCETOPE_RAG_TENANT": TENANT,
        "VANCETOPE_RAG_PROJECT": PROJECT,
    }


def run_llm(
    env: dict[str, str], *args: str, stdin: str | None = None, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "llm", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def pre_turn_block(store: str, question: str) -> str:
    """What ``pre_turn`` gives the turn, as one system prompt (llm joins system parts so)."""
    with RagApp.open(EngineConfig(store=store)) as app:
        return "\n\n".join(app.pre_turn(TENANT, PROJECT, [question]))


def echoed(stdout: str) -> list[dict[str, object]]:
    """Every JSON object llm-echo printed (a chat prints one per turn after its '> ')."""
    decoder = json.JSONDecoder()
    found, i = [], 0
    while (start := stdout.find("{", i)) != -1:
        obj, i = decoder.raw_decode(stdout, start)
        found.append(obj)
    return found


# -- (a) --sf rag:QUESTION -----------------------------------------------------------------


def test_system_fragment_is_exactly_the_pre_turn_block(env: dict[str, str], store: str) -> None:
    block = pre_turn_block(store, VACATION_Q)
    assert "documents/vacation.md" in block and "cafeteria" not in block
    out = run_llm(env, "-m", "echo", "--sf", f"rag:{VACATION_Q}", "hi").stdout
    [answer] = echoed(out)
    assert answer["system"] == block
    assert answer["prompt"] == "hi"


def test_fragment_follows_autoinject_off(env: dict[str, str], store: str) -> None:
    _vancetope(store, "settings", "set", "rag.autoInject.enabled", "OFF", "--scope", "project")
    assert pre_turn_block(store, VACATION_Q) == ""
    [answer] = echoed(run_llm(env, "-m", "echo", "--sf", f"rag:{VACATION_Q}", "hi").stdout)
    assert answer["system"] == ""


def test_bad_tenant_is_a_clear_error(env: dict[str, str]) -> None:
    env = {**env, "VANCETOPE_RAG_TENANT": "a/b"}
    proc = run_llm(env, "-m", "echo", "--sf", f"rag:{VACATION_Q}", "hi", ok=False)
    assert proc.returncode != 0
    assert "tenant id" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_llm(env, "-m", "rag/echo", VACATION_Q, ok=False)
    assert proc.returncode != 0
    assert "vancetope-rag:" in proc.stderr and "tenant id" in proc.stderr


def test_mistyped_project_is_named_with_a_suggestion(env: dict[str, str]) -> None:
    """A misspelt project gave every turn an empty block and no word."""
    env = {**env, "VANCETOPE_RAG_PROJECT": "handbok"}
    proc = run_llm(env, "-m", "echo", "--sf", f"rag:{VACATION_Q}", "hi", ok=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no project 'handbok'" in proc.stderr and "did you mean handbook?" in proc.stderr
    proc = run_llm(env, "-m", "rag/echo", VACATION_Q, ok=False)
    assert proc.returncode != 0
    assert "vancetope-rag: no project 'handbok'" in proc.stderr
    assert "did you mean handbook?" in proc.stderr


# -- (b) rag/<model> -----------------------------------------------------------------------


def test_wrapper_puts_the_block_after_the_system_prompt(env: dict[str, str], store: str) -> None:
    out = run_llm(env, "-m", "rag/echo", "-s", "Be brief.", VACATION_Q).stdout
    [answer] = echoed(out)
    assert answer["system"] == "Be brief.\n\n" + pre_turn_block(store, VACATION_Q)
    assert answer["prompt"] == VACATION_Q


def test_wrapper_retrieves_on_every_chat_turn(env: dict[str, str], store: str) -> None:
    proc = run_llm(env, "chat", "-m", "rag/echo", stdin=f"{VACATION_Q}\n{CAFETERIA_Q}\nquit\n")
    first, second = echoed(proc.stdout)
    assert first["system"] == pre_turn_block(store, VACATION_Q)
    # the second turn has its own block, not the first one's again
    assert second["system"] == pre_turn_block(store, CAFETERIA_Q)
    assert "cafeteria.md" in str(second["system"])
    assert "vacation.md" not in str(second["system"])
    assert second["previous"] == [{"prompt": VACATION_Q}]


def test_wrapper_is_listed_for_every_model(env: dict[str, str]) -> None:
    out = run_llm(env, "models").stdout
    assert "rag/echo" in out and "rag/echo-needs-key" in out
    assert "rag/rag/" not in out


@pytest.fixture
def api_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("LLM_USER_PATH", *(k for k in env if k.startswith("VANCETOPE_RAG_"))):
        monkeypatch.setenv(name, env[name])
    yield
    close_apps()


@pytest.mark.usefixtures("api_env")
def test_python_api_conversation_gets_each_turns_block(store: str) -> None:
    model = llm.get_model("rag/echo")
    conversation = model.conversation()
    first = json.loads(conversation.prompt(VACATION_Q, system="Be brief.").text())
    second = json.loads(conversation.prompt(CAFETERIA_Q, system="Be brief.").text())
    assert first["system"] == "Be brief.\n\n" + pre_turn_block(store, VACATION_Q)
    assert second["system"] == "Be brief.\n\n" + pre_turn_block(store, CAFETERIA_Q)


@pytest.mark.usefixtures("api_env")
def test_python_api_async_model(store: str) -> None:
    async def ask() -> str:
        return await llm.get_async_model("rag/echo").prompt(VACATION_Q).text()

    assert json.loads(asyncio.run(ask()))["system"] == pre_turn_block(store, VACATION_Q)


@pytest.mark.usefixtures("api_env")
def test_wrapper_answers_to_the_models_aliases(tmp_path: Path) -> None:
    (tmp_path / "llm").mkdir(exist_ok=True)
    (tmp_path / "llm" / "aliases.json").write_text(json.dumps({"e": "echo"}))
    assert llm.get_model("rag/e").model_id == "rag/echo"


@pytest.mark.usefixtures("api_env")
def test_key_model_gets_llms_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_ECHO_NEEDS_KEY_KEY", "k-123")
    answer = json.loads(llm.get_model("rag/echo-needs-key").prompt(VACATION_Q).text())
    assert answer["key"] == "k-123"
    assert "vacation.md" in answer["system"]


# -- (c) llm rag status | import | index | query --------------------------------------------


@pytest.mark.slow  # 11-20 s of a core: `make test-all`
def test_rag_commands_run_our_cli(env: dict[str, str], tmp_path: Path) -> None:
    env = {**env, "VANCETOPE_RAG_PROJECT": "other"}
    root = tmp_path / "more"
    root.mkdir()
    (root / "parking.md").write_text("Parking permits are issued at the front desk.")
    imported = json.loads(run_llm(env, "rag", "import", str(root), "--json").stdout)
    assert imported["created"] == 1
    assert "1 documents" in run_llm(env, "rag", "index").stdout
    assert "indexed 1" in run_llm(env, "rag", "status").stdout
    hits = json.loads(run_llm(env, "rag", "query", "parking permits", "--json").stdout)
    assert [h["path"] for h in hits] == ["documents/parking.md"]  # not the handbook project's
    proc = run_llm(env, "rag", "settings", ok=False)
    assert proc.returncode != 0 and "No such command" in proc.stderr


# -- (d) the rag_* tools ---------------------------------------------------------------------


@pytest.mark.usefixtures("api_env")
def test_tools_have_our_names_and_schemas() -> None:
    from vancetope_rag.tools import TOOL_NAMES
    from vancetope_rag.tools.schemas import TOOL_SPECS

    tools = llm.get_tools()
    for name in TOOL_NAMES:
        tool = tools[name]
        assert isinstance(tool, llm.Tool)
        schema, description = TOOL_SPECS[name]
        assert tool.description == description
        assert tool.input_schema == schema.model_json_schema()


def test_tool_call_runs_in_the_env_project(env: dict[str, str]) -> None:
    call = {"name": "rag_query", "arguments": {"ragId": "_documents", "query": "vacation days"}}
    prompt = json.dumps({"prompt": "search", "tool_calls": [call]})
    out = run_llm(env, "-m", "echo", "-T", "rag_query", prompt).stdout
    [result] = echoed(out)[-1]["tool_results"]  # type: ignore[misc]
    hits = json.loads(result["output"])["hits"]
    assert hits[0]["path"] == "documents/vacation.md"
    # another tenant has no such project: the tool finds nothing of this one's
    other = run_llm(
        {**env, "VANCETOPE_RAG_TENANT": "other"}, "-m", "echo", "-T", "rag_query", prompt
    )
    [result] = echoed(other.stdout)[-1]["tool_results"]  # type: ignore[misc]
    assert "vacation" not in result["output"]
    assert "error" in json.loads(result["output"])


# -- (e) the embedded model for llm embed ----------------------------------------------------


@pytest.mark.usefixtures("api_env")
def test_embedding_model_gives_our_vectors(store: str) -> None:
    text = "Employees get 30 vacation days per year."
    vector = llm.get_embedding_model("vancetope-rag-embedded").embed(text)
    with RagApp.open(EngineConfig(store=store)) as app:
        ours = app.embeddings.load(EmbeddingSettings(provider="embedded"))
        expected = ours.embed_model.get_text_embedding(text)
    assert len(vector) == 384
    assert vector == pytest.approx(expected, abs=1e-6)


# -- load cost -------------------------------------------------------------------------------

HEAVY = ("torch", "transformers", "sentence_transformers", "llama_index")


def test_loading_the_plugin_imports_no_model_stack(env: dict[str, str]) -> None:
    """llm imports every plugin on every command, and calls the registering hooks of models,
    fragments, embeddings and commands: none of that may import torch or LlamaIndex."""
    code = (
        "import sys, llm, llm.cli\n"
        "llm.get_models(); llm.get_fragment_loaders(); llm.get_embedding_models()\n"
        "assert 'llm_vancetope_rag' in sys.modules, 'plugin not loaded'\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert re.search(r"\brag\b", run_llm(env, "--help").stdout)
