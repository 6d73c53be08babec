"""One turn's injection: ``pre_turn`` exactly as the chat hook runs it, and the sources of the
block it gave, for the response header."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vancetope_rag.domain.block.citations import cite
from vancetope_rag.secrets import get_logger
from vancetope_rag.services.autoinject import observe_decisions

if TYPE_CHECKING:
    from vancetope_rag.app import RagApp
    from vancetope_rag.recipes import RagParams

log = get_logger(__name__)

#: The response header naming the injected sources (JSON, ASCII).
SOURCES_HEADER = "x-vancetope-rag-sources"
#: The response header saying what the proxy did: injected, none, off, opted-out, failed.
STATE_HEADER = "x-vancetope-rag"
#: Header values past this are cut at a whole source (proxies refuse huge header blocks).
MAX_SOURCES_HEADER_CHARS = 4096


@dataclass(frozen=True)
class Injection:
    """What ``pre_turn`` gave for a turn: the blocks and the sources they cite."""

    state: str
    blocks: tuple[str, ...] = ()
    sources: tuple[dict[str, str], ...] = field(default=())
    #: How long ``pre_turn`` took, for the ``Server-Timing`` header.
    seconds: float = 0.0

    def headers(self) -> dict[str, str]:
        """The response headers that tell the client what was injected."""
        shown: list[dict[str, str]] = []
        for source in self.sources:
            if len(json.dumps([*shown, source])) > MAX_SOURCES_HEADER_CHARS:
                break
            shown.append(source)
        return {
            STATE_HEADER: self.state,
            SOURCES_HEADER: json.dumps(shown, ensure_ascii=True),
            # What the turn spent on retrieval, so a client can tell it from the model's time.
            "server-timing": f"rag;dur={self.seconds * 1000:.1f}",
        }


def _sources(hits: Sequence[Any]) -> list[dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for cited in cite(hits, project_rag=True):
        out.setdefault(cited.label, {"label": cited.label, "path": cited.hit.path or cited.source})
    return list(out.values())


def run_pre_turn(
    app: RagApp,
    tenant_id: str,
    project_id: str,
    user_messages: Sequence[str],
    recipe: RagParams | None,
    tools: Sequence[Any] | None,
) -> Injection:
    """``app.pre_turn`` for one turn; never raises: a failure is logged and the turn goes on
    without a block (spec §5)."""
    started = time.perf_counter()
    try:
        with observe_decisions() as decisions:
            blocks = app.pre_turn(tenant_id, project_id, user_messages, recipe, tools)
    except Exception as exc:
        log.warning(
            "pre_turn failed for %s/%s; the turn goes on without it: %s: %s",
            tenant_id,
            project_id,
            type(exc).__name__,
            exc,
        )
        return Injection("failed", seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if not blocks:
        enabled = any(d.enabled for d in decisions)
        return Injection("none" if enabled else "off", seconds=seconds)
    sources: list[dict[str, str]] = []
    for decision in decisions:
        if decision.block is not None and decision.block in blocks:
            sources.extend(_sources(decision.hits))
    return Injection("injected", tuple(blocks), tuple(sources), seconds)


async def arun_pre_turn(
    app: RagApp,
    tenant_id: str,
    project_id: str,
    user_messages: Sequence[str],
    recipe: RagParams | None,
    tools: Sequence[Any] | None,
) -> Injection:
    """:func:`run_pre_turn` in one of the app's turn threads (:class:`TurnExecutor`, as
    :meth:`RagApp.apre_turn`): the query embedding and the store never run on the event
    loop, nor in its default executor."""
    return await app.turns.run(
        run_pre_turn, app, tenant_id, project_id, user_messages, recipe, tools
    )
