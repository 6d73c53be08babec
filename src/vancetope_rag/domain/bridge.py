"""The rules of ``files_visualize``, the multimodal bridge (MM-Bridge): its budgets and hard
caps, the window of a file's sections one answer returns, how to continue past it, and the one
table that names an extraction failure in the spec's ``MM_BRIDGE_*`` codes.

Pure rules, no I/O. The budgets are the tool's only: indexing keeps its ``rag.extract.*``
ones. A budget comes from the cascade (project, then tenant), else from the engine's
environment default (``MM_BRIDGE_MAX_CHARS``, ``DOC_VISION_MAX_PAGES``,
``MM_BRIDGE_MAX_FRAMES``), else from the spec's default; whatever is asked, it is capped at the
spec's hard cap, and every answer states the limits it applied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain import limits
from vancetope_rag.domain.settings.kinds import SettingKind, SettingSpec
from vancetope_rag.errors import (
    BridgeDependencyMissingError,
    BridgeError,
    BridgeLimitError,
    BridgeUnsupportedTypeError,
    BridgeVisionNotConfiguredError,
    BridgeVisionUnavailableError,
    InvalidInputError,
    RagError,
)

__all__ = [
    "BRIDGE_SETTINGS",
    "BridgeLimits",
    "PageRange",
    "Window",
    "bridge_error",
    "resolve_limits",
    "window",
]

MAX_CHARS_KEY = "rag.bridge.maxChars"
VISION_PAGES_KEY = "rag.bridge.visionMaxPages"
MAX_FRAMES_KEY = "rag.bridge.maxFrames"

#: The settings of the tool; empty means the engine's environment default.
BRIDGE_SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec(
        MAX_CHARS_KEY,
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=limits.HARD_MAX_TEXT_CHARS,
        description="Characters one files_visualize answer returns (continue with its offset); "
        f"capped at {limits.BRIDGE_HARD_MAX_CHARS:,} whatever is set; empty: "
        "MM_BRIDGE_MAX_CHARS, else 40,000.",
    ),
    SettingSpec(
        VISION_PAGES_KEY,
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=10_000,
        description="PDF pages or images one files_visualize answer sends to the vision model "
        f"(pages with a text layer are read up to maxChars); capped at "
        f"{limits.BRIDGE_HARD_VISION_PAGES}; empty: DOC_VISION_MAX_PAGES, else 2.",
    ),
    SettingSpec(
        MAX_FRAMES_KEY,
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=10_000,
        description="Video frames one files_visualize answer describes; capped at "
        f"{limits.BRIDGE_HARD_MAX_FRAMES}; empty: MM_BRIDGE_MAX_FRAMES, else 6.",
    ),
)


@dataclass(frozen=True)
class _Budget:
    key: str
    env: str
    default: int
    cap: int


_BUDGETS = (
    _Budget(
        MAX_CHARS_KEY, "MM_BRIDGE_MAX_CHARS", limits.BRIDGE_MAX_CHARS, limits.BRIDGE_HARD_MAX_CHARS
    ),
    _Budget(
        VISION_PAGES_KEY,
        "DOC_VISION_MAX_PAGES",
        limits.BRIDGE_VISION_MAX_PAGES,
        limits.BRIDGE_HARD_VISION_PAGES,
    ),
    _Budget(
        MAX_FRAMES_KEY,
        "MM_BRIDGE_MAX_FRAMES",
        limits.BRIDGE_MAX_FRAMES,
        limits.BRIDGE_HARD_MAX_FRAMES,
    ),
)


@dataclass(frozen=True)
class BridgeLimits:
    """The limits one answer applies, after the hard caps, and where each came from.

    Attributes:
        max_chars: Characters returned at most.
        vision_max_pages: Pages or images sent to the vision model at most.
        max_frames: Video frames described at most.
        sources: Per setting key: ``project``, ``tenant``, ``environment`` or ``default``.
        capped: The keys whose asked value was above the hard cap (and what was asked).
    """

    max_chars: int
    vision_max_pages: int
    max_frames: int
    sources: Mapping[str, str]
    capped: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        """What every answer says of its limits."""
        return {
            "maxChars": self.max_chars,
            "visionMaxPages": self.vision_max_pages,
            "maxFrames": self.max_frames,
            "hardCaps": {
                "maxChars": limits.BRIDGE_HARD_MAX_CHARS,
                "visionMaxPages": limits.BRIDGE_HARD_VISION_PAGES,
                "maxFrames": limits.BRIDGE_HARD_MAX_FRAMES,
            },
            "sources": dict(self.sources),
            "capped": {key: {"asked": asked} for key, asked in self.capped.items()},
        }


def resolve_limits(
    project: Mapping[str, object],
    tenant: Mapping[str, object],
    environment: Mapping[str, int | None],
) -> BridgeLimits:
    """The effective limits: project, else tenant, else the environment default (by its
    variable name), else the spec's default; then each capped at its hard cap.

    Args:
        project: The project scope's decoded settings (unset keys absent or None).
        tenant: The tenant scope's decoded settings.
        environment: ``MM_BRIDGE_MAX_CHARS`` / ``DOC_VISION_MAX_PAGES`` /
            ``MM_BRIDGE_MAX_FRAMES`` → the engine configuration's value (None: unset).
    """
    values: dict[str, int] = {}
    sources: dict[str, str] = {}
    capped: dict[str, int] = {}
    for budget in _BUDGETS:
        source, value = next(
            (source, value)
            for source, value in (
                ("project", project.get(budget.key)),
                ("tenant", tenant.get(budget.key)),
                ("environment", environment.get(budget.env)),
                ("default", budget.default),
            )
            if value is not None
        )
        asked = int(value)  # type: ignore[call-overload]
        if asked > budget.cap:
            capped[budget.key] = asked
        values[budget.key] = min(asked, budget.cap)
        sources[budget.key] = source
    return BridgeLimits(
        max_chars=values[MAX_CHARS_KEY],
        vision_max_pages=values[VISION_PAGES_KEY],
        max_frames=values[MAX_FRAMES_KEY],
        sources=sources,
        capped=capped,
    )


# --- page ranges ------------------------------------------------------------------------------

_RANGE = re.compile(r"^\s*(\d{1,7})\s*(?:-\s*(\d{1,7})\s*)?$")


@dataclass(frozen=True)
class PageRange:
    """Pages (or sections) ``first`` to ``last``, 1-based and inclusive."""

    first: int
    last: int

    @classmethod
    def parse(cls, raw: object) -> PageRange:
        """``"3"`` or ``"3-4"``.

        Raises:
            InvalidInputError: Anything else, or a range that runs backwards or from 0.
        """
        match = _RANGE.match(raw) if isinstance(raw, str) else None
        if match is None:
            raise InvalidInputError(
                f"pages must be a page or a range of pages such as '3' or '3-4', got {raw!r}"
            )
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if first < 1 or last < first:
            raise InvalidInputError(
                f"pages {raw!r}: pages count from 1 and a range runs forwards, e.g. '3-4'"
            )
        return cls(first, last)

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


# --- the window one answer returns ------------------------------------------------------------


@dataclass(frozen=True)
class WindowSection:
    """One section of an answer: its title (``page 3``), its position in the file's text,
    and as much of its text as the window holds."""

    title: str | None
    start: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "offset": self.start,
            "chars": len(self.text),
            "text": self.text,
        }


@dataclass(frozen=True)
class Window:
    """The part of a file's text one answer returns, and how to get the rest.

    Attributes:
        sections: The sections (or parts of them) in the window, in order.
        offset: Where the window starts in the file's text.
        end: Where it ends (the next call's ``offset`` when ``more``).
        total_chars: The length of the file's text as read.
        more: Text past ``end`` was left out by the character budget.
    """

    sections: tuple[WindowSection, ...]
    offset: int
    end: int
    total_chars: int
    more: bool

    @property
    def chars(self) -> int:
        return sum(len(s.text) for s in self.sections)


def window(
    text: str, spans: Sequence[tuple[str, int, int]], *, offset: int, max_chars: int
) -> Window:
    """At most ``max_chars`` characters of ``text`` from ``offset``, cut at its sections
    (``(title, start, end)`` spans; none: one untitled section).

    Raises:
        InvalidInputError: ``offset`` is negative or past the end of the text.
    """
    total = len(text)
    if offset < 0 or (offset > 0 and offset >= total):
        raise InvalidInputError(
            f"offset {offset} is outside the file's text ({total:,} characters); "
            "use the offset a previous answer gave in 'next'"
        )
    end = min(total, offset + max_chars)
    parts = spans or (("", 0, total),)
    out: list[WindowSection] = []
    for title, start, stop in parts:
        lo, hi = max(start, offset), min(stop, end)
        if lo >= hi:
            continue
        piece = text[lo:hi]
        if piece.strip():
            out.append(WindowSection(title or None, lo, piece))
    return Window(tuple(out), offset, end, total, more=end < total)


# --- failures, in the spec's codes: the one table ---------------------------------------------

#: Extraction failure code → the bridge's error class. The cause's code travels with it. A
#: missing program (LibreOffice, ffmpeg, Tesseract) is a missing dependency, its package named;
#: a backend that is there but not answering (an unreachable or paused vision model) is not.
_ERROR_TABLE: Mapping[str, type[BridgeError]] = {
    "EXTRACT_DEPENDENCY_MISSING": BridgeDependencyMissingError,
    "EXTRACT_PROGRAM_MISSING": BridgeDependencyMissingError,
    "DEPENDENCY_MISSING": BridgeDependencyMissingError,
    "EXTRACT_NO_TEXT_LAYER": BridgeVisionNotConfiguredError,
    "EXTRACT_UNSUPPORTED_TYPE": BridgeUnsupportedTypeError,
    "EXTRACT_TIMEOUT": BridgeLimitError,
    "EXTRACT_TOO_LARGE": BridgeLimitError,
    "PROVIDER_UNAVAILABLE": BridgeVisionUnavailableError,
    "EXTRACT_BACKEND_UNAVAILABLE": BridgeVisionUnavailableError,
    "EXTRACT_NO_TEXT": BridgeError,
    "EXTRACT_CHANGED_WHILE_READ": BridgeError,
    "EXTRACTION_FAILED": BridgeError,
}


def bridge_error(exc: RagError, *, vision_configured: bool) -> BridgeError:
    """``exc`` (an extraction's failure) as the bridge's named error, its message kept and
    its code named as the cause. A scan is ``MM_BRIDGE_VISION_NOT_CONFIGURED`` only where no
    vision model is configured; with one, it read nothing (the file's own failure). A backend
    unavailable is ``MM_BRIDGE_VISION_UNAVAILABLE`` only where the backend is a vision model
    (Tesseract's missing language pack or slow page is ``MM_BRIDGE_UNREADABLE``, the message
    saying which). A missing program or extra of a type added later (a subclass of a mapped
    error) maps as its base."""
    if isinstance(exc, BridgeError):
        return exc
    cls = _ERROR_TABLE.get(exc.code) or next(
        (
            _ERROR_TABLE[code]
            for code in (getattr(k, "code", None) for k in type(exc).__mro__)
            if isinstance(code, str) and code in _ERROR_TABLE
        ),
        BridgeError,
    )
    if (cls is BridgeVisionNotConfiguredError and vision_configured) or (
        cls is BridgeVisionUnavailableError and not vision_configured
    ):
        cls = BridgeError
    message = exc.message
    if cls is BridgeVisionNotConfiguredError:
        message = (
            f"{message}. files_visualize reads it with a vision model: set rag.extract.ocr "
            "to vision with rag.extract.vision.model (or tesseract for local OCR)"
        )
    return cls(message, cause=exc.code)
