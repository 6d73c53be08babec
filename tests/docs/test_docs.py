"""The docs build check: every Python snippet of ``docs/*.md`` and ``README.md`` runs, and the
generated parts (configuration, REST API) match the code.

Snippets of one page run in order in one namespace (a page reads as one session), in a fresh
folder holding links to the repository's ``recipes/`` and ``examples/``. A snippet that needs
a server or a key is preceded by a marker comment and skipped with that reason:

    <!-- requires: atlas -->        a MongoDB Atlas cluster (VANCETOPE_RAG_TEST_MONGODB_URI)
    <!-- requires: openai -->       an OpenAI API key
    <!-- requires: gemini -->       a Gemini API key

Every app a page opens is closed at its end (``RagApp.close``), so no background thread or
store handle outlives the page.

A page a reader will save as a file and run (its snippets are one program) says so with

    <!-- docs-test: run as a script -->

and its snippets also run that way: written to one file and run by a fresh interpreter
(``python page.py``), where what they define lives in ``__main__``, as in the reader's script.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
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


def snippets(page: Path) -> list[Snippet]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        indent = m["indent"]
        code = "".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in m["code"].splitlines(keepends=True)
        )
        needs = tuple(n.strip() for n in (m["needs"] or "").split(",") if n.strip())
        out.append(Snippet(page, text[: m.start("code")].count("\n") + 1, code, needs))
    return out


def _pages_with_snippets() -> list[Path]:
    return [p for p in PAGES if snippets(p)]


@pytest.fixture
def page_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("recipes", "examples"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):  # the snippets say what they configure
        if key.startswith(("VANCETOPE_RAG_", "RAG_")):
            monkeypatch.delenv(key)
    # Not a snippet's concern: no ONNX export into the user's cache from a docs run.
    monkeypatch.setenv("VANCETOPE_RAG_EMBEDDED_BACKEND", "torch")
    yield tmp_path


def test_markers_name_known_requirements() -> None:
    for page in PAGES:
        for snippet in snippets(page):
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
    from vancetope_rag.domain.settings import SETTINGS

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
