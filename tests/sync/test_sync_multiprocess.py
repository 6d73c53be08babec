"""Acceptance 5 and 6: real worker processes on one SQLite file (hashing provider).

Each worker (``sync_worker.py``) logs every document it commits; the logs show that each
change is indexed exactly once across workers, and that a SIGKILLed worker loses nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from synchelpers import chunk_count, chunks, default_rag, states

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import RagState
from vancetope_rag.store.port.types import RagScope

AppFactory = Callable[..., RagApp]
WORKER = Path(__file__).with_name("sync_worker.py")
DEADLINE_S = 120.0


class Worker:
    """One ``sync_worker.py`` process; stderr goes to a file so a full pipe never blocks it."""

    def __init__(self, tmp_path: Path, store_uri: str, name: str, node: str, *extra: str) -> None:
        self.name = name
        self.log = tmp_path / f"{name}.jsonl"
        self.err_path = tmp_path / f"{name}.stderr"
        self._err = open(self.err_path, "w")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, str(WORKER), "--store", store_uri, "--node", node]
        self.proc = subprocess.Popen(
            [*cmd, "--worker", name, "--log", str(self.log), *extra],
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )

    def stderr(self) -> str:
        return self.err_path.read_text()

    def result(self) -> dict[str, int]:
        """The next round's totals (one JSON line on stdout)."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"{self.name} printed no result: {self.stderr()}"
        out: dict[str, int] = json.loads(line)
        return out

    def committed(self, round_: int | None = None) -> list[str]:
        if not self.log.exists():
            return []
        entries = [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]
        return [e["doc"] for e in entries if round_ is None or e["round"] == round_]

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"{self.name} did not finish: {self.stderr()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        w.stop()


