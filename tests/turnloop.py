"""Chat turns in a loop while a rebuild runs: ``TurnLoop`` records each ``pre_turn`` with
the RAG generation its hits came from; ``check_turns`` states the acceptance rule.

Importable as ``turnloop`` from any test module (the tests folder is on ``sys.path``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from fakes import DOCS, P, T
from vancetope_rag.app import RagApp
from vancetope_rag.services.autoinject import InjectionDecision

QUESTION = "Why do zebras have stripes on the savanna?"


@dataclass
class Turn:
    started: float
    ended: float
    rag_ids: frozenset[str]
    block: str | None


class TurnLoop:
    """``app.pre_turn`` in a thread, each turn recorded with the RAG its hits came from."""

    def __init__(self, app: RagApp, monkeypatch: pytest.MonkeyPatch) -> None:
        self.app = app
        self.turns: list[Turn] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._seen = threading.local()
        original = app.autoinject.decide

        def spy(*args: Any, **kwargs: Any) -> InjectionDecision:
            decision = original(*args, **kwargs)
            self._seen.decision = decision
            return decision

        monkeypatch.setattr(app.autoinject, "decide", spy)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                start = time.monotonic()
                messages = self.app.pre_turn(T, P, [QUESTION])
                decision: InjectionDecision = self._seen.decision
                self.turns.append(
                    Turn(
                        start,
                        time.monotonic(),
                        frozenset(h.rag_id for h in decision.hits),
                        messages[0] if messages else None,
                    )
                )
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)

    def start(self) -> None:
        self._thread.start()

    def wait_for(self, more: int, timeout_s: float = 60.0) -> None:
        want = len(self.turns) + more
        deadline = time.monotonic() + timeout_s
        while len(self.turns) < want:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, "the turn loop stalled"
            time.sleep(0.002)

    def stop(self) -> list[Turn]:
        self._stop.set()
        self._thread.join(30)
        assert not self.errors, self.errors
        return list(self.turns)


def check_turns(
    turns: list[Turn], old: str, new: str, switch_began: float, switched: float
) -> None:
    """Every turn has a block from one generation: the old one before the switch began, the
    new one after it ended, never back to the old."""
    assert turns
    for turn in turns:
        assert turn.block and "<rag-context>" in turn.block, "a turn got no block"
        assert len(turn.rag_ids) == 1, f"hits of one turn from several generations: {turn}"
    ids = [next(iter(t.rag_ids)) for t in turns]
    assert set(ids) <= {old, new}
    # old until the switch, new from then on: never back
    assert ids == sorted(ids, key=lambda i: i == new)
    before = [t for t in turns if t.ended < switch_began]
    after = [t for t in turns if t.started > switched]
    assert all(t.rag_ids == {old} for t in before) and len(before) >= 5
    assert all(t.rag_ids == {new} for t in after) and len(after) >= 5


def seed(app: RagApp) -> None:
    """AutoInject ON, a low minScore (both models find the zebra), nine documents."""
    app.settings.set(T, None, "rag.autoInject.enabled", "ON")
    app.settings.set(T, None, "rag.minScore", 0.05)
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    for i in range(6):
        app.documents.create(T, P, f"documents/extra-{i}.md", f"Note {i} on office routines.")
