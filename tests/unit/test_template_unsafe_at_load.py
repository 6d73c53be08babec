"""Issue 20 item 10: a context template that touches ``__class__`` (or any other ``_``
attribute the sandbox forbids) is refused when it is loaded, with a clear error — never
loaded and then rendering no block in every turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.context_block import compile_template
from vancetope_rag.errors import InvalidInputError, RecipeError
from vancetope_rag.recipes import parse_recipe

UNSAFE = [
    "{{ hits[0].__class__ }}",
    "{% for h in hits %}{{ h.__class__.__name__ }}{% endfor %}",
    "{{ hits['__class__'] }}",
    "{{ hits|attr('__class__') }}",
    "{{ sources.__len__() }}",
    "{% set k = '__cla' ~ 'ss__' %}{{ hits[0]|attr(k) }}",  # only a render can see it
    "{{ hits[0]._hit }}",
]


@pytest.mark.parametrize("template", UNSAFE)
def test_recipe_with_unsafe_template_is_refused_at_load(template: str) -> None:
    data = {"name": "x", "params": {"rag": {"template": template}}}
    with pytest.raises(RecipeError, match="unsafe") as caught:
        parse_recipe(data)
    assert "params.rag.template" in caught.value.message or "template" in caught.value.message


@pytest.mark.parametrize("template", UNSAFE[:5])
def test_compile_names_the_forbidden_attribute(template: str) -> None:
    with pytest.raises(InvalidInputError, match="unsafe") as caught:
        compile_template(template)
    assert "line 1" in caught.value.message and "'_" in caught.value.message


def test_app_default_template_is_checked_at_open(tmp_path: Path) -> None:
    config = EngineConfig(store=f"sqlite:///{tmp_path / 'rag.db'}")
    with pytest.raises(InvalidInputError, match="unsafe"):
        RagApp.open(config, context_template="{{ hits.__class__ }}")


def test_safe_templates_still_load() -> None:
    data = {"name": "x", "params": {"rag": {"template": "{{ hits[0].label }} {{ hits|length }}"}}}
    assert parse_recipe(data).rag.template
