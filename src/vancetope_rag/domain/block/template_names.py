"""What a ``<rag-context>`` template may name, checked on its parsed tree before it runs.

The sandbox refuses ``x.__class__`` only when a render reaches it, and a template that names
a variable no turn has fails only then: either kind of template would load, then give every
turn (or every turn that takes that branch) no block. What can be decided from the text alone
is refused when the template is compiled, naming the line:

* attributes the sandbox never allows: any ``_`` name, the generator and coroutine internals
  (``gi_frame``…), ``mro`` of the type globals (``dict``, ``namespace``…), reached by
  ``.name``, ``['name']``, ``|attr('name')``, an attribute argument of a filter
  (``|sort(attribute='a.__class__')``, ``|selectattr('__x')``…) or a field of a literal
  format string (``'{0.__class__}'.format(…)``);
* a variable no render defines (a template sees ``hits`` and ``sources``, and Jinja's
  globals), unless the template only asks whether it ``is defined``;
* a field that hits or sources do not have, on a loop variable over them or on
  ``hits[0]`` / ``hits|first``.

Names computed while rendering (``x|attr(a ~ b)``) are left to the sandbox, and a load-time
sample render (``check_template_cost``) catches those it reaches.
"""

from __future__ import annotations

import _string  # type: ignore[import-not-found, unused-ignore]  # str.format's field parser
import re
import string
from collections.abc import Iterator

from jinja2 import meta, nodes
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
)

from vancetope_rag.errors import InvalidInputError

__all__ = ["UNSAFE", "check_template_names"]

#: How a refusal by the sandbox starts (at load and in a render alike).
UNSAFE = "RAG context template tried an unsafe operation"

#: What a render passes to a template (``render_context_block``).
VARIABLES = ("hits", "sources")

_INTERNAL = frozenset(
    UNSAFE_GENERATOR_ATTRIBUTES | UNSAFE_COROUTINE_ATTRIBUTES | UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
)
#: Globals that are types: ``mro`` of a type is refused by the sandbox.
_TYPE_GLOBALS = frozenset(["dict", "cycler", "joiner", "namespace"])
#: Filters that take an attribute name (dotted: ``a.b``), at this position after the value;
#: any filter's ``attribute=`` keyword counts as well.
_ATTRIBUTE_ARG = {
    "attr": 0,
    "selectattr": 0,
    "rejectattr": 0,
    "groupby": 0,
    "sum": 0,
    "unique": 1,
    "min": 1,
    "max": 1,
    "sort": 2,
}
#: Filters whose result is one item of the sequence they are given.
_ITEM_FILTERS = frozenset(["first", "last", "random"])


def check_template_names(tree: nodes.Template, fields: dict[str, tuple[str, ...]]) -> None:
    """Refuse what ``tree`` names that no render could reach (see the module docstring).

    Args:
        tree: The parsed template.
        fields: The fields of the items of each variable (``{"hits": ("label", …)}``).

    Raises:
        InvalidInputError: Naming the line and what is wrong.
    """
    for node, name in _attribute_names(tree):
        if name.startswith("_") or name in _INTERNAL or _is_type_mro(node, name):
            raise InvalidInputError(
                f"{UNSAFE} at line {node.lineno}: {name!r} is not reachable from a template "
                "(no '_' attributes nor Python internals); use the documented fields of hits "
                "and sources (label, source, path, text, score…)"
            )
    _refuse_undefined_variables(tree)
    _refuse_unknown_fields(tree, fields)


def _attribute_names(tree: nodes.Template) -> Iterator[tuple[nodes.Node, str]]:
    """Every attribute name ``tree`` reaches by a literal, with the node that names it."""
    for node in tree.find_all(nodes.Getattr):
        yield node, node.attr
    for item in tree.find_all(nodes.Getitem):
        if isinstance(item.arg, nodes.Const) and isinstance(item.arg.value, str):
            yield item, item.arg.value
    for used in tree.find_all(nodes.Filter):
        for value in _filter_attributes(used):
            for part in re.split(r"[.,]", value):  # 'a.b', and sort's 'a,b' of several
                yield used, part
    for call in tree.find_all(nodes.Call):
        for part in _format_fields(call):
            yield call, part


