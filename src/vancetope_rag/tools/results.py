"""How a ``rag_*`` tool call's outcome reaches the model: arguments checked, errors flagged.

A model's arguments are checked against the tool's schema (:mod:`vancetope_rag.tools.schemas`)
before the tool body runs: a missing, unknown or mistyped argument answers a
:class:`~vancetope_rag.errors.ToolArgumentError` that names the parameter (``"parameter"`` in
the result), never a Python ``TypeError``. Every failure — that one, any ``RagError`` the body
raises, or an unexpected exception — comes back as a JSON result (``{"error", "code"}``) with
LlamaIndex's ``ToolOutput.is_error`` set, so an agent runtime and the model both see the call
failed and can retry, while the turn goes on.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from llama_index.core.tools import FunctionTool, ToolOutput
from pydantic import BaseModel, ValidationError

from vancetope_rag.errors import RagError, ToolArgumentError
from vancetope_rag.secrets import get_logger, redact

log = get_logger(__name__)


class ToolFailure(str):
    """A tool result (JSON text) that reports a failure: :class:`RagTool` flags it."""

    __slots__ = ()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _type_of(schema: type[BaseModel], name: str) -> str:
    prop = schema.model_json_schema().get("properties", {}).get(name, {})
    kinds = [p.get("type") for p in prop.get("anyOf", [prop])]
    return " or ".join(k for k in kinds if k and k != "null") or "a value"


def check_arguments(
    tool_name: str, schema: type[BaseModel], params: list[str], args: tuple[Any, ...], kwargs: Any
) -> dict[str, Any]:
    """The call's arguments by name, once each is known, present when required and of its
    schema's type (strict: ``"5"`` is not an integer).

    Raises:
        ToolArgumentError: Naming the first parameter that is wrong.
    """
    known = ", ".join(params) or "none"
    if len(args) > len(params):
        raise ToolArgumentError(
            f"{tool_name} takes its arguments by name ({known}), got {len(args)} positional",
            parameter=params[-1] if params else "",
        )
    given = dict(zip(params, args, strict=False))
    for name, value in kwargs.items():
        if name in given:
            raise ToolArgumentError(f"parameter {name!r} given twice", parameter=name)
        given[name] = value
    for name in given:
        if name not in params:
            raise ToolArgumentError(
                f"{tool_name} has no parameter {name!r}; its parameters are: {known}",
                parameter=name,
            )
    try:
        schema.model_validate(given, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else ""
        field = schema.model_fields.get(name)
        if first["type"] == "missing":
            about = f": {field.description}" if field and field.description else ""
            raise ToolArgumentError(
                f"{tool_name}: the required parameter {name!r} is missing"
                f" ({_type_of(schema, name)}){about}",
                parameter=name,
            ) from None
        raise ToolArgumentError(
            f"{tool_name}: parameter {name!r} is wrong: {first['msg']} "
            f"(got {_shown(given.get(name))}; expected {_type_of(schema, name)})",
            parameter=name,
        ) from None
    return given


def tool_body(fn: Callable[..., Any], schema: type[BaseModel]) -> Callable[..., str]:
    """``fn`` as a tool body: arguments checked, the result as JSON text, any failure as a
    :class:`ToolFailure` the model can read."""
    name = fn.__name__
    signature = inspect.signature(fn)
    params = [p for p in signature.parameters if p != "self"]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        try:
            given = check_arguments(name, schema, params, args, kwargs)
            return json.dumps(fn(**given), ensure_ascii=False, default=str)
        except ToolArgumentError as exc:
            bad = {"error": redact(exc.message), "code": exc.code, "parameter": exc.parameter}
            return ToolFailure(json.dumps(bad, ensure_ascii=False))
        except RagError as exc:
            failure = {"error": redact(exc.message), "code": exc.code}
            cause = getattr(exc, "cause", None)
            if isinstance(cause, str):  # a bridge error names the extraction's own code
                failure["cause"] = cause
            return ToolFailure(json.dumps(failure))
        except Exception as exc:  # never crash the turn
            log.exception("tool %s failed", name)
            error = f"internal error: {type(exc).__name__}"
            return ToolFailure(json.dumps({"error": error, "code": "INTERNAL"}))

    # The parameters, and a catch-all: LlamaIndex's call_tool binds a model's arguments to
    # this signature first and, for a one-parameter tool, passes one it cannot bind
    # positionally (rag_list(name="x") would be rag_list(projectId="x")); with the catch-all
    # every name reaches check_arguments, which names the wrong one.
    catch_all = inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD)
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), catch_all]
    )
    return wrapper


class RagTool(FunctionTool):
    """A LlamaIndex ``FunctionTool`` whose failed calls come back with ``is_error=True``."""

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return _flagged(super().call(*args, **kwargs))

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return _flagged(await super().acall(*args, **kwargs))


def _flagged(output: ToolOutput) -> ToolOutput:
    output.is_error = isinstance(output.raw_output, ToolFailure)
    return output
