"""Store faults (a corrupt file, a full disk) surface as clear errors and lose nothing.

Before: a corrupt file gave a raw ``apsw.CorruptError`` traceback in ``status`` and
``index``; a full disk gave tracebacks, cost every document an attempt and, when the claim
release failed too, left documents ``processing`` until the lease expired; a ``worker`` whose
store file was truncated under it looped with tracebacks forever.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from synchelpers import states

from fakes import DOCS, P, T
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.errors import StoreError, StoreFullError
from vancetope_rag.services.indexing.scheduler import TickResult
from vancetope_rag.store.sqlite.db import SqliteDatabase


def _db(app: RagApp) -> SqliteDatabase:
    db = getattr(app.store.control, "db", None)
    assert isinstance(db, SqliteDatabase)
    return db


def _fill_disk(app: RagApp) -> None:
    """No page may be added to the file from now on (this thread's connection: the test's
    ticks run here). Rewriting pages in place still works, as on a nearly full disk."""
    db = _db(app)
    pages = db.query("PRAGMA page_count")[0][0]
    db.query(f"PRAGMA max_page_count = {pages}")


def _free_disk(app: RagApp) -> None:
    _db(app).query("PRAGMA max_page_count = 1073741823")


def _seed(app: RagApp) -> None:
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


def test_a_full_store_costs_no_attempt_and_nothing_stays_processing(
    app: RagApp, caplog: pytest.LogCaptureFixture
) -> None:
    _seed(app)
    _fill_disk(app)
    caplog.set_level(logging.WARNING)
    tick = app.scheduler.tick()
    assert tick.claimed == len(DOCS) and tick.store_errors == len(DOCS) and tick.indexed == 0
    assert states(app) == {"pending": len(DOCS)}
    for doc in app.documents.list_documents(T, P):
        assert doc.index_attempts == 0 and doc.rag_claimed_by is None
        assert doc.index_last_error and "free space" in doc.index_last_error
    _no_tracebacks(caplog)
    _free_disk(app)
    app.scheduler.run_until_idle(timeout_s=30)
    assert states(app) == {"indexed": len(DOCS)}


def test_claims_the_store_refused_to_take_back_are_given_back_when_it_recovers(
    app: RagApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails the release as well (simulated: this file still has room for an
    in-place update). The claims are kept and given back before the next tick."""
    _seed(app)
    _fill_disk(app)
    control = app.store.control
    real_release = control.release_rag_claim
    broken = {"on": True}

    def release(*args: object, **kwargs: object) -> object:
        if broken["on"]:
            raise StoreFullError("store is full: free space")
        return real_release(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(control, "release_rag_claim", release)
    caplog.set_level(logging.WARNING)
    app.scheduler.tick()
    assert states(app) == {"processing": len(DOCS)}  # the store refused every release
    assert app.indexer.releaser.pending == len(DOCS)
    app.scheduler.tick()  # still broken: nothing lost, nothing claimed twice
    assert app.indexer.releaser.pending == len(DOCS)
    broken["on"] = False
    _free_disk(app)
    app.scheduler.run_until_idle(timeout_s=30)  # the released claims wait one interval
    assert app.indexer.releaser.pending == 0
    assert states(app) == {"indexed": len(DOCS)}
    assert all(d.index_attempts == 0 for d in app.documents.list_documents(T, P))
    _no_tracebacks(caplog)


def test_stopping_gives_back_what_the_store_refused(
    app: RagApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(app)
    _fill_disk(app)
    control = app.store.control
    real_release = control.release_rag_claim
    calls = {"n": 0}

    def release(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] <= len(DOCS):
            raise StoreFullError("store is full: free space")
        return real_release(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(control, "release_rag_claim", release)
    app.scheduler.indexer.index_batch(T, P, control.claim_for_rag_index(T, P, "w", 10, 60.0), "w")
    assert states(app) == {"processing": len(DOCS)}
    app.scheduler.stop()
    assert states(app) == {"pending": len(DOCS)}


def _corrupt(path: Path) -> None:
    """Overwrite the second half of the file: it still opens (header and schema are in the
    first pages), and fails once a command reads the data."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(b"\xa5" * (size - size // 2))


@pytest.fixture
def cli_store(tmp_path: Path) -> tuple[CliRunner, list[str], Path]:
    path = tmp_path / "rag.db"
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(30):
        (docs / f"n{i}.md").write_text(f"note {i} " + "lorem ipsum dolor " * 200)
    runner = CliRunner()
    base = ["--store", f"sqlite:///{path}", "--tenant", T, "--project", P]
    settings = ["settings", "set", "ai.embedding.provider", "hashing", "--scope", "tenant"]
    assert runner.invoke(cli, [*base, *settings]).exit_code == 0
    assert runner.invoke(cli, [*base, "import", str(docs)]).exit_code == 0
    assert runner.invoke(cli, [*base, "index"]).exit_code == 0
    return runner, base, path


@pytest.mark.parametrize("command", [["status"], ["reindex"], ["query", "lorem"]])
def test_a_corrupt_store_is_a_clear_error_not_a_traceback(
    cli_store: tuple[CliRunner, list[str], Path], command: list[str]
) -> None:
    runner, base, path = cli_store
    _corrupt(path)
    result = runner.invoke(cli, [*base, *command])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # not an uncaught apsw error
    assert result.stderr.startswith("error: ")
    assert "corrupt" in result.stderr and "restore it from a backup" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_a_worker_whose_store_is_truncated_under_it_exits_non_zero(
    cli_store: tuple[CliRunner, list[str], Path],
) -> None:
    _, base, path = cli_store
    env = {
        **os.environ,
        "VANCETOPE_RAG_INDEXER_INITIAL_DELAY_S": "0",
        "RAG_INDEXER_POLL_SECONDS": "0.1",
        "VANCETOPE_RAG_MAX_STORE_FAILURES": "3",
        "VANCETOPE_RAG_STORE_BUSY_TIMEOUT_S": "0.5",
        "VANCETOPE_RAG_NODE_ID": "fault-test",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vancetope_rag.cli", *base, "worker"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "serving node" not in (proc.stderr.readline() or ""):
            pass
        with open(path, "w"):  # truncated to 0 bytes under the running worker
            pass
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert "error: the store failed 3 indexer ticks in a row" in err
    # what SQLite meets first depends on the moment: our check of the file, a lock left by
    # its broken WAL, or pages that no longer parse; each one is a clear store error
    assert any(
        words in err
        for words in ("removed, replaced or truncated while in use", "stayed locked", "corrupt")
    ), err
    assert "Traceback" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("until_idle", [False, True])
def test_an_explicit_run_on_a_store_that_stays_full_gives_up_after_the_bound(
    make_app: Callable[..., RagApp], until_idle: bool
) -> None:
    """The claims succeed (rows rewritten in place) and every write after them fails: a tick
    claims a batch and gets nothing done, the next ones may claim nothing while the refused
    claims wait to be given back. Before, a plain run returned after such an idle tick as if
    nothing were left to do, and ``until_idle`` ticked forever. Now a plain run raises the
    store's error when it stops, an until-idle one after the third failing tick."""
    app = make_app(config={"max_store_failures": 3})
    _seed(app)
    _fill_disk(app)
    failing = {"n": 0}
    real_tick = app.scheduler.tick

    def tick() -> TickResult:
        result = real_tick()
        failing["n"] += bool(result.store_errors)
        return result

    app.scheduler.tick = tick  # type: ignore[method-assign]
    with pytest.raises(StoreError) as raised:
        app.scheduler.run_until_idle(stop_when_nothing_claimable=not until_idle)
    if until_idle:
        assert failing["n"] == 3
        assert raised.value.message.startswith("the store failed 3 indexer ticks in a row")
    else:
        assert 1 <= failing["n"] <= 3
        assert raised.value.message.startswith("the store failed ")
    assert "free space" in raised.value.message
    assert states(app) == {"pending": len(DOCS)}  # claims given back, no attempt spent
    assert all(d.index_attempts == 0 for d in app.documents.list_documents(T, P))
