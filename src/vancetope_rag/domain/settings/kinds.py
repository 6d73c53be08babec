"""The types of the cascade setting registry: a setting's kind and its specification."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["SettingKind", "SettingSpec"]


class SettingKind(enum.StrEnum):
    """How a setting's value is validated and coerced."""

    BOOL = "bool"
    AUTO_INJECT = "autoInject"
    PROVIDER = "provider"  # an open set: plugins add providers
    STRING = "string"
    URL = "url"
    INT = "int"
    FLOAT = "float"
    MIN_SCORE = "minScore"  # a cosine (FLOAT within the bounds) or "auto"
    RELEVANCE_CUT = "relevanceCut"  # "auto", "off" or a cosine gap (0-2)
    CHOICE = "choice"  # one of SettingSpec.choices, any case


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
    #: The accepted values of a ``CHOICE`` setting (lower case).
    choices: tuple[str, ...] = ()
