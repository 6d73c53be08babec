"""Cascade settings (spec §4.5) and AutoInject resolution (spec §5).

Pure rules, no I/O. Settings live at two scopes, tenant and project; the innermost scope that
has a value wins, else the spec default. ``rag.autoInject.enabled`` has an extra rule on top:
an explicit ``AUTO`` at a scope means "no enforcement here" and masks an outer ``ON``/``OFF``.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal
from urllib.parse import urlsplit

from vancetope_rag.errors import SettingError

__all__ = [
    "SETTINGS",
    "AutoInject",
    "Decider",
    "SettingKind",
    "SettingSpec",
    "decode_setting",
    "encode_setting",
    "explain_auto_inject",
    "mask_secret",
    "parse_auto_inject",
    "parse_setting_value",
    "resolve_auto_inject",
    "resolve_setting",
]

#: What :func:`mask_secret` shows instead of a secret's value.
SECRET_MASK = "********"

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


class SettingKind(enum.StrEnum):
    """How a setting's value is validated and coerced."""

    BOOL = "bool"
    AUTO_INJECT = "autoInject"
    PROVIDER = "provider"  # an open set: plugins add providers
    STRING = "string"
    URL = "url"
    INT = "int"
    FLOAT = "float"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One cascade setting key: its type, spec default and whether its value is a secret."""

    key: str
    kind: SettingKind
    default: object
    secret: bool = False
    description: str = ""
    #: Whether ``None`` (JSON ``null``) is a valid value.
    nullable: bool = False
    #: Inclusive bounds for ``INT``/``FLOAT`` settings.
    minimum: float | None = None
    maximum: float | None = None


def _specs(*specs: SettingSpec) -> Mapping[str, SettingSpec]:
    return MappingProxyType({spec.key: spec for spec in specs})


#: Every cascade setting key this package reads (spec §4.5 plus retrieval tuning).
SETTINGS: Mapping[str, SettingSpec] = _specs(
    SettingSpec(
        "rag.project.enabled",
        SettingKind.BOOL,
        True,
        description="Turns the project's _documents RAG on or off (indexer and AutoInject).",
    ),
    SettingSpec(
        "rag.project.includeSummaries",
        SettingKind.BOOL,
        True,
        description="Also write 'summary' chunks next to 'content' chunks.",
    ),
    SettingSpec(
        "rag.autoInject.enabled",
        SettingKind.AUTO_INJECT,
        None,
        nullable=True,
        description="AutoInject default for recipes without an ON/OFF stance (ON, OFF, AUTO).",
    ),
    SettingSpec(
        "ai.embedding.provider",
        SettingKind.PROVIDER,
        "none",
        description="Embedding backend for new RAGs; 'none' switches RAG off for the tenant.",
    ),
    SettingSpec(
        "ai.embedding.model",
        SettingKind.STRING,
        None,
        nullable=True,
        description="Embedding model name; empty means the provider's default.",
    ),
    SettingSpec(
        "ai.embedding.apiKey",
        SettingKind.STRING,
        None,
        secret=True,
        nullable=True,
        description="API key of the embedding provider (never shown).",
    ),
    SettingSpec(
        "ai.embedding.baseUrl",
        SettingKind.URL,
        None,
        nullable=True,
        description="Base URL of an OpenAI-compatible endpoint; empty means api.openai.com.",
    ),
    SettingSpec(
        "rag.topK",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=100,
        description="How many hits a query returns; empty means the built-in default.",
    ),
    SettingSpec(
        "rag.minScore",
        SettingKind.FLOAT,
        None,
        nullable=True,
        minimum=-1.0,
        maximum=1.0,
        description="Hits scoring below this cosine similarity are dropped.",
    ),
    SettingSpec(
        "rag.maxPerDocument",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=100,
        description="At most this many hits from one document.",
    ),
)

_PROVIDER_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_BOOL_WORDS: Mapping[str, bool] = MappingProxyType(
    {
        "true": True,
        "yes": True,
        "on": True,
        "1": True,
        "false": False,
        "no": False,
        "off": False,
        "0": False,
    }
)


def _spec(key: str) -> SettingSpec:
    spec = SETTINGS.get(key)
    if spec is None:
        raise SettingError(
            f"unknown setting {key!r}; known settings: {', '.join(sorted(SETTINGS))}"
        )
    return spec


def _bad(spec: SettingSpec, accepted: str, raw: object) -> SettingError:
    # A secret's value never appears in a message, not even a wrong one (it may be a real key).
    got = f"a {type(raw).__name__}" if spec.secret else repr(raw)
    return SettingError(f"{spec.key} must be {accepted}, got {got}")


def _bounds(spec: SettingSpec, what: str) -> str:
    return f"{what} from {spec.minimum:g} to {spec.maximum:g}"


def _in_bounds(spec: SettingSpec, value: float) -> bool:
    low = -math.inf if spec.minimum is None else spec.minimum
    high = math.inf if spec.maximum is None else spec.maximum
    return low <= value <= high


def parse_setting_value(key: str, raw: object) -> object:
    """Validate and coerce a user-supplied value for a cascade setting.

    Strings are accepted for every kind because the CLI passes everything as text
    (``"true"``, ``"0.4"``, ``"ON"``). For nullable keys, ``None`` and a blank string both
    mean ``None`` (no value at this scope).

    Args:
        key: A key of :data:`SETTINGS`.
        raw: The value as given by the user, the CLI or decoded JSON.

    Returns:
        The value in its canonical type: ``bool``, :class:`AutoInject`, ``str``, ``int``,
        ``float`` or ``None``.

    Raises:
        SettingError: The key is unknown (the message lists the known keys) or the value does
            not fit (the message names the key and the accepted form, never a secret's value).
    """
    spec = _spec(key)
    if spec.nullable and (raw is None or (isinstance(raw, str) and not raw.strip())):
        return None
    text = raw.strip() if isinstance(raw, str) else None
    kind = spec.kind

    if kind is SettingKind.BOOL:
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in _BOOL_WORDS:
            return _BOOL_WORDS[text.lower()]
        raise _bad(spec, "true or false", raw)

    if kind is SettingKind.AUTO_INJECT:
        return parse_auto_inject(raw, where=key)

    if kind is SettingKind.PROVIDER:
        if text is not None and _PROVIDER_RE.match(text):
            return text
        raise _bad(spec, "a lowercase provider name such as none, embedded, openai or gemini", raw)

    if kind is SettingKind.STRING:
        if text is not None:
            return text
        raise _bad(spec, "a string", raw)

    if kind is SettingKind.URL:
        if text is not None:
            try:
                parts = urlsplit(text)
            except ValueError:
                parts = None
            if parts is not None and parts.scheme in ("http", "https") and parts.netloc:
                return text
        raise _bad(spec, "an http:// or https:// URL", raw)

    if kind is SettingKind.INT:
        number: int | None = None
        if isinstance(raw, int) and not isinstance(raw, bool):
            number = raw
        elif text is not None and re.fullmatch(r"[+-]?\d+", text):
            number = int(text)
        if number is not None and _in_bounds(spec, number):
            return number
        raise _bad(spec, _bounds(spec, "an integer"), raw)

    if kind is SettingKind.FLOAT:
        real: float | None = None
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            real = float(raw)
        elif text is not None:
            try:
                real = float(text)
            except ValueError:
                real = None
        if real is not None and math.isfinite(real) and _in_bounds(spec, real):
            return real
        raise _bad(spec, _bounds(spec, "a number"), raw)

    raise AssertionError(f"unhandled setting kind {kind!r}")  # pragma: no cover


def encode_setting(key: str, value: object) -> str:
    """Validate a value and encode it as the JSON text a settings store keeps.

    Args:
        key: A key of :data:`SETTINGS`.
        value: The value, in any form :func:`parse_setting_value` accepts.

    Returns:
        JSON text, e.g. ``'true'``, ``'"ON"'``, ``'0.4'``, ``'null'``.

    Raises:
        SettingError: Unknown key or invalid value.
    """
    return json.dumps(parse_setting_value(key, value))


def decode_setting(key: str, stored: str) -> object:
    """Decode JSON text written by :func:`encode_setting` back to a validated value.

    Args:
        key: A key of :data:`SETTINGS`.
        stored: The JSON text from the settings store.

    Returns:
        The value in its canonical type (see :func:`parse_setting_value`).

    Raises:
        SettingError: Unknown key, text that is not JSON, or a stored value that is invalid.
    """
    spec = _spec(key)
    try:
        raw: object = json.loads(stored)
    except ValueError:
        shown = "" if spec.secret else f": {stored!r}"
        raise SettingError(f"stored value of {key} is not valid JSON{shown}") from None
    return parse_setting_value(key, raw)


def resolve_setting(key: str, project_value: object = None, tenant_value: object = None) -> object:
    """Resolve a setting over the cascade: the innermost scope with a value wins.

    ``None`` means "not set at this scope" (spec §4.5 reads ``null`` as "no enforcement at
    this scope"), so a project cannot null out a tenant value; it can only override it with
    another value. For ``rag.autoInject.enabled`` the result may be ``AUTO``, which still has
    to go through :func:`resolve_auto_inject`; ``resolve_auto_inject(r, p, t)`` equals
    ``resolve_auto_inject(r, resolve_setting(key, p, t), None)``.

    Args:
        key: A key of :data:`SETTINGS`.
        project_value: The decoded project-scope value, ``None`` when not set.
        tenant_value: The decoded tenant-scope value, ``None`` when not set.

    Returns:
        The project value, else the tenant value, else the spec default.

    Raises:
        SettingError: Unknown key.
    """
    spec = _spec(key)
    if project_value is not None:
        return project_value
    if tenant_value is not None:
        return tenant_value
    return spec.default


def mask_secret(key: str, value: object) -> object:
    """Hide a secret setting's value for display; other values pass through.

    Args:
        key: A key of :data:`SETTINGS`.
        value: The value to show.

    Returns:
        ``"********"`` for a set secret, else ``value`` unchanged (``None`` stays ``None``).

    Raises:
        SettingError: Unknown key.
    """
    if _spec(key).secret and value is not None:
        return SECRET_MASK
    return value
