"""The pure rules of rebuilds: failure threshold, rates over the last minute, ETAs."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from vancetope_rag.domain.rebuilds import (
    ProjectProgress,
    Rebuild,
    RebuildProgress,
    RebuildState,
    failures_exceed,
    model_label,
    progress,
    rate_per_second,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("failed", "total", "ratio", "exceeds"),
    [
        (0, 0, 0.05, False),
        (5, 100, 0.05, False),
        (6, 100, 0.05, True),
        (1, 3, 0.05, True),
        (1, 3, 0.5, False),
        (0, 10, 0.0, False),
        (1, 10, 0.0, True),
        (10, 10, 1.0, False),
    ],
)
def test_failure_threshold(failed: int, total: int, ratio: float, exceeds: bool) -> None:
    assert failures_exceed(failed, total, ratio) is exceeds


def test_rate_over_the_last_minute() -> None:
    assert rate_per_second(0, None, NOW) == 0.0
    assert rate_per_second(30, NOW - timedelta(seconds=60), NOW) == 0.5
    assert rate_per_second(30, NOW - timedelta(seconds=10), NOW) == 3.0  # started 10 s ago
    assert rate_per_second(5, NOW, NOW) == 5.0  # at least one second
    assert rate_per_second(120, NOW - timedelta(seconds=90), NOW) == 2.0  # capped at a minute


def test_progress_and_eta() -> None:
    p = progress(8, 1, 4, 8, NOW - timedelta(seconds=4), NOW)
    assert (p.total, p.rate, p.eta_s) == (13, 2.0, 2.0)
    assert p.to_json() == {
        "done": 8,
        "failed": 1,
        "skipped": 0,
        "pending": 4,
        "total": 13,
        "rate": 2.0,
        "etaSeconds": 2.0,
        "paused": None,
    }
    assert progress(3, 0, 0, 0, None, NOW).eta_s is None  # nothing left: nothing to wait for
    assert progress(3, 0, 5, 0, None, NOW).eta_s is None  # stalled: no honest estimate
    recent = (8, NOW - timedelta(seconds=4), NOW)
    assert progress(8, 1, 4, *recent, running=False).eta_s is None  # ended (cancelled)
    paused = progress(8, 1, 4, *recent, paused="provider unreachable")
    assert (paused.eta_s, paused.rate, paused.paused) == (None, 2.0, "provider unreachable")
    assert progress(8, 1, 0, *recent, paused="provider unreachable").paused is None


def test_busy_while_anything_is_pending_or_a_rebuild_runs() -> None:
    idle = progress(3, 0, 0, 0, None, NOW)
    m = Rebuild("m", "t", "p", "_documents", "a", "b", model_label("x", "1"), "y:2")
    assert not ProjectProgress(idle).busy
    assert ProjectProgress(progress(3, 0, 1, 0, None, NOW)).busy
    assert ProjectProgress(idle, RebuildProgress(m, idle)).busy  # running (to switch)
    done = RebuildProgress(replace(m, state=RebuildState.COMPLETED), idle)
    assert not ProjectProgress(idle, done).busy
    assert done.to_json()["fromModel"] == "x:1" and done.to_json()["state"] == "completed"


def test_the_first_record_names_stay_aliases_of_the_rebuild_names() -> None:
    import vancetope_rag
    from vancetope_rag.domain import rebuilds

    assert vancetope_rag.Migration is vancetope_rag.Rebuild is rebuilds.Rebuild
    assert vancetope_rag.MigrationState is vancetope_rag.RebuildState is rebuilds.RebuildState
    assert rebuilds.MigrationItem is rebuilds.RebuildItem
    assert rebuilds.MigrationProgress is rebuilds.RebuildProgress
