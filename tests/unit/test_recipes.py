"""Recipe files to typed RAG parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import vancetope_rag
from vancetope_rag.domain.retrieval.calibration import AUTO
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.errors import RecipeError
from vancetope_rag.recipes import (
    RagParams,
    Recipe,
    bundled_recipe_names,
    is_recipe_path,
    load_recipe,
    parse_recipe,
)

RECIPES_DIR = Path(vancetope_rag.__file__).parent / "bundled_recipes"


def _write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_full_recipe(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
name: general-assistant
description: Helps.
allowedTools: [rag_query]   # engine keys are ignored
params:
  memory: {window: 3}
  rag:
    autoInject: AUTO
    minScore: 0.35
    topK: 5
    maxPerDocument: 2
    retrievalMode: Hybrid
    maxTokens: 800
    template: "{% for h in hits %}{{ h.label }} {% endfor %}"
""",
    )
    assert load_recipe(path) == Recipe(
        name="general-assistant",
        description="Helps.",
        rag=RagParams(
            auto_inject=AutoInject.AUTO,
            min_score=0.35,
            top_k=5,
            max_per_document=2,
            retrieval_mode="hybrid",
            max_tokens=800,
            template="{% for h in hits %}{{ h.label }} {% endfor %}",
        ),
        source=str(path),
    )


@pytest.mark.parametrize(
    "text",
    [
        "name: x\n",
        "name: x\nparams:\n",
        "name: x\nparams:\n  other: 1\n",
        "name: x\nparams:\n  rag:\n",
    ],
)
def test_missing_rag_params_are_all_none(text: str) -> None:
    recipe = parse_recipe(yaml.safe_load(text))
    assert recipe.rag == RagParams()
    assert recipe.source == "<string>"
    assert recipe.description is None


def test_engine_params_alias() -> None:
    recipe = parse_recipe(
        yaml.safe_load("name: x\nengineParams:\n  rag:\n    autoInject: 'OFF'\n    topK: 3\n")
    )
    assert recipe.rag.auto_inject is AutoInject.OFF
    assert recipe.rag.top_k == 3


def test_min_score_int_becomes_float() -> None:
    recipe = parse_recipe({"name": "x", "params": {"rag": {"minScore": 0}}})
    assert recipe.rag.min_score == 0.0
    assert isinstance(recipe.rag.min_score, float)


@pytest.mark.parametrize("spelling", ["auto", "AUTO", "Auto"])
def test_min_score_auto_asks_for_the_rags_calibration(spelling: str) -> None:
    recipe = parse_recipe(yaml.safe_load(f"name: x\nparams:\n  rag:\n    minScore: {spelling}\n"))
    assert recipe.rag.min_score == AUTO


def test_template_file_relative_to_recipe(tmp_path: Path) -> None:
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "block.j2").write_text("{{ hits|length }} hits", encoding="utf-8")
    path = _write(tmp_path, "name: x\nparams:\n  rag:\n    templateFile: tpl/block.j2\n")
    assert load_recipe(path).rag.template == "{{ hits|length }} hits"


