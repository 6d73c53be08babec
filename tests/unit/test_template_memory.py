"""Recipe templates cannot make a turn allocate a huge value: every operation whose result size
follows from its operands (string and list methods, ``+``, ``~``, ``%``, ``*``, the growing
filters, printing a container) is refused *before* it runs when that size passes the output
bound, at recipe load and at render, quickly and without allocating."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
import yaml

import vancetope_rag
from vancetope_rag.domain.block import context_block
from vancetope_rag.domain.block.context_block import (
    DEFAULT_TEMPLATE,
    OVER_BUDGET,
    check_template_cost,
    render_context_block,
)
from vancetope_rag.domain.records import Hit
from vancetope_rag.errors import InvalidInputError, RecipeError
from vancetope_rag.recipes import load_recipe

RECIPES_DIR = Path(vancetope_rag.__file__).parent / "bundled_recipes"

# Each would build ~300 MB or more (sizes kept modest so that the unfixed code survives it).
S20K = '{% set s = "x" * 20000 %}'
S100K = '{% set s = "x" * 100000 %}'
S150K = '{% set s = "x" * 150000 %}'
DOUBLE_PLUS = S150K + "{% set s = s + s %}" * 11 + "{{ s|length }}"
DOUBLE_TILDE = S150K + "{% set s = s ~ s %}" * 11 + "{{ s|length }}"
NESTED = (
    S100K + "{% set a = [s, s, s, s, s, s, s, s, s, s] %}"
    "{% set b = [a, a, a, a, a, a, a, a, a, a] %}{% set c = [b, b, b, b, b, b, b, b, b, b] %}"
)
HUGE = {
    "ljust": '{{ "x".ljust(300000000) }}',
    "rjust": '{{ "x".rjust(300000000) }}',
    "center": '{{ "x".center(300000000) }}',
    "zfill": '{{ "7".zfill(300000000) }}',
    "expandtabs": '{{ ("\\t" * 100000).expandtabs(3000) }}',
    "replace": S20K + '{{ s.replace("x", s) }}',
    "replace_count": S20K + '{{ s.replace("x", s, 15000) }}',
    "join": S100K + '{{ "".join([s] * 3000) }}',
    "join_generator": S100K + '{{ "-".join(([s] * 3000)|list) }}',
    "translate": S20K + "{{ s.translate({120: s}) }}",
    "format_repeat": '{{ ("{0}" * 60000).format("x" * 5000) }}',
    "format_nested_width": '{{ "{:{}}".format("x", 300000000) }}',
    "format_map": '{{ ("{a}" * 60000).format_map({"a": "x" * 5000}) }}',
    "percent_width": '{{ "%300000000s" % "x" }}',
    "percent_star": '{{ "%*s" % (300000000, "x") }}',
    "percent_repeat": '{{ ("%(a)s" * 30000) % {"a": "x" * 10000} }}',
    "bytes_ljust": '{{ "x".encode().ljust(300000000)|length }}',
    "bytes_replace": S20K + '{{ s.encode().replace("x".encode(), s.encode())|length }}',
    "list_extend": '{% set l = ["x" * 100000] %}'
    "{% for i in range(12) %}{{ l.extend(l) }}{% endfor %}{{ l }}",
    "list_append": '{% set l = [] %}{% for i in range(3000) %}{{ l.append("x" * 100000) }}'
    "{% endfor %}{{ l }}",
    "list_times": S100K + "{{ [s] * 3000 }}",
    "plus": DOUBLE_PLUS,
    "tilde": DOUBLE_TILDE,
    "print_nested": NESTED + "{{ c }}",
    "string_filter": NESTED + "{{ c|string|length }}",
    "join_filter": S100K + "{{ ([s] * 3000)|join }}",
    "replace_filter": S20K + '{{ s|replace("x", s) }}',
    "indent_filter": '{{ ("\\n" * 100000)|indent(3000) }}',
    "format_filter": '{{ ("%s" * 60000)|format(*(["x" * 5000] * 60000)) }}',
}
SAMPLE = [Hit(score=0.9, text="word " * 200, source_ref="s1", path="documents/a.md")]


def _refused_quickly_and_small(action: object) -> None:
    assert callable(action)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInputError) as info:
            action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.message.startswith(OVER_BUDGET), info.value.message
    # Quickly: refused by the size check before the operation ran, not by the render's
    # deadline after a long build. What refused it, not a timing: a busy machine stretches
    # the clock, never the reason (the deadline is out of reach, see no_render_deadline).
    assert "ran longer than" not in info.value.message, info.value.message
    assert peak < 50_000_000, peak


@pytest.fixture
def no_render_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the size check can refuse: the render's wall-clock deadline (1 s) is pushed out
    of reach, else a loaded machine (tracemalloc slows every allocation too) could reach it
    first and hide which check refused."""
    monkeypatch.setattr(context_block, "RENDER_SECONDS", 600.0)


