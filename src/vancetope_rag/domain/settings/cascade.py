"""AutoInject resolution (spec §5): the ON/OFF/AUTO stance of recipes and cascade scopes.

Pure rules, no I/O. A recipe ``ON``/``OFF`` wins; otherwise the innermost scope with a value
of ``rag.autoInject.enabled`` decides, where an explicit ``AUTO`` means "no enforcement here"
and masks an outer ``ON``/``OFF``; nothing decisive anywhere means ``OFF``. The setting
registry and the plain innermost-wins rule for every key are in
:mod:`vancetope_rag.domain.settings.registry`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from vancetope_rag.errors import SettingError

__all__ = [
    "AutoInject",
    "Decider",
    "explain_auto_inject",
    "parse_auto_inject",
    "resolve_auto_inject",
]

Decider = Literal["recipe", "project", "tenant", "default"]


class AutoInject(enum.StrEnum):
    """The three-valued AutoInject stance of a recipe or a cascade scope."""

    ON = "ON"
    OFF = "OFF"
    AUTO = "AUTO"


_AUTO_INJECT_WORDS: Mapping[str, AutoInject] = MappingProxyType(
    {
        "on": AutoInject.ON,
        "off": AutoInject.OFF,
        "auto": AutoInject.AUTO,
        # Legacy booleans (spec §5): the setting key stayed ``.enabled``.
        "true": AutoInject.ON,
        "false": AutoInject.OFF,
    }
)
_AUTO_INJECT_ACCEPTED = "ON, OFF, AUTO (or legacy true/false)"


def parse_auto_inject(value: object, *, where: str) -> AutoInject | None:
    """Read an AutoInject stance from a recipe param or a setting value.

    Args:
        value: ``None``, a bool (legacy, and what YAML 1.1 makes of bare ``ON``/``OFF``), an
            :class:`AutoInject`, or a string ``on``/``off``/``auto``/``true``/``false`` in any
            case, surrounding whitespace allowed.
        where: What is being parsed (file and key, or setting key), used in the error message.

    Returns:
        The stance, or ``None`` when ``value`` is ``None`` (not set).

    Raises:
        SettingError: ``value`` is none of the accepted forms.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return AutoInject.ON if value else AutoInject.OFF
    if isinstance(value, str):
        found = _AUTO_INJECT_WORDS.get(value.strip().lower())
        if found is not None:
            return found
    raise SettingError(f"{where} must be one of {_AUTO_INJECT_ACCEPTED}, got {value!r}")


def explain_auto_inject(
    recipe: AutoInject | None,
    project: AutoInject | None,
    tenant: AutoInject | None,
) -> tuple[bool, Decider]:
    """Resolve AutoInject (spec §5, innermost wins) and say which level decided.

    1. A recipe ``ON``/``OFF`` wins: the RAG stance is part of the recipe's identity.
    2. Otherwise the innermost scope *with a value* of ``rag.autoInject.enabled`` decides:
       ``ON``/``OFF`` decide; an explicit ``AUTO`` means "no enforcement at this scope" and
       masks an outer ``ON``/``OFF`` back to the default. ``None`` defers outwards.
    3. Nothing decisive anywhere: hard default ``OFF``.

    Args:
        recipe: The recipe's ``params.rag.autoInject``, ``None`` when absent.
        project: The project-scope setting, ``None`` when not set.
        tenant: The tenant-scope setting, ``None`` when not set.

    Returns:
        ``(enabled, decider)`` where ``decider`` is ``"recipe"``, ``"project"``, ``"tenant"``
        or ``"default"``.
    """
    if recipe is AutoInject.ON or recipe is AutoInject.OFF:
        return recipe is AutoInject.ON, "recipe"
    if project is AutoInject.AUTO:
        return False, "default"  # explicit AUTO masks the tenant: "no enforcement here"
    if project is not None:
        return project is AutoInject.ON, "project"
    if tenant is AutoInject.ON or tenant is AutoInject.OFF:
        return tenant is AutoInject.ON, "tenant"
    return False, "default"


def resolve_auto_inject(
    recipe: AutoInject | None,
    project: AutoInject | None,
    tenant: AutoInject | None,
) -> bool:
    """Whether AutoInject is on for a turn; see :func:`explain_auto_inject` for the rules.

    Args:
        recipe: The recipe's ``params.rag.autoInject``, ``None`` when absent.
        project: The project-scope ``rag.autoInject.enabled``, ``None`` when not set.
        tenant: The tenant-scope ``rag.autoInject.enabled``, ``None`` when not set.

    Returns:
        ``True`` when the ``<rag-context>`` block should be injected.
    """
    return explain_auto_inject(recipe, project, tenant)[0]