# Each case: recipe body, dotted key expected in the message, another fragment expected.
ERROR_CASES = [
    (
        "name: x\nparams:\n  rag:\n    topK: abc\n",
        "params.rag.topK",
        "must be an integer from 1 to 100, got 'abc'",
    ),
    ("name: x\nparams:\n  rag:\n    topK: 0\n", "params.rag.topK", "got 0"),
    ("name: x\nparams:\n  rag:\n    topK: 101\n", "params.rag.topK", "got 101"),
    ("name: x\nparams:\n  rag:\n    topK: 2.5\n", "params.rag.topK", "got 2.5"),
    ("name: x\nparams:\n  rag:\n    topK: true\n", "params.rag.topK", "got True"),
    (
        "name: x\nparams:\n  rag:\n    minScore: 1.5\n",
        "params.rag.minScore",
        "must be auto or a number from -1 to 1",
    ),
    ("name: x\nparams:\n  rag:\n    minScore: high\n", "params.rag.minScore", "got 'high'"),
    ("name: x\nparams:\n  rag:\n    minScore: '0.4'\n", "params.rag.minScore", "got '0.4'"),
    ("name: x\nparams:\n  rag:\n    minScore: .nan\n", "params.rag.minScore", "got nan"),
    (
        "name: x\nparams:\n  rag:\n    maxPerDocument: 0\n",
        "params.rag.maxPerDocument",
        "from 1 to 100",
    ),
    (
        "name: x\nparams:\n  rag:\n    autoInject: sometimes\n",
        "params.rag.autoInject",
        "ON, OFF, AUTO",
    ),
    ("name: x\nparams:\n  rag:\n    autoInject: 1\n", "params.rag.autoInject", "got 1"),
    ("name: x\nparams:\n  rag:\n    top_k: 5\n", "params.rag.top_k", "topK"),
    ("name: x\nengineParams:\n  rag:\n    topK: x\n", "engineParams.rag.topK", "integer"),
    (
        "name: x\nparams:\n  rag:\n    template: '{% for %}'\n",
        "params.rag.template",
        "syntax error at line 1",
    ),
    ("name: x\nparams:\n  rag:\n    template: ''\n", "params.rag.template", "non-empty"),
    (
        "name: x\nparams:\n  rag:\n    template: a\n    templateFile: b.j2\n",
        "params.rag.template",
        "templateFile",
    ),
    (
        "name: x\nparams:\n  rag:\n    templateFile: missing.j2\n",
        "params.rag.templateFile",
        "not found",
    ),
    (
        "name: x\nparams:\n  rag:\n    templateFile: ../outside.j2\n",
        "params.rag.templateFile",
        "inside the recipe's directory",
    ),
    (
        "name: x\nparams:\n  rag:\n    templateFile: /etc/hostname\n",
        "params.rag.templateFile",
        "inside the recipe's directory",
    ),
    ("name: x\nparams:\n  rag: [1, 2]\n", "params.rag", "must be a mapping"),
    (
        "name: x\nparams:\n  rag:\n    retrievalMode: sparse\n",
        "params.rag.retrievalMode",
        "one of dense, hybrid",
    ),
    (
        "name: x\nparams:\n  rag:\n    maxTokens: 10\n",
        "params.rag.maxTokens",
        "from 50 to 100000",
    ),
    ("name: x\nparams: 3\n", "params", "must be a mapping"),
    ("name: x\nparams: {}\nengineParams: {}\n", "engineParams", "not both"),
    ("description: no name\n", "name", "non-empty string"),
    ("name: x\ndescription: [a]\n", "description", "must be a string"),
    ("- a list\n", "recipe", "YAML mapping"),
]


