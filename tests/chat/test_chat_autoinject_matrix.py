"""AutoInject resolution (spec §5) through the real app: recipe × project × tenant.

The expected outcome comes from the rule rows below, written out from the spec, not from the
resolution function under test. Every case sets real settings and a real parsed recipe and
checks whether ``app.pre_turn`` returns the ``<rag-context>`` block.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chat_fakes import index_docs, open_app

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.recipes import RagParams, parse_recipe

QUESTION = "zebra stripes and savanna grass"

# Stances after parsing: "ON" / "OFF" / "AUTO" / "-" (absent).
#: Recipe spellings (YAML text of the ``autoInject`` line, None = no such line) → stance.
#: PyYAML reads YAML 1.1: bare ON/off/true are booleans, which count as legacy ON/OFF.
RECIPES: dict[str, tuple[str | None, str]] = {
    "no-recipe": (None, "-"),
    "absent": ("", "-"),
    "ON-bare": ("autoInject: ON", "ON"),
    "ON-quoted": ('autoInject: "ON"', "ON"),
    "OFF-quoted": ('autoInject: "OFF"', "OFF"),
    "off-bare": ("autoInject: off", "OFF"),
    "AUTO": ("autoInject: AUTO", "AUTO"),
    "auto-quoted": ("autoInject: 'auto'", "AUTO"),
    "legacy-true": ("autoInject: true", "ON"),
    "legacy-false": ("autoInject: false", "OFF"),
}

#: Setting values as stored with ``app.settings.set`` (None = unset) → stance.
SETTINGS: dict[str, tuple[object, str]] = {
    "ON": ("ON", "ON"),
    "OFF": ("OFF", "OFF"),
    "AUTO": ("AUTO", "AUTO"),
    "absent": (None, "-"),
    "legacy-True": (True, "ON"),
    "legacy-False": (False, "OFF"),
}

ANY = "*"

#: (recipe, project, tenant) stance → (injected, decided by). First matching row wins.
RULES: list[tuple[str, str, str, bool, str]] = [
    # a. the recipe's ON/OFF is its identity and wins over every setting
    ("ON", ANY, ANY, True, "recipe"),
    ("OFF", ANY, ANY, False, "recipe"),
    # b. recipe AUTO or silent: the innermost scope with a value decides
    (ANY, "ON", ANY, True, "project"),
    (ANY, "OFF", ANY, False, "project"),
    # an explicit project AUTO means "no enforcement here": it masks the tenant's stance
    (ANY, "AUTO", ANY, False, "default"),
    (ANY, "-", "ON", True, "tenant"),
    (ANY, "-", "OFF", False, "tenant"),
    # c. AUTO / nothing anywhere: hard default OFF
    (ANY, "-", "AUTO", False, "default"),
    (ANY, "-", "-", False, "default"),
]


def expected(recipe: str, project: str, tenant: str) -> tuple[bool, str]:
    for r, p, t, injected, decider in RULES:
        if r in (ANY, recipe) and p in (ANY, project) and t in (ANY, tenant):
            return injected, decider
    raise AssertionError(f"no rule row for {(recipe, project, tenant)}")


def _recipe(spelling: str) -> RagParams | None:
    line, _ = RECIPES[spelling]
    if line is None:
        return None
    text = f"name: matrix\nparams:\n  rag:\n    minScore: 0.05\n    {line}\n"
    return parse_recipe(yaml.safe_load(text)).rag


CASES = list(itertools.product(RECIPES, SETTINGS, SETTINGS))


@pytest.fixture(scope="module")
def matrix_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RagApp]:
    """One indexed app for the whole matrix: every case sets both scopes itself."""
    app = open_app(Path(tmp_path_factory.mktemp("matrix")))
    app.settings.set(T, None, "ai.embedding.provider", "hashing")
    app.settings.set(T, None, "rag.minScore", 0.05)
    index_docs(app)
    yield app
    app.close()


def test_rule_rows_cover_every_stance_combination() -> None:
    stances = ["ON", "OFF", "AUTO", "-"]
    for combo in itertools.product(stances, stances, stances):
        expected(*combo)  # raises when a combination has no row


def test_yaml_spellings_parse_as_documented() -> None:
    for spelling, (line, stance) in RECIPES.items():
        params = _recipe(spelling)
        got = params.auto_inject.value if params and params.auto_inject else "-"
        assert got == stance, (spelling, line)


@pytest.mark.parametrize(("recipe", "project", "tenant"), CASES)
def test_autoinject_resolution(matrix_app: RagApp, recipe: str, project: str, tenant: str) -> None:
    app = matrix_app
    app.settings.set(T, P, "rag.autoInject.enabled", SETTINGS[project][0])
    app.settings.set(T, None, "rag.autoInject.enabled", SETTINGS[tenant][0])
    want, decider = expected(RECIPES[recipe][1], SETTINGS[project][1], SETTINGS[tenant][1])

    params = _recipe(recipe)
    blocks = app.pre_turn(T, P, [QUESTION], params)
    decision = app.autoinject.decide(T, P, [QUESTION], params)

    assert (decision.enabled, decision.decided_by) == (want, decider)
    if want:
        assert len(blocks) == 1
        assert blocks[0].startswith("<rag-context>")
        assert "documents/zebra.md" in blocks[0]
    else:
        assert blocks == []


@pytest.mark.parametrize("spelling", ["on", " On ", "true", "TRUE"])
def test_setting_spellings_for_on(matrix_app: RagApp, spelling: str) -> None:
    matrix_app.settings.set(T, P, "rag.autoInject.enabled", None)
    matrix_app.settings.set(T, None, "rag.autoInject.enabled", spelling)
    assert matrix_app.pre_turn(T, P, [QUESTION]) != []
    matrix_app.settings.set(T, None, "rag.autoInject.enabled", None)
    assert matrix_app.pre_turn(T, P, [QUESTION]) == []
