"""The install extras: every extra an error tells users to install exists, and ``all``
installs every optional feature."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
NAME = PYPROJECT["project"]["name"]

#: Where the source names an extra: ``MissingDependencyError("…", "pdf")``,
#: ``ExtractorDependencyMissing("…", "pdf")`` or a literal ``vancetope-rag[pdf]``.
_NAMED = re.compile(
    r"""(?:MissingDependencyError|ExtractorDependencyMissing)\(\s*"[^"]*",\s*"(\w[\w-]*)"\s*\)"""
    r"""|vancetope-rag\[(\w[\w-]*)\]"""
)


def _extras_named_in_source() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for path in sorted((ROOT / "src" / "vancetope_rag").rglob("*.py")):
        for match in _NAMED.finditer(path.read_text(encoding="utf-8")):
            extra = match.group(1) or match.group(2)
            named.setdefault(extra, set()).add(str(path.relative_to(ROOT)))
    return named


def _all_includes() -> set[str]:
    (requirement,) = EXTRAS["all"]
    match = re.fullmatch(rf"{re.escape(NAME)}\[([\w,\s-]+)\]", requirement)
    assert match, f"'all' should be {NAME}[…], got {requirement!r}"
    return {e.strip() for e in match.group(1).split(",")}


def test_every_extra_the_code_names_exists() -> None:
    named = _extras_named_in_source()
    # the errors that name an extra (missing provider, store driver, server, PDF library)
    assert {"embedded", "openai", "gemini", "mongodb", "server", "pdf"} <= set(named)
    unknown = {extra: files for extra, files in named.items() if extra not in EXTRAS}
    assert not unknown, f"errors name extras pyproject.toml does not define: {unknown}"


def test_all_installs_every_optional_feature() -> None:
    features = set(EXTRAS) - {"all", "dev"}
    assert _all_includes() == features


def test_make_setup_installs_all_and_dev() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-e '.[all,dev]'" in makefile