@pytest.mark.parametrize(("text", "key", "fragment"), ERROR_CASES)
def test_recipe_errors_name_file_and_key(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    path = _write(tmp_path, text, "bad.yaml")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert key in message
    assert fragment in message
    assert info.value.code == "RECIPE_INVALID"


def test_error_message_shape(tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    path = _write(tmp_path / "recipes", "name: x\nparams:\n  rag:\n    topK: abc\n", "x.yaml")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert str(info.value) == f"{path}: params.rag.topK must be an integer from 1 to 100, got 'abc'"


def test_template_syntax_error_reports_template_line(tmp_path: Path) -> None:
    (tmp_path / "block.j2").write_text("ok\nok\n{% if %}\n", encoding="utf-8")
    path = _write(tmp_path, "name: x\nparams:\n  rag:\n    templateFile: block.j2\n")
    with pytest.raises(RecipeError, match=r"params\.rag\.templateFile: .*line 3"):
        load_recipe(path)


def test_template_file_needs_a_file_recipe() -> None:
    with pytest.raises(RecipeError, match=r"<string>: params\.rag\.templateFile"):
        parse_recipe({"name": "x", "params": {"rag": {"templateFile": "a.j2"}}})


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(RecipeError, match="not found") as info:
        load_recipe(path)
    assert str(path) in str(info.value)


def test_invalid_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: [unclosed\n")
    with pytest.raises(RecipeError, match="invalid YAML") as info:
        load_recipe(path)
    assert str(path) in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(RecipeError, match="cannot read") as info:
        load_recipe(path)
    assert str(path) in str(info.value)

    with pytest.raises(RecipeError, match="cannot read"):
        load_recipe(tmp_path)  # a directory


def test_a_path_with_a_nul_character_is_a_recipe_error(tmp_path: Path) -> None:
    """A NUL cannot be in a file name; the OS call raised a bare ValueError (the CLI's
    ``--recipe`` answered with an internal error). It is the recipe's error, naming the path."""
    with pytest.raises(RecipeError, match="NUL"):
        load_recipe("recipe\x00.yaml")
    path = _write(tmp_path, 'name: x\nparams:\n  rag:\n    templateFile: "a\\0b.j2"\n')
    with pytest.raises(RecipeError, match=r"templateFile.*NUL"):
        load_recipe(path)


def test_example_recipes_load() -> None:
    recipes = {path.name: load_recipe(path) for path in sorted(RECIPES_DIR.glob("*.yaml"))}
    assert {"general-assistant.yaml", "discussion.yaml", "docs-assistant.yaml"} <= set(recipes)
    general = recipes["general-assistant.yaml"].rag
    assert (general.auto_inject, general.top_k, general.min_score) == (AutoInject.AUTO, 5, None)
    assert recipes["discussion.yaml"].rag.auto_inject is AutoInject.OFF
    docs = recipes["docs-assistant.yaml"].rag
    assert (docs.auto_inject, docs.max_per_document) == (AutoInject.ON, 2)
    for name, recipe in recipes.items():
        assert recipe.name == name.removesuffix(".yaml")
        # a pinned cosine would mean one thing for one model and beat the tenant's setting
        assert recipe.rag.min_score in (None, AUTO), name


def test_the_bundled_recipes_load_by_name() -> None:
    """The wheel carries its recipes: a name loads the shipped file, from any directory."""
    assert bundled_recipe_names() == ["discussion", "docs-assistant", "general-assistant"]
    for name in bundled_recipe_names():
        recipe = load_recipe(name)
        assert recipe.name == name
        assert recipe == load_recipe(RECIPES_DIR / f"{name}.yaml")


@pytest.mark.parametrize(
    ("given", "is_path"),
    [
        ("docs-assistant", False),
        ("docs-assistant.yaml", True),
        ("docs-assistant.yml", True),
        ("./docs-assistant", True),
        ("recipes/docs-assistant", True),
        (Path("docs-assistant"), True),  # a path object is always a path
    ],
)
def test_a_slash_or_a_yaml_suffix_makes_a_path(given: str | Path, is_path: bool) -> None:
    assert is_recipe_path(given) is is_path


def test_a_path_is_read_as_a_file_and_a_name_as_the_bundled_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "name: mine\n", "docs-assistant.yaml")
    assert load_recipe("docs-assistant.yaml").name == "mine"  # the file here
    assert load_recipe("docs-assistant").source.endswith("bundled_recipes/docs-assistant.yaml")
    with pytest.raises(RecipeError, match="recipe file not found"):
        load_recipe("./general-assistant")  # a path, not the bundled name


@pytest.mark.parametrize("name", ["nope", "", "..", "docs_assistant", "__init__"])
def test_an_unknown_name_lists_the_bundled_ones(name: str) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(name)
    message = info.value.message
    assert message.startswith(f"{name!r}: no bundled recipe of that name")
    assert "discussion, docs-assistant, general-assistant" in message
    assert ".yaml" in message  # how to name a file instead