@pytest.mark.usefixtures("no_render_deadline")
@pytest.mark.parametrize("template", HUGE.values(), ids=HUGE.keys())
def test_a_huge_value_is_refused_at_render_before_it_is_built(template: str) -> None:
    _refused_quickly_and_small(lambda: render_context_block(SAMPLE, template))


@pytest.mark.usefixtures("no_render_deadline")
@pytest.mark.parametrize("template", HUGE.values(), ids=HUGE.keys())
def test_a_huge_value_is_refused_when_the_recipe_is_checked(template: str) -> None:
    _refused_quickly_and_small(lambda: check_template_cost(template))


@pytest.mark.parametrize("name", ["ljust", "replace", "join", "format_repeat", "tilde"])
def test_a_recipe_building_a_huge_value_does_not_load(tmp_path: Path, name: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"name": "r", "params": {"rag": {"template": HUGE[name]}}}))
    with pytest.raises(RecipeError, match="too costly to render"):
        load_recipe(recipe)


# -- what stays allowed ---------------------------------------------------------------------

NORMAL = (
    "{% for h in hits %}[{{ h.label.ljust(4) }}|{{ h.label.rjust(4) }}|{{ h.label.center(6) }}"
    "|{{ '%.2f'|format(h.score) }}|{{ '%5.1f' % h.score }}|{{ '{:>6}'.format(h.label) }}"
    "|{{ '{a}-{b}'.format_map({'a': h.label, 'b': h.kind}) }}|{{ '7'.zfill(3) }}"
    "|{{ h.text.replace('word', 'w', 2)[:12] }}|{{ ', '.join([h.label, h.kind]) }}"
    "|{{ 'a\\tb'.expandtabs(4) }}|{{ h.source + '!' }}|{{ h.source ~ '?' }}"
    "|{{ [h.label] * 2 }}|{{ h.path.encode().upper()|length }}"
    "|{{ h.text|replace('word', 'w')|truncate(12) }}|{{ [h.label, h.kind]|join('/') }}"
    "|{{ 'x\\ny'|indent(2) }}]\n{% endfor %}"
    "{% set l = [] %}{{ l.append(1) }}{{ l.extend([2, 3]) }}{{ l.insert(0, 0) }}{{ l }}"
)


def test_ordinary_methods_and_operators_render_as_before() -> None:
    hit = Hit(score=0.8149, text="word " * 5, source_ref="r", path="documents/a.md")
    assert render_context_block([hit], NORMAL) == (
        "[S1  |  S1|  S1  |0.81|  0.8|    S1|S1-content|007|w w word wor"
        "|S1, content|a   b|documents/a.md!|documents/a.md?|['S1', 'S1']|14"
        "|w w w w w|S1/content|x\n  y]\n"
        "NoneNoneNone[0, 1, 2, 3]"
    )
    check_template_cost(NORMAL)


def test_the_shipped_recipes_and_the_default_template_render_as_before() -> None:
    hit = Hit(score=0.5, text="Some text.", source_ref="r", path="documents/a.md")
    expected = (
        "<rag-context>\nTop relevant excerpts from the project's documents. Cite the\n"
        "source path when you use these.\n\n- [S1] documents/a.md (score 0.50)\n"
        "  Some text.\n\n</rag-context>"
    )
    check_template_cost(DEFAULT_TEMPLATE)
    assert render_context_block([hit]) == expected
    recipes = sorted(RECIPES_DIR.glob("*.yaml"))
    assert recipes
    for path in recipes:
        template = load_recipe(path).rag.template
        assert render_context_block([hit], template) == expected, path.name
