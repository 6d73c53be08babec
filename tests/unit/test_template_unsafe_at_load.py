"""A context template that touches ``__class__`` (or any other ``_``
attribute the sandbox forbids) is refused when it is loaded, with a clear error — never
loaded and then rendering no block in every turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from vancetope_rag.app import RagApp
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.block.context_block import compile_template
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


# Also refused at load: what the sandbox refuses in a render only some turns reach
# (behind an ``if`` the sample hits do not take), and names that never exist.
GUARDED = "{% if hits|length > 5 %}EXPR{% endif %}x"
UNSAFE_WHEN_REACHED = [
    "{{ (hits|map(attribute='label')).gi_frame }}",  # the sandbox's own non-'_' names
    "{{ (hits|map(attribute='label')).gi_code }}",
    "{{ dict.mro() }}",
    "{{ hits|selectattr('__class__')|list }}",  # attribute names given to filters
    "{{ hits|rejectattr('label.__class__')|list }}",
    "{{ hits|sort(attribute='label.__class__')|list }}",
    "{{ hits|sort(attribute='score,_hit')|list }}",
    "{{ hits|sort(false, false, '_hit')|list }}",
    "{{ hits|groupby('__class__')|list }}",
    "{{ hits|sum(attribute='__len__') }}",
    "{{ hits|map(attribute='__class__')|list }}",
    "{{ hits|unique(attribute='__class__')|list }}",
    "{{ hits|max(attribute='__class__') }}",
    "{{ '{0.__class__}'.format(hits) }}",  # attribute fields of a format string
    "{{ '{0[0].label.__class__}'.format(hits) }}",
    "{{ '{h._hit}'.format_map({'h': hits[0]}) }}",
]


@pytest.mark.parametrize("expr", UNSAFE_WHEN_REACHED)
def test_unsafe_behind_a_condition_is_refused_at_load(expr: str) -> None:
    template = GUARDED.replace("EXPR", expr)
    with pytest.raises(InvalidInputError, match="unsafe") as caught:
        compile_template(template)
    assert "line 1" in caught.value.message
    with pytest.raises(RecipeError, match="unsafe"):
        parse_recipe({"name": "x", "params": {"rag": {"template": template}}})


@pytest.mark.parametrize(
    ("template", "named"),
    [
        ("{{ hitz|length }}", "'hitz'"),
        ("line\n{% for h in hits %}{{ loop.index }}{% endfor %}{{ hit.label }}", "'hit'"),
    ],
)
def test_a_variable_no_turn_has_is_refused_at_load(template: str, named: str) -> None:
    with pytest.raises(RecipeError, match="undefined variable") as caught:
        parse_recipe({"name": "x", "params": {"rag": {"template": template}}})
    assert named in caught.value.message and "hits" in caught.value.message


@pytest.mark.parametrize(
    "template",
    [
        "{% for h in hits %}[{{ h.lable }}]{% endfor %}",
        "{% for h in hits if h.lable %}x{% endfor %}",
        "{% for s in sources %}{{ s['lable'] }}{% endfor %}",
        "{% if hits|length > 5 %}{{ hits[0].lable }}{% endif %}",
        "{{ (hits|first).lable }}",
    ],
)
def test_a_field_hits_do_not_have_is_refused_at_load(template: str) -> None:
    with pytest.raises(RecipeError, match="undefined field") as caught:
        parse_recipe({"name": "x", "params": {"rag": {"template": template}}})
    assert "'lable'" in caught.value.message and "label" in caught.value.message


@pytest.mark.parametrize(
    "template",
    [
        "{% set ns = namespace(mro=1) %}{{ ns.mro }}",  # a user's own name, not the sandbox's
        "{{ hits|map(attribute='label')|join(', ') }}",
        "{{ hits|sort(attribute='score', reverse=true)|map(attribute='source')|first }}",
        "{% for g in hits|groupby('source') %}{{ g.grouper }}{% endfor %}",
        "{{ '{0.label}: {0.score:.2f}'.format(hits[0]) }}",
        "{% for s in sources %}{{ s.label }}{% endfor %}{{ range(2)|list }}{{ loop is defined }}",
        "{% macro m(x) %}{{ x }}{{ caller() }}{% endmacro %}{% call m(1) %}y{% endcall %}",
        "{% if hits[0].kind == 'summary' %}{{ hits[0].text }}{% endif %}",
    ],
)
def test_ordinary_templates_still_load(template: str) -> None:
    assert parse_recipe({"name": "x", "params": {"rag": {"template": template}}}).rag.template
