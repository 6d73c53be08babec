"""The JSON the CLI, the REST API and the tools answer: camelCase keys of snake_case
attributes."""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def camel_json(obj: Any, *names: str) -> dict[str, Any]:
    """``{"someName": obj.some_name, …}`` for ``names``, in their order; every field of the
    dataclass ``obj``, in declared order, when no name is given."""
    keys = names or tuple(f.name for f in fields(obj))
    return {camel(name): getattr(obj, name) for name in keys}


def camel(name: str) -> str:
    """``retry_at`` -> ``retryAt``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)
