"""Render the ``<rag-context>`` system message (spec §5 step 5) with Jinja2.

Templates may come from recipes, i.e. from users, so they run in Jinja's sandbox with
``StrictUndefined`` (a misspelled variable is an error, not an empty string) and without
autoescaping (the output is plain text for a model, not HTML). The sandbox keeps a template
from reaching Python; :class:`_BoundedEnvironment` also keeps it from running without end or
filling memory: ``range()`` calls of one render share a budget of :data:`RANGE_BUDGET` items,
``*`` and ``**`` cannot build huge values, filter widths and format widths are capped, the
output may not pass :data:`MAX_OUTPUT_CHARS`, and a render stops after :data:`RENDER_SECONDS`
(a trace on the template's own frames, so loops over strings or lists are bounded too).

Template variables:

* ``hits``: list of :class:`ContextHit` (``label``, ``source``, ``path``, ``source_ref``,
  ``kind``, ``score``, ``text``), in the order given.
* ``sources``: list of :class:`ContextSource` (``label``, ``source``, ``path``,
  ``source_ref``), one per distinct source, in order of first appearance.

``label`` is ``S1``, ``S2``... numbered by first appearance of the source, so every hit of one
document carries the same label and the model can cite it; what a label names is the rule of
:mod:`vancetope_rag.domain.citations` (the ``rag_query`` tool numbers with the same code).
``text`` is already cleaned: trailing whitespace stripped, runs of blank lines collapsed, and
``<rag-context>`` tags neutralised (see :func:`neutralise_tags`).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import FrameType
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

from vancetope_rag.domain.citations import cite
from vancetope_rag.domain.records import Hit
from vancetope_rag.errors import InvalidInputError

__all__ = [
    "DEFAULT_TEMPLATE",
    "ContextHit",
    "ContextSource",
    "check_template_cost",
    "compile_template",
    "neutralise_tags",
    "render_context_block",
]

DEFAULT_TEMPLATE = """\
<rag-context>
Top relevant excerpts from the project's documents. Cite the
source path when you use these.

{% for hit in hits %}- [{{ hit.label }}] {{ hit.source }}
{%- if hit.kind == "summary" %} [summary]{% endif %} (score {{ "%.2f"|format(hit.score) }})
{% if hit.text %}  {{ hit.text|indent(2) }}
{% endif %}{% endfor %}
</rag-context>
"""

# Opening or closing tag, any case, tolerant of the spacing a model would still read as a tag.
_TAG_RE = re.compile(r"<(?=\s*/?\s*rag-context\b)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ContextSource:
    """A distinct source of the hits, with its citation label."""

    label: str
    source: str
    path: str | None
    source_ref: str


@dataclass(frozen=True, slots=True)
class ContextHit:
    """One hit as the template sees it."""

    label: str
    source: str
    path: str | None
    source_ref: str
    kind: str
    score: float
    text: str


def neutralise_tags(text: str) -> str:
    """Defuse ``<rag-context>``/``</rag-context>`` tags so content cannot end the block early.

    Only the ``<`` of such a tag becomes ``&lt;``: the model still sees what the document says,
    the rest of the text (Markdown, other HTML) is left exactly as written, and the real
    closing tag stays the only one in the message.

    Args:
        text: Excerpt text or a source label.

    Returns:
        The text with the ``<`` of every ``rag-context`` tag replaced by ``&lt;``.
    """
    return _TAG_RE.sub("&lt;", text)


def _clean_text(text: str) -> str:
    lines: list[str] = []
    for line in neutralise_tags(text).splitlines():
        line = line.rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def _clean_label(label: str) -> str:
    return " ".join(neutralise_tags(label).split())


#: How a render that broke a bound is reported (recipes refuse such templates at load).
OVER_BUDGET = "RAG context template is too costly to render"

#: Items all ``range()`` calls of one render may make together.
RANGE_BUDGET = 10_000
#: Longest rendered block, and longest value one operation may build, in characters.
MAX_OUTPUT_CHARS = 200_000
#: Wall-clock budget of one render.
RENDER_SECONDS = 1.0
#: Largest integer argument a filter takes (widths, counts) and largest exponent.
MAX_FILTER_ARG, MAX_EXPONENT = 10_000, 64

_FORMAT_WIDTH = re.compile(r"%[-+ #0]*\d{5,}|\{[^{}]*:[^{}]*\d{5,}[^{}]*\}")


@dataclass
class _Budget:
    range_items: int
    deadline: float


_BUDGET: ContextVar[_Budget | None] = ContextVar("vancetope_rag_template_budget", default=None)


class _OverBudget(SecurityError):
    """A render broke one of the bounds (not merely an unsafe attribute)."""


def _too_much(what: str) -> _OverBudget:
    return _OverBudget(f"the template {what}; templates must stay small and fast")


def _charged_range(*args: int) -> range:
    """``range()`` for templates: every call draws from the render's item budget."""
    items = range(*args)
    budget = _BUDGET.get()
    left = RANGE_BUDGET if budget is None else budget.range_items
    if len(items) > left:
        raise _too_much(f"makes more than {RANGE_BUDGET:,} items with range()")
    if budget is not None:
        budget.range_items -= len(items)
    return items


