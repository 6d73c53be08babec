"""Render the ``<rag-context>`` system message (spec §5 step 5) with Jinja2.

Templates may come from recipes, i.e. from users, so they run in Jinja's sandbox with
``StrictUndefined`` (a misspelled variable is an error, not an empty string) and without
autoescaping (the output is plain text for a model, not HTML). The sandbox keeps a template
from reaching Python; :class:`_BoundedEnvironment` also keeps it from running without end or
filling memory: ``range()`` calls of one render share a budget of :data:`RANGE_BUDGET` items,
``*`` and ``**`` cannot build huge values, filter widths and format widths are capped, the
output may not pass :data:`MAX_OUTPUT_CHARS`, and a render of any template but
:data:`DEFAULT_TEMPLATE` (the engine's own, one pass over the hits) stops after
:data:`RENDER_SECONDS` (a trace on the template's own frames, so loops over strings or lists
are bounded too).

Template variables:

* ``hits``: list of :class:`ContextHit` (``label``, ``source``, ``path``, ``source_ref``,
  ``kind``, ``score``, ``text``), in the order given.
* ``sources``: list of :class:`ContextSource` (``label``, ``source``, ``path``,
  ``source_ref``), one per distinct source, in order of first appearance.

``label`` is ``S1``, ``S2``... numbered by first appearance of the source, so every hit of one
document carries the same label and the model can cite it; what a label names is the rule of
:mod:`vancetope_rag.domain.block.citations` (the ``rag_query`` tool numbers with the same code).
``text`` is already cleaned: trailing whitespace stripped, runs of blank lines collapsed, and
``<rag-context>`` tags and their lookalikes neutralised (see :func:`neutralise_tags`);
``source``, ``path`` and ``source_ref`` are on one line, capped, with tags and ``[S#]``
sequences escaped (:func:`~vancetope_rag.domain.block.lookalikes.clean_label`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from contextvars import ContextVar
from dataclasses import dataclass
from functools import update_wrapper
from types import FrameType
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment, SandboxedEscapeFormatter, SandboxedFormatter
from markupsafe import Markup

from vancetope_rag.domain.block.citations import cite
from vancetope_rag.domain.block.lookalikes import clean_label, neutralise_tags
from vancetope_rag.domain.block.template_names import UNSAFE, check_template_names
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
    return clean_label(label)


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


def _text_size(value: object, limit: int = MAX_OUTPUT_CHARS) -> int:
    """About how many characters ``str(value)`` has, counted without building it and only up
    to just past ``limit`` (so the count costs at most ``limit`` steps). Containers count
    their items as often as they hold them (a list of one string a thousand times counts it
    a thousand times), a container holding itself once; nesting past 32 levels counts as
    over the limit."""
    total = 0

    def walk(item: object, depth: int, path: set[int]) -> None:
        nonlocal total
        if total > limit:
            return
        if isinstance(item, str | bytes | bytearray):
            total += len(item) + (3 if depth else 0)
        elif isinstance(item, bool | float | None):
            total += 8
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 2
        elif isinstance(item, list | tuple | set | frozenset | dict | Mapping):
            if depth > 32:
                total = limit + 1
                return
            if id(item) in path:  # printed as [...]
                total += 5
                return
            path.add(id(item))
            total += 2
            parts: Any = item.items() if isinstance(item, Mapping) else item
            for part in parts:
                if total > limit:
                    break
                total += 2
                if isinstance(item, Mapping):
                    walk(part[0], depth + 1, path)
                    walk(part[1], depth + 1, path)
                else:
                    walk(part, depth + 1, path)
            path.discard(id(item))
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            total += 32
            for field in dataclasses.fields(item):
                walk(getattr(item, field.name, None), depth + 1, path)
        else:
            total += 64

    walk(value, 0, set())
    return total


def _refuse_over(size: int) -> None:
    if size > MAX_OUTPUT_CHARS:
        raise _too_much(f"builds a value over {MAX_OUTPUT_CHARS:,} characters")


def _int_arg(
    args: Sequence[Any], kwargs: Mapping[str, Any], pos: int, key: str, default: int
) -> int:
    value = args[pos] if len(args) > pos else kwargs.get(key, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _replaced_size(text: Any, old: Any, new: Any, count: Any) -> int:
    """Length of ``text.replace(old, new, count)``, from the operands only."""
    kinds = str | bytes | bytearray
    if not (isinstance(text, kinds) and isinstance(old, kinds) and isinstance(new, kinds)):
        return 0
    try:
        times = text.count(old) if old else len(text) + 1  # type: ignore[arg-type]
    except TypeError:  # str and bytes mixed: the call itself fails
        return 0
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        times = min(times, count)
    return len(text) + times * max(len(new) - len(old), 0)


_SPEC = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d*)(?:\.(\*|\d*))?[a-zA-Z%]")


def _percent_size(template: Any, values: Any) -> int:
    """About the length of ``template % values``: every conversion may show the largest value,
    padded to the largest width (``*`` widths come from the values)."""
    if not isinstance(template, str | bytes):
        return 0
    fmt = template.decode("latin-1") if isinstance(template, bytes) else template
    specs = _SPEC.findall(fmt)
    if not specs:
        return len(fmt)
    if isinstance(values, Mapping):
        items: list[Any] = list(values.values())
    elif isinstance(values, tuple):
        items = list(values)
    else:
        items = [values]
    widths = [int(w) for spec in specs for w in spec if w.isdigit()]
    if any("*" in spec for spec in specs):
        widths += [abs(v) for v in items if isinstance(v, int) and not isinstance(v, bool)]
    largest = max((_text_size(v) for v in items), default=0)
    return len(fmt) + len(specs) * (largest + max(widths, default=0))


_GROWING_CONTAINER_METHODS = frozenset(
    ["append", "insert", "extend", "update", "setdefault", "add"]
)
_PLAIN_CODECS = frozenset(["utf-8", "utf8", "ascii", "latin-1", "latin1", "iso-8859-1"])


def _method_size(owner: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The size of what calling ``owner.name(*args, **kwargs)`` would build (0: nothing big)."""
    if isinstance(owner, str | bytes | bytearray):
        size = len(owner)
        if name in ("ljust", "rjust", "center", "zfill"):
            return max(size, _int_arg(args, kwargs, 0, "width", 0))
        if name == "expandtabs":
            tab = "\t" if isinstance(owner, str) else b"\t"
            return size + owner.count(tab) * max(_int_arg(args, kwargs, 0, "tabsize", 8), 0)  # type: ignore[arg-type]
        if name == "replace" and len(args) >= 2:
            count = args[2] if len(args) > 2 else kwargs.get("count", -1)
            return _replaced_size(owner, args[0], args[1], count)
        if name == "join" and args and isinstance(args[0], list | tuple):
            parts = args[0]
            return sum(_text_size(p) for p in parts) + len(owner) * max(len(parts) - 1, 0)
        if name == "translate" and args and isinstance(owner, str):
            table = args[0]
            values = table.values() if isinstance(table, Mapping) else table
            if not isinstance(table, Mapping | Sequence):
                values = ()
            longest = max((len(v) for v in values if isinstance(v, str)), default=1)
            return size * max(longest, 1)
        if name == "hex":
            return size * 3
        if name == "encode" and isinstance(owner, str):
            encoding = str(args[0] if args else kwargs.get("encoding", "utf-8")).lower()
            errors = args[1] if len(args) > 1 else kwargs.get("errors", "strict")
            plain = owner.isascii() and encoding in _PLAIN_CODECS and errors == "strict"
            return size if plain else size * 10
        if name == "decode":
            errors = args[1] if len(args) > 1 else kwargs.get("errors", "strict")
            return size if errors in ("strict", "ignore", "replace") else size * 4
        return 0
    if isinstance(owner, list | dict | set) and name in _GROWING_CONTAINER_METHODS:
        return _text_size(owner) + sum(_text_size(a) for a in (*args, *kwargs.values()))
    return 0