def _wait_for(what: str, condition: Callable[[], bool], procs: list[Worker]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        for w in procs:
            if w.proc.poll() is not None:
                pytest.fail(f"{w.name} exited ({w.proc.returncode}) before {what}: {w.stderr()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def _assert_one_chunk_each(app: RagApp, expected: dict[str, str]) -> None:
    """Exactly one chunk per document, holding its current content; nothing else."""
    all_chunks = chunks(app, default_rag(app))
    by_doc: dict[str, list[str]] = {}
    for c in all_chunks:
        by_doc.setdefault(c.source_ref, []).append(c.text)
    assert len(all_chunks) == len(expected)
    assert by_doc == {doc_id: [text] for doc_id, text in expected.items()}


def test_two_worker_processes_index_500_documents_once(
    make_app: AppFactory, store_uri: str, tmp_path: Path, workers: list[Worker]
) -> None:
    app = make_app()
    app.bring(T, P)  # no home node: both nodes serve it
    n = 500
    expected = {
        app.documents.create(T, P, f"documents/{i:03}.md", f"document {i} body").id: (
            f"document {i} body"
        )
        for i in range(n)
    }
    ready, go = tmp_path / "ready", tmp_path / "go"
    for name, node in (("worker-a", "node-a"), ("worker-b", "node-b")):
        workers.append(
            Worker(
                tmp_path,
                store_uri,
                f"{name}",
                node,
                *("--batch", "10", "--rounds", "2", "--timeout", "60"),
                *("--ready", f"{ready}-{name}", "--go", str(go)),
            )
        )

    def all_ready(r: int) -> Callable[[], bool]:
        return lambda: all(Path(f"{ready}-{w.name}-{r}").exists() for w in workers)

    # round 1: both start together on 500 dirty documents
    _wait_for("both workers ready", all_ready(1), workers)
    Path(f"{go}-1").touch()
    first = [w.result() for w in workers]

    assert states(app) == {"indexed": n}
    _assert_one_chunk_each(app, expected)
    commits = [doc_id for w in workers for doc_id in w.committed(1)]
    counts = Counter(commits)
    assert set(counts) == set(expected)
    assert set(counts.values()) == {1}  # every document indexed exactly once
    assert sum(r["indexed"] for r in first) == n
    assert sum(r["embeddedTexts"] for r in first) == n
    assert sum(r["lostLease"] for r in first) == 0
    assert all(w.committed(1) for w in workers)  # both really took part

    # round 2: change 50 documents, run both again
    _wait_for("round 1 finished", all_ready(2), workers)
    changed = list(expected)[::10]
    for doc_id in changed:
        expected[doc_id] = f"updated body of {doc_id}"
        app.documents.update(T, P, doc_id, content=expected[doc_id])
    assert states(app) == {"indexed": n - 50, "pending": 50}
    Path(f"{go}-2").touch()
    second = [w.result() for w in workers]
    assert [w.wait() for w in workers] == [0, 0]

    commits = [doc_id for w in workers for doc_id in w.committed(2)]
    assert sorted(commits) == sorted(changed)  # exactly those 50, once each
    assert sum(r["indexed"] for r in second) == 50
    assert sum(r["embeddedTexts"] for r in second) == 50
    assert states(app) == {"indexed": n}
    _assert_one_chunk_each(app, expected)


def test_sigkill_mid_batch_loses_nothing(
    make_app: AppFactory, store_uri: str, tmp_path: Path, workers: list[Worker]
) -> None:
    app = make_app()
    app.bring(T, P)
    n = 60
    expected = {
        app.documents.create(T, P, f"documents/{i:02}.md", f"text number {i}").id: (
            f"text number {i}"
        )
        for i in range(n)
    }
    control = app.store.control
    started = tmp_path / "embedding-started"
    victim = Worker(
        tmp_path,
        store_uri,
        "worker-a",
        "node-a",
        *("--batch", "10", "--slow", "0.4", "--started", str(started)),
    )
    workers.append(victim)

    def mid_batch() -> bool:
        counts = control.document_state_counts(T, P)
        return started.exists() and counts["indexed"] >= 10 and counts["processing"] > 0

    _wait_for("worker A mid-batch", mid_batch, [victim])
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL

    orphaned = [d.id for d in control.list_documents(T, P) if d.rag_claimed_by == "worker-a"]
    assert orphaned  # killed while holding claims
    assert states(app)["processing"] == len(orphaned)

    rescuer = Worker(
        tmp_path,
        store_uri,
        "worker-b",
        "node-b",
        *("--batch", "10", "--claim-ttl", "1.5", "--timeout", "60"),
    )
    workers.append(rescuer)
    totals = rescuer.result()
    assert rescuer.wait() == 0

    assert states(app) == {"indexed": n}
    _assert_one_chunk_each(app, expected)
    done_by_a, done_by_b = victim.committed(), rescuer.committed()
    assert set(done_by_a) | set(done_by_b) == set(expected)
    assert len(done_by_b) == len(set(done_by_b))
    assert set(orphaned) <= set(done_by_b)  # re-claimed after the lease expired
    assert totals["indexed"] == len(done_by_b)
    assert totals["lostLease"] == 0


def test_sigkill_mid_rebuild_resumes_and_switches_once(
    make_app: AppFactory, store_uri: str, tmp_path: Path, workers: list[Worker]
) -> None:
    """A rebuild survives its worker: a worker killed while filling the new generation; the
    next one resumes the rebuild, the live generation answers throughout, the switch happens
    once, the result equals a clean rebuild and the old generation is gone."""
    app = make_app()
    app.bring(T, P)
    n = 60
    texts = {f"documents/{i:02}.md": f"rebuild text number {i}" for i in range(n)}
    for path, text in texts.items():
        app.documents.create(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=60)
    old = default_rag(app)
    app.settings.set(T, None, "ai.embedding.model", "hashing-128")
    migration = app.project_rags.reindex(T, P, rebuild=True).migration
    assert migration is not None
    migrations = app.store.rebuilds

    started = tmp_path / "embedding-started"
    victim = Worker(
        tmp_path,
        store_uri,
        "worker-a",
        "node-a",
        *("--batch", "10", "--slow", "0.4", "--started", str(started)),
    )
    workers.append(victim)

    def mid_rebuild() -> bool:
        counts = migrations.item_counts(migration.id)
        return started.exists() and counts["done"] >= 10 and counts["processing"] > 0

    _wait_for("worker A mid-rebuild", mid_rebuild, [victim])
    os.kill(victim.proc.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL

    orphaned = [i for i in migrations.list_items(migration.id) if i.claimed_by == "worker-a"]
    assert orphaned  # killed while holding rebuild claims
    assert default_rag(app) == old  # readers never noticed
    assert app.rags.query(old, "rebuild text number 7", top_k=1)[0].path == "documents/07.md"

    rescuer = Worker(
        tmp_path,
        store_uri,
        "worker-b",
        "node-b",
        *("--batch", "10", "--claim-ttl", "1.5", "--timeout", "60", "--retired-grace", "0"),
    )
    workers.append(rescuer)
    rescuer.result()
    assert rescuer.wait() == 0, rescuer.stderr()

    new = default_rag(app)
    assert new.id == migration.to_rag_id and new.embedding_model == "hashing-128"
    done = migrations.get_rebuild(T, P, migration.id)
    assert done is not None and done.state.value == "completed"
    assert [g.id for g in migrations.rag_generations(T, P)] == [new.id]  # old one gone
    assert app.store.chunks.count_chunks(RagScope.of(old)) == 0
    assert all(g.state is RagState.LIVE for g in migrations.rag_generations(T, P))
    # equal to a clean rebuild onto the same model
    clean = make_app(config={"store": f"sqlite:///{tmp_path / 'clean.db'}"})
    clean.settings.set(T, None, "ai.embedding.model", "hashing-128")
    clean.bring(T, P)
    for path, text in texts.items():
        clean.documents.create(T, P, path, text)
    clean.scheduler.run_until_idle(timeout_s=60)
    assert chunk_count(app, new) == chunk_count(clean, default_rag(clean)) == n
    by_path = {c.path: c.text for c in chunks(app, new)}
    assert by_path == {c.path: c.text for c in chunks(clean, default_rag(clean))}
    assert states(app) == {"indexed": n}