def _sized(value: object) -> int:
    return len(value) if isinstance(value, str | bytes | list | tuple) else 0


class _BoundedEnvironment(SandboxedEnvironment):
    """The sandbox, with bounds on what one render may build (see the module docstring)."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise _too_much(f"raises to a power over {MAX_EXPONENT}")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _sized(seq) and isinstance(n, int) and _sized(seq) * n > MAX_OUTPUT_CHARS:
                    raise _too_much(f"builds a value over {MAX_OUTPUT_CHARS:,} characters")
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        owner = getattr(value, "__self__", None)
        if wrapped is not None and isinstance(owner, str) and _FORMAT_WIDTH.search(owner):
            raise _too_much("formats with a width of five digits or more")
        return wrapped


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` refusing huge numeric arguments (widths, counts) and huge results. Compiled
    templates call filters straight from ``environment.filters``, so the bound sits there."""

    @functools.wraps(fn)  # keeps jinja's pass_context/pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        for arg in (*args, *kwargs.values()):
            if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_FILTER_ARG:
                raise _too_much(f"passes a number over {MAX_FILTER_ARG:,} to the {name} filter")
            if name == "format" and isinstance(arg, str) and _FORMAT_WIDTH.search(arg):
                raise _too_much("formats with a width of five digits or more")
        result = fn(*args, **kwargs)
        if _sized(result) > MAX_OUTPUT_CHARS:
            raise _too_much(f"builds a value over {MAX_OUTPUT_CHARS:,} characters")
        return result

    return bounded


@functools.cache
def _environment() -> SandboxedEnvironment:
    env = _BoundedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
    )
    env.globals["range"] = _charged_range
    env.filters = {name: _bounded_filter(name, fn) for name, fn in env.filters.items()}
    return env


def _deadline_tracer(deadline: float) -> Callable[[FrameType, str, Any], Any]:
    """A trace function that stops the template's own code once the deadline passed; other
    frames (Python, Jinja's runtime) run untraced."""

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _too_much(f"ran longer than {RENDER_SECONDS:g} s")
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == "<template>":
            return local(frame, event, arg)
        return None

    return tracer


def _bounded_render(compiled: jinja2.Template, **variables: Any) -> str:
    """Render within the budgets: range items, output size and time."""
    deadline = time.monotonic() + RENDER_SECONDS
    token = _BUDGET.set(_Budget(RANGE_BUDGET, deadline))
    previous = sys.gettrace()
    sys.settrace(_deadline_tracer(deadline))
    try:
        out: list[str] = []
        size = 0
        pieces: Iterator[str] = compiled.generate(**variables)
        for piece in pieces:
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise _too_much(f"writes more than {MAX_OUTPUT_CHARS:,} characters")
            out.append(piece)
        return "".join(out)
    finally:
        sys.settrace(previous)
        _BUDGET.reset(token)