def _filter_attributes(node: nodes.Filter) -> Iterator[str]:
    position = _ATTRIBUTE_ARG.get(node.name)
    given: list[nodes.Expr] = [k.value for k in node.kwargs if k.key == "attribute"]
    if position is not None and len(node.args) > position:
        given.append(node.args[position])
    for arg in given:
        if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
            yield arg.value


def _format_fields(node: nodes.Call) -> Iterator[str]:
    """The attribute and item names in the fields of ``'…'.format(…)`` on a literal string."""
    target = node.node
    if not (
        isinstance(target, nodes.Getattr)
        and target.attr in ("format", "format_map")
        and isinstance(target.node, nodes.Const)
        and isinstance(target.node.value, str)
    ):
        return
    pending = [target.node.value]
    while pending:
        try:
            parsed = list(string.Formatter().parse(pending.pop()))
        except ValueError:
            continue  # a malformed format string fails in the render, with its own message
        for _, field, spec, _ in parsed:
            if spec:
                pending.append(spec)  # '{0:{1.x}}': the spec holds fields too
            if not field:
                continue
            try:
                _, rest = _string.formatter_field_name_split(field)
                keys = [key for _, key in rest]
            except ValueError:
                continue
            yield from (key for key in keys if isinstance(key, str))


def _is_type_mro(node: nodes.Node, name: str) -> bool:
    return (
        name == "mro"
        and isinstance(node, nodes.Getattr)
        and isinstance(node.node, nodes.Name)
        and node.node.name in _TYPE_GLOBALS
    )


def _refuse_undefined_variables(tree: nodes.Template) -> None:
    undeclared = meta.find_undeclared_variables(tree) - set(VARIABLES)
    if not undeclared:
        return
    asked = {
        id(test.node)
        for test in tree.find_all(nodes.Test)
        if test.name in ("defined", "undefined") and isinstance(test.node, nodes.Name)
    }
    for name in tree.find_all(nodes.Name):
        if name.ctx == "load" and name.name in undeclared and id(name) not in asked:
            raise InvalidInputError(
                f"RAG context template uses an undefined variable {name.name!r} at line "
                f"{name.lineno}: a template sees {' and '.join(VARIABLES)} (and Jinja's "
                "globals such as range), so every turn would render no block"
            )


def _refuse_unknown_fields(tree: nodes.Template, fields: dict[str, tuple[str, ...]]) -> None:
    for loop in tree.find_all(nodes.For):
        if isinstance(loop.target, nodes.Name) and isinstance(loop.iter, nodes.Name):
            known = fields.get(loop.iter.name)
            if known is not None:
                for body in (*loop.body, *loop.else_, *([loop.test] if loop.test else [])):
                    _check_fields_of(body, loop.target.name, loop.iter.name, known)
    for node in _field_reads(tree):
        item, of = node.node, None
        if (
            isinstance(item, nodes.Getitem)
            and isinstance(item.node, nodes.Name)
            and isinstance(item.arg, nodes.Const)
            and isinstance(item.arg.value, int)
        ):
            of = item.node.name  # hits[0].x
        elif (
            isinstance(item, nodes.Filter)
            and item.name in _ITEM_FILTERS
            and isinstance(item.node, nodes.Name)
        ):
            of = item.node.name  # (hits|first).x
        if of in fields:
            _check_field(node, of, fields[of])


def _field_reads(tree: nodes.Node) -> Iterator[nodes.Getattr | nodes.Getitem]:
    yield from tree.find_all(nodes.Getattr)
    yield from tree.find_all(nodes.Getitem)


def _check_fields_of(body: nodes.Node, var: str, of: str, known: tuple[str, ...]) -> None:
    reads = [body] if isinstance(body, nodes.Getattr | nodes.Getitem) else []
    for node in (*reads, *_field_reads(body)):  # the loop's own test may be one read
        if isinstance(node.node, nodes.Name) and node.node.name == var:
            _check_field(node, of, known)


def _check_field(node: nodes.Getattr | nodes.Getitem, of: str, known: tuple[str, ...]) -> None:
    if isinstance(node, nodes.Getattr):
        name: object = node.attr
    elif isinstance(node.arg, nodes.Const):
        name = node.arg.value
    else:
        return
    if isinstance(name, str) and name not in known:
        raise InvalidInputError(
            f"RAG context template uses an undefined field of {of} at line {node.lineno}: "
            f"{name!r}; their fields are {', '.join(known)}"
        )
