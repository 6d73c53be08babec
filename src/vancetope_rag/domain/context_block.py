"""Render the ``<rag-context>`` system message (spec §5 step 5) with Jinja2.

Templates may come from recipes, i.e. from users, so they run in Jinja's sandbox with
``StrictUndefined`` (a misspelled variable is an error, not an empty string) and without
autoescaping (the output is plain text for a model, not HTML).

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
from collections.abc import Sequence
from dataclasses import dataclass

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


@functools.cache
def _environment() -> SandboxedEnvironment:
    return SandboxedEnvironment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
    )


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
        text = compiled.render(hits=views, sources=sources)
    except jinja2.UndefinedError as exc:
        raise InvalidInputError(f"RAG context template uses an undefined value: {exc}") from None
    except SecurityError as exc:
        raise InvalidInputError(f"RAG context template tried an unsafe operation: {exc}") from None
    except Exception as exc:  # user template: any failure is an input error, not a crash
        raise InvalidInputError(
            f"RAG context template failed to render: {type(exc).__name__}: {exc}"
        ) from None
    return text if text.strip() else None