@functools.lru_cache(maxsize=64)
def compile_template(source: str) -> jinja2.Template:
    """Compile a context-block template in the sandbox.

    Args:
        source: Jinja2 template text (see the module docstring for its variables).

    Returns:
        The compiled template (cached per source text).

    Raises:
        InvalidInputError: The template has a syntax error; the message gives the line.
    """
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidInputError(
            f"RAG context template has a syntax error at line {exc.lineno}: {exc.message}"
        ) from None


def _views(
    hits: Sequence[Hit], *, project_rag: bool
) -> tuple[list[ContextHit], list[ContextSource]]:
    sources: dict[str, ContextSource] = {}
    views: list[ContextHit] = []
    for cited in cite(hits, project_rag=project_rag):
        hit = cited.hit
        if cited.label not in sources:
            sources[cited.label] = ContextSource(
                label=cited.label,
                source=_clean_label(cited.source),
                path=hit.path,
                source_ref=hit.source_ref,
            )
        views.append(
            ContextHit(
                label=cited.label,
                source=sources[cited.label].source,
                path=hit.path,
                source_ref=hit.source_ref,
                kind=hit.kind,
                score=hit.score,
                text=_clean_text(hit.text),
            )
        )
    return views, list(sources.values())


def render_context_block(
    hits: Sequence[Hit],
    template: str | jinja2.Template | None = None,
    *,
    project_rag: bool = True,
) -> str | None:
    """Render the ``<rag-context>`` system message for a turn.

    Args:
        hits: The hits to show, already filtered by ``minScore`` and in display order; from
            the project RAG, already resolved to their documents' current paths
            (:func:`~vancetope_rag.domain.citations.current_document_hits`).
        template: Template text or a template from :func:`compile_template`; ``None`` uses
            :data:`DEFAULT_TEMPLATE`.
        project_rag: The hits come from ``_documents`` (labels follow its citation rule).

    Returns:
        The message text, or ``None`` when there are no hits or the template renders only
        whitespace (then no block is added).

    Raises:
        InvalidInputError: The template has a syntax error or fails while rendering.
    """
    if not hits:
        return None
    if isinstance(template, jinja2.Template):
        compiled = template
    else:
        compiled = compile_template(DEFAULT_TEMPLATE if template is None else template)
    views, sources = _views(hits, project_rag=project_rag)
    try:
        text = _bounded_render(compiled, hits=views, sources=sources)
    except jinja2.UndefinedError as exc:
        raise InvalidInputError(f"RAG context template uses an undefined value: {exc}") from None
    except _OverBudget as exc:
        raise InvalidInputError(f"{OVER_BUDGET}: {exc}") from None
    except SecurityError as exc:
        raise InvalidInputError(f"RAG context template tried an unsafe operation: {exc}") from None
    except Exception as exc:  # user template: any failure is an input error, not a crash
        raise InvalidInputError(
            f"RAG context template failed to render: {type(exc).__name__}: {exc}"
        ) from None
    return text if text.strip() else None


def check_template_cost(source: str) -> None:
    """Render ``source`` once on sample hits (five excerpts of a typical chunk's size) and
    refuse it when that already breaks a bound: a recipe's template is checked at load, so
    a runaway one fails there, with a clear error, not in every turn.

    Raises:
        InvalidInputError: The template is too costly (or has a syntax error). Other render
            failures (a value the sample lacks) are left to the turn.
    """
    sample = [
        Hit(
            score=0.9 - i / 10,
            text="Sample excerpt text. " * 50,
            source_ref=f"s{i}",
            path=f"documents/sample-{i}.md",
        )
        for i in range(5)
    ]
    try:
        render_context_block(sample, compile_template(source))
    except InvalidInputError as exc:
        if exc.message.startswith(OVER_BUDGET) or "syntax error" in exc.message:
            raise