def _materialised(owner: Any, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with the one iterable of ``join``/``extend``/``update`` made a list, so that
    its size can be counted before the call (and the call still sees every item)."""
    if name in ("join", "extend", "update") and args and not isinstance(args[0], Sized):
        return (list(args[0]), *args[1:])
    return args


class _BoundedFormatting:
    """``str.format`` fields that may not be wide, nor add up past the output bound."""

    _built = 0

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        _refuse_over(_text_size(value))
        return super().convert_field(value, conversion)  # type: ignore[misc]

    def format_field(self, value: Any, format_spec: str) -> Any:
        widths = [int(w) for w in re.findall(r"\d+", format_spec)]
        if any(w > MAX_FILTER_ARG for w in widths):
            raise _too_much("formats with a width of five digits or more")
        self._built += _text_size(value) + max(widths, default=0)
        _refuse_over(self._built)
        return super().format_field(value, format_spec)  # type: ignore[misc]


class _BoundedFormatter(_BoundedFormatting, SandboxedFormatter):
    pass


class _BoundedEscapeFormatter(_BoundedFormatting, SandboxedEscapeFormatter):
    pass


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles ``a ~ b`` to a call that counts the parts' sizes before joining them."""

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _BoundedEnvironment(SandboxedEnvironment):
    """The sandbox, with bounds on what one render may build (see the module docstring)."""

    intercepted_binops = frozenset(["*", "**", "+", "%"])
    code_generator_class = _BoundedCodeGenerator

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int | float) and abs(right) > MAX_EXPONENT:
            raise _too_much(f"raises to a power over {MAX_EXPONENT}")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _sized(seq) and isinstance(n, int):
                    _refuse_over(_text_size(seq) * n)
        if operator == "+" and _sized(left) and _sized(right):
            _refuse_over(_text_size(left) + _text_size(right))
        if operator == "%":
            if isinstance(left, str) and _FORMAT_WIDTH.search(left):
                raise _too_much("formats with a width of five digits or more")
            _refuse_over(_percent_size(left, right))
        return super().call_binop(context, operator, left, right)

    def bounded_concat(self, values: Sequence[Any]) -> str:
        _refuse_over(sum(_text_size(v) for v in values))
        return "".join(map(str, values))

    def call(
        __self,  # jinja's own spelling: names a caller's keyword arguments cannot clash with
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, types.BuiltinMethodType) and owner is not None:
            name = __obj.__name__
            args = _materialised(owner, name, args)
            _refuse_over(_method_size(owner, name, args, kwargs))
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        owner: str = value.__self__
        if _FORMAT_WIDTH.search(owner):
            raise _too_much("formats with a width of five digits or more")
        is_format_map = value.__name__ == "format_map"
        environment = self

        def bounded(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                mapping: Any = args[0]
                args, kwargs = (), mapping
            formatter: SandboxedFormatter
            if isinstance(owner, Markup):
                formatter = _BoundedEscapeFormatter(environment, escape=owner.escape)
            else:
                formatter = _BoundedFormatter(environment)
            return type(owner)(formatter.vformat(owner, args, kwargs))

        return update_wrapper(bounded, value)


def _finalize(value: Any) -> Any:
    """Every ``{{ value }}``: refused before it is turned into text when that text is too big."""
    _refuse_over(_text_size(value))
    return value


#: Filters whose size follows from their arguments; checked before they run.
_STRINGIFYING_FILTERS = frozenset(
    ["string", "pprint", "tojson", "e", "escape", "forceescape", "urlencode", "wordwrap", "xmlattr"]
)


def _filter_size(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    if not args:
        return 0
    value = args[0]
    if name in _STRINGIFYING_FILTERS:
        return _text_size(value) * (2 if name == "wordwrap" else 1)
    if name == "join" and isinstance(value, list | tuple):
        sep = args[1] if len(args) > 1 else kwargs.get("d", "")
        return sum(_text_size(v) for v in value) + _text_size(sep) * len(value)
    if name == "replace" and len(args) >= 3:
        count = args[3] if len(args) > 3 else kwargs.get("count")
        text = value if isinstance(value, str) else ""  # the filter stringifies other values
        return _replaced_size(text, args[1], args[2], count) or _text_size(value)
    if name == "indent":
        text = value if isinstance(value, str) else ""
        width = args[1] if len(args) > 1 else kwargs.get("width", 4)
        pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        return len(text) + (text.count("\n") + 1) * pad
    if name == "format":
        return _percent_size(value, kwargs or tuple(args[1:]))
    return 0


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` refusing huge numeric arguments (widths, counts) and huge results. Compiled
    templates call filters straight from ``environment.filters``, so the bound sits there."""

    passes_first = getattr(fn, "jinja_pass_arg", None) is not None

    @functools.wraps(fn)  # keeps jinja's pass_context/pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        own = args[1:] if passes_first else args
        if name == "join" and own and not isinstance(own[0], Sized):
            own = (list(own[0]), *own[1:])
            args = (*args[: len(args) - len(own)], *own)
        _refuse_over(_filter_size(name, own, kwargs))
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
        finalize=_finalize,
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


def _bounded_render(compiled: jinja2.Template, *, traced: bool = True, **variables: Any) -> str:
    """Render within the budgets: range items, output size and time (``traced=False``: no
    deadline trace, for :data:`DEFAULT_TEMPLATE` only; see :func:`render_context_block`)."""
    deadline = time.monotonic() + RENDER_SECONDS
    token = _BUDGET.set(_Budget(RANGE_BUDGET, deadline))
    previous = sys.gettrace()
    if traced:
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
        if traced:
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
        InvalidInputError: The template has a syntax error, names an attribute the sandbox
            forbids (``__class__``, any ``_`` name), a variable no render has or a field
            hits and sources lack (:mod:`~vancetope_rag.domain.block.template_names`); the
            message gives the line.
    """
    env = _environment()
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise InvalidInputError(
            f"RAG context template has a syntax error at line {exc.lineno}: {exc.message}"
        ) from None
    check_template_names(tree, _FIELDS)
    return env.from_string(tree)


#: The fields a template may read of each variable's items.
_FIELDS = {
    "hits": tuple(f.name for f in dataclasses.fields(ContextHit)),
    "sources": tuple(f.name for f in dataclasses.fields(ContextSource)),
}


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
                path=None if hit.path is None else _clean_label(hit.path),
                source_ref=_clean_label(hit.source_ref),
            )
        views.append(
            ContextHit(
                label=cited.label,
                source=sources[cited.label].source,
                path=None if hit.path is None else _clean_label(hit.path),
                source_ref=_clean_label(hit.source_ref),
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
            (:func:`~vancetope_rag.domain.block.citations.current_document_hits`).
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
    # The deadline trace (a Python call on every call the render makes, ~0.25 ms of a 0.4 ms
    # render of five excerpts) guards against templates from recipes and plugins; the
    # engine's own template makes one pass over the hits, so it runs untraced. The output
    # size bound holds for every template.
    own = template is None or (isinstance(template, str) and template == DEFAULT_TEMPLATE)
    try:
        text = _bounded_render(compiled, traced=not own, hits=views, sources=sources)
    except jinja2.UndefinedError as exc:
        raise InvalidInputError(f"RAG context template uses an undefined value: {exc}") from None
    except _OverBudget as exc:
        raise InvalidInputError(f"{OVER_BUDGET}: {exc}") from None
    except SecurityError as exc:
        raise InvalidInputError(f"{UNSAFE}: {exc}") from None
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
        InvalidInputError: The template is too costly, tries an operation the sandbox forbids
            (it would fail in every turn), or has a syntax error. Other render failures (a
            value the sample lacks) are left to the turn.
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
        if exc.message.startswith((OVER_BUDGET, UNSAFE)) or "syntax error" in exc.message:
            raise
