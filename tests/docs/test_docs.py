"""The docs build check: every Python snippet of ``docs/*.md`` and ``README.md`` runs, and the
generated parts (configuration, REST API) match the code.

Snippets of one page run in order in one namespace (a page reads as one session), in a fresh
folder holding a link to the repository's ``examples/`` (recipes load by name, from the
package, as from an installed wheel). A snippet that needs a server or a key is preceded by
a marker comment and skipped with that reason:

    <!-- requires: atlas -->        a MongoDB Atlas cluster (VANCETOPE_RAG_TEST_MONGODB_URI)
    <!-- requires: openai -->       an OpenAI API key
    <!-- requires: gemini -->       a Gemini API key

Every app a page opens is closed at its end (``RagApp.close``), so no background thread or
store handle outlives the page.

A page a reader will save as a file and run (its snippets are one program) says so with

    <!-- docs-test: run as a script -->

and its snippets also run that way: written to one file and run by a fresh interpreter
(``python page.py``), where what they define lives in ``__main__``, as in the reader's script.

The shell snippets (``sh``, ``bash``, ``shell``, ``console``) of ``docs/llm-plugin.md`` run
too, in order, by bash, as one session (see :func:`test_llm_plugin_page_runs`). They take the
same ``requires`` marker (``install`` for a ``pip install``: the tests' environment has the
packages), and a snippet that reads what the reader types says so:

    <!-- stdin: "first line" "second line" quit -->   the lines typed (shell words), then EOF
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vancetope_rag.app import RagApp

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

#: What a marker may name, and why such a snippet cannot run here.
REQUIREMENTS = {
    "atlas": "needs a MongoDB Atlas cluster",
    "mongodb": "needs a MongoDB server",
    "openai": "needs an OpenAI API key",
    "gemini": "needs a Gemini API key",
    "install": "installs packages (the tests' environment has them already)",
}

_FENCE = re.compile(
    r"(?:<!--\s*requires:\s*(?P<needs>[\w, -]+?)\s*-->\s*\n)?"
    r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    code: str
    needs: tuple[str, ...]


def _code_lines(m: re.Match[str]) -> list[str]:
    """A fenced block's lines, without the fence's indent."""
    indent = m["indent"]
    return [
        line[len(indent) :] if line.startswith(indent) else line
        for line in m["code"].splitlines(keepends=True)
    ]


def _needs(value: str | None) -> tuple[str, ...]:
    """A ``requires`` marker's names."""
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


def _line_of(text: str, m: re.Match[str]) -> int:
    return text[: m.start("code")].count("\n") + 1


def snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    return [
        Snippet(page, _line_of(text, m), "".join(_code_lines(m)), _needs(m["needs"]))
        for m in _FENCE.finditer(text)
    ]


def _pages_with_snippets() -> list[Path]:
    return [p for p in PAGES if snippets(p)]


@pytest.fixture
def page_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):  # the snippets say what they configure
        if key.startswith(("VANCETOPE_RAG_", "RAG_")):
            monkeypatch.delenv(key)
    # Not a snippet's concern: no ONNX export into the user's cache from a docs run.
    monkeypatch.setenv("VANCETOPE_RAG_EMBEDDED_BACKEND", "torch")
    yield tmp_path


def test_markers_name_known_requirements() -> None:
    for page in PAGES:
        for snippet in [*snippets(page), *shell_snippets(page)]:
            unknown = set(snippet.needs) - set(REQUIREMENTS)
            assert not unknown, f"{page.name}:{snippet.line}: unknown requirement {unknown}"


def test_the_pages_have_snippets() -> None:
    names = {p.name for p in _pages_with_snippets()}
    expected = {"getting-started.md", "llamaindex.md", "configuration.md", "recipes.md"}
    assert expected | {"rest-api.md", "plugin-hooks.md", "README.md"} <= names


@pytest.mark.parametrize("page", _pages_with_snippets(), ids=lambda p: p.name)
def test_every_snippet_runs(page: Path, page_dir: Path) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    skipped: list[str] = []
    try:
        for snippet in snippets(page):
            if snippet.needs:
                skipped.append(
                    f"line {snippet.line}: "
                    + "; ".join(REQUIREMENTS[n] for n in snippet.needs if n in REQUIREMENTS)
                )
                continue
            code = compile(snippet.code, f"{page.name}:{snippet.line}", "exec")
            try:
                exec(code, namespace)
            except Exception as exc:
                raise AssertionError(
                    f"{page.name}, snippet at line {snippet.line} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
    finally:
        for value in list(namespace.values()):
            if isinstance(value, RagApp):
                value.close()
    if skipped and len(skipped) == len(snippets(page)):
        pytest.skip("; ".join(skipped))


#: The marker of a page whose snippets also run as one script (see the module docstring).
SCRIPT_MARKER = "<!-- docs-test: run as a script -->"


def _script_pages() -> list[Path]:
    return [p for p in PAGES if SCRIPT_MARKER in p.read_text(encoding="utf-8")]


def test_the_script_pages_are_marked() -> None:
    assert "extraction.md" in {p.name for p in _script_pages()}


@pytest.mark.parametrize("page", _script_pages(), ids=lambda p: p.name)
def test_script_pages_run_as_scripts(page: Path, page_dir: Path) -> None:
    runnable = [s for s in snippets(page) if not s.needs]
    script = page_dir / f"{page.stem.replace('-', '_')}.py"
    script.write_text("\n\n".join(s.code for s in runnable), encoding="utf-8")
    env = dict(os.environ)  # page_dir took the engine's variables out already
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    run = subprocess.run(
        [sys.executable, script.name],
        cwd=page_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"{page.name} as a script failed:\n{run.stderr[-3000:]}"


def test_pages_that_start_the_indexer_say_when_it_first_runs() -> None:
    """A snippet that starts the background indexer and asks at once gets nothing indexed for
    the first ``indexer_initial_delay_s`` (60 s): the page must say so."""
    for page in PAGES:
        if any("scheduler.start()" in s.code for s in snippets(page)):
            text = page.read_text(encoding="utf-8")
            assert "indexer_initial_delay_s" in text, f"{page.name} starts the indexer"


def _marked() -> list[Snippet]:
    return [s for p in PAGES for s in snippets(p) if s.needs]


@pytest.mark.parametrize("snippet", _marked(), ids=lambda s: f"{s.page.name}:{s.line}")
def test_marked_snippets_compile(snippet: Snippet) -> None:
    """A snippet that cannot run here is still valid Python; the skip says why it did not run."""
    compile(snippet.code, f"{snippet.page.name}:{snippet.line}", "exec")
    pytest.skip("; ".join(REQUIREMENTS[n] for n in snippet.needs))


_SHELL_FENCE = re.compile(
    r"(?P<markers>(?:^[ \t]*<!--[^\n]*-->[ \t]*\n)*)"
    r"^(?P<indent>[ \t]*)```(?P<lang>sh|bash|shell|console)[ \t]*\n(?P<code>.*?)"
    r"^(?P=indent)```[ \t]*$",
    re.M | re.S,
)
_MARKER = re.compile(r"<!--\s*(?P<key>requires|stdin):\s*(?P<value>.*?)\s*-->")


@dataclass(frozen=True)
class ShellSnippet(Snippet):
    #: What the reader types (None: nothing, stdin is empty).
    stdin: str | None


def shell_snippets(page: Path) -> list[ShellSnippet]:
    """The page's shell blocks; a ``console`` block's commands are its ``$ `` lines."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _SHELL_FENCE.finditer(text):
        lines = _code_lines(m)
        if m["lang"] == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        needs: tuple[str, ...] = ()
        stdin = None
        for marker in _MARKER.finditer(m["markers"]):
            if marker["key"] == "requires":
                needs += _needs(marker["value"])
            else:
                stdin = "".join(f"{line}\n" for line in shlex.split(marker["value"]))
        out.append(ShellSnippet(page, _line_of(text, m), "".join(lines), needs, stdin))
    return out


def _run_shell(
    snippet: ShellSnippet, cwd: Path, env: dict[str, str], state: Path
) -> subprocess.CompletedProcess[str]:
    """One snippet in bash, in the session of the ones before it: it starts from the variables
    they exported and the folder they left, and leaves its own for the next."""
    script = (
        "set -e\n"
        f"if [ -f {shlex.quote(str(state))} ]; then . {shlex.quote(str(state))}; fi\n"
        f"{snippet.code}\n"
        "__rc=$?\n"  # an `a && b` line whose `a` failed does not stop `set -e`
        f"{{ export -p; printf 'cd %q\\n' \"$PWD\"; }} > {shlex.quote(str(state))}\n"
        "exit $__rc\n"
    )
    return subprocess.run(
        ["bash", "-c", script, f"{snippet.page.name}:{snippet.line}"],
        cwd=cwd,
        env=env,
        input=snippet.stdin,
        stdin=subprocess.DEVNULL if snippet.stdin is None else None,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _system_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system"]


def test_llm_plugin_page_snippets_parse() -> None:
    """The fast half of :func:`test_llm_plugin_page_runs` (which is slow): each shell snippet
    of the page is valid bash, and the interactive one says what the reader types."""
    blocks = shell_snippets(ROOT / "docs" / "llm-plugin.md")
    assert len(blocks) >= 5
    for snippet in blocks:
        proc = subprocess.run(["bash", "-n"], input=snippet.code, capture_output=True, text=True)
        assert proc.returncode == 0, f"llm-plugin.md:{snippet.line}: {proc.stderr}"
        if "llm chat" in snippet.code:
            assert snippet.stdin is not None and snippet.stdin.endswith("quit\n")


@pytest.mark.slow  # four of its commands load torch and the embedded model: ~45-70 s here
def test_llm_plugin_page_runs(tmp_path: Path) -> None:
    """docs/llm-plugin.md's shell snippets run in order, as written, and the model receives
    what the page says it receives.

    The folder they run in is also ``$HOME`` (the page's store is ``$HOME/rag.db``) and holds
    a link to ``examples/``; llm keeps its files in a temporary ``LLM_USER_PATH``; the
    venv's ``bin`` comes first on PATH (``llm``, ``vancetope-rag``); the embedding is the
    embedded model, on torch, offline. ``gpt-4o-mini`` is OpenAI's model id, answered by a
    loopback server speaking OpenAI's chat-completions format (``OPENAI_BASE_URL``, which
    the ``openai`` SDK under llm reads) that records every request: that record is what the
    model received.
    """
    from chat_upstream import KEY, running_upstream

    page = ROOT / "docs" / "llm-plugin.md"
    blocks = shell_snippets(page)
    home = tmp_path / "home"
    home.mkdir()
    (home / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    user_path = tmp_path / "llm"
    state = tmp_path / "session.sh"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VANCETOPE_RAG_", "RAG_", "LLM_", "OPENAI_"))
    }
    env.update(
        HOME=str(home),
        LLM_USER_PATH=str(user_path),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        PYTHONPATH=os.pathsep.join(
            [
                str(ROOT / "src"),
                str(ROOT / "plugins" / "llm-vancetope-rag" / "src"),
                *filter(None, [env.get("PYTHONPATH")]),
            ]
        ),
        VANCETOPE_RAG_EMBEDDED_BACKEND="torch",  # no ONNX export from a docs run
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OPENAI_API_KEY=KEY,
    )

    def logged_fragments() -> list[str]:
        with sqlite3.connect(user_path / "logs.db") as db:
            return [row[0] for row in db.execute("select content from fragments")]

    outputs: dict[str, str] = {}
    ran: list[str] = []
    started = time.monotonic()
    with running_upstream() as upstream:
        env["OPENAI_BASE_URL"] = upstream.base_url
        for snippet in blocks:
            where = f"{page.name}:{snippet.line}"
            if snippet.needs:
                assert set(snippet.needs) <= {"install"}, f"{where}: only installs are skipped"
                continue
            before = len(upstream.chats)
            t0 = time.monotonic()
            proc = _run_shell(snippet, home, env, state)
            print(f"{where}: {time.monotonic() - t0:.1f} s")
            assert proc.returncode == 0, (
                f"{where} failed ({proc.returncode}):\n{snippet.code}\n"
                f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
            )
            assert "Traceback" not in proc.stderr, f"{where}:\n{proc.stderr[-3000:]}"
            outputs[snippet.code] = proc.stdout
            ran.append(snippet.code)
            received = [r.body or {} for r in upstream.chats[before:]]

            if snippet.code.startswith("llm plugins"):
                assert '"llm-vancetope-rag"' in proc.stdout
            if "llm rag status" in snippet.code:
                assert (home / "rag.db").is_file(), "the page's store is $HOME/rag.db"
                assert "embedded:all-MiniLM-L6-v2" in proc.stdout
                assert "indexed 7" in proc.stdout
            if '--sf "rag:' in snippet.code:
                # the fragment is the block of the question, the only system message
                [body] = received
                assert body["model"] == "gpt-4o-mini"
                [system] = _system_texts(body)
                assert system.startswith("<rag-context>") and system.count("<rag-context>") == 1
                assert "documents/policies/vacation.md" in system
                assert "28 days of paid vacation" in system
                # llm logged the whole block in its fragments table (as the page warns)
                assert any("<rag-context>" in f for f in logged_fragments())
            if "llm chat -m rag/" in snippet.code:
                # one request per typed question, each with its own block, none piled up
                first, second = received
                [system1] = _system_texts(first)
                assert "documents/policies/vacation.md" in system1
                systems2 = _system_texts(second)
                assert "".join(systems2).count("<rag-context>") == 1
                assert "[S1] documents/policies/remote-work.md" in "".join(systems2)
                assert [system1] != systems2
            if snippet.code.startswith("llm logs off"):
                assert "Logging is OFF" in proc.stdout, proc.stdout
    elapsed = time.monotonic() - started

    # every check above met its snippet: the page still has what it promises
    assert any(c.startswith("llm plugins") for c in ran)
    assert any("llm rag status" in c for c in ran)
    assert any('--sf "rag:' in c for c in ran)
    assert any("llm chat -m rag/" in c for c in ran)
    assert any(c.startswith("llm logs off") for c in ran)
    assert len(upstream.chats) == 3, [r.path for r in upstream.received]
    print(f"{len(ran)} snippets of {page.name} ran in {elapsed:.1f} s")


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["configuration.md", "rest-api.md", "proxy.md"])
def test_generated_pages_match_the_code(page: str) -> None:
    gen = _gen_docs()
    current, fresh = gen.generated_pages()[ROOT / "docs" / page]
    assert current == fresh, f"docs/{page} is out of date: run `python scripts/gen_docs.py`"


def test_configuration_page_lists_every_setting_and_variable() -> None:
    from vancetope_rag.config import EngineConfig
    from vancetope_rag.domain.settings.registry import SETTINGS

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for key, spec in SETTINGS.items():
        assert f"| `{key}` |" in text and spec.description, key
    for name, field in EngineConfig.model_fields.items():
        assert f"| `{name}` |" in text, name
        assert field.description, f"EngineConfig.{name} needs a description for the docs"
    for env in ("RAG_INDEXER_BATCH", "RAG_RETRIEVAL_MIN_SCORE", "VANCETOPE_RAG_JWT_SECRET"):
        assert f"`{env}`" in text


def test_rest_page_lists_every_route() -> None:
    gen = _gen_docs()
    text = (ROOT / "docs" / "rest-api.md").read_text(encoding="utf-8")
    spec = gen.openapi_spec()
    for path, ops in spec["paths"].items():
        for method in ops:
            assert f"### `{method.upper()} {path}`" in text
    for name in spec["components"]["schemas"]:
        assert f"#### `{name}`" in text


def test_docs_link_to_pages_that_exist() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(((?!https?:)[^)#]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_architecture_page_names_every_module() -> None:
    """docs/architecture.md lists each module under src/vancetope_rag/ with its job, so a new or
    moved module that the page does not describe fails here."""
    package = ROOT / "src" / "vancetope_rag"
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert sorted(modules - named) == [], "modules missing from docs/architecture.md"
    stale = [n for n in named - modules if "/" in n and not n.startswith(("tests/", "plugins/"))]
    assert sorted(stale) == [], "docs/architecture.md names modules that do not exist"
