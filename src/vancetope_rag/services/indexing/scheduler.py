"""ProjectRagIndexScheduler (spec §4.4): periodic ticks that claim and index batches.

Each tick serves the projects homed on this node (and podless ones): it skips a project whose
``rag.project.enabled`` is off, whose tenant switched embeddings off, or whose provider cannot
make its model, and otherwise claims a batch (lease with TTL) for the indexer. Before that it
reads again, from their import's folder, the files whose last read failed for the machine's
sake once their back-off is over (:meth:`DocumentImporter.retry_due`), so a scan is read once
the ``tesseract`` program or the vision model is back, without a new import. The background
thread honours ``RAG_INDEXER_ENABLED``; explicit ticks always run.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.heartbeats import package_version
from vancetope_rag.domain.records import Document, IndexState
from vancetope_rag.errors import RagError, StoreError
from vancetope_rag.metrics import Metrics
from vancetope_rag.secrets import error_text, get_logger
from vancetope_rag.services.calibration import Calibrator
from vancetope_rag.services.importer import DocumentImporter
from vancetope_rag.services.indexing.batch import BatchResult
from vancetope_rag.services.indexing.claims import ClaimReleaser
from vancetope_rag.services.indexing.indexer import ProjectRagIndexer
from vancetope_rag.services.projects import ProjectRagService
from vancetope_rag.services.rag import RagService
from vancetope_rag.services.rebuilds.service import RebuildService
from vancetope_rag.services.settings import SettingsService
from vancetope_rag.store.port import ControlStore
from vancetope_rag.store.port.documents import Release
from vancetope_rag.store.port.heartbeats import Beat

log = get_logger(__name__)

#: Seconds between two looks, per project, at whether its reranker changed (or was set, or
#: came back) without a chunk changing: one settings read when no reranker is set.
RERANK_CHECK_S = 60.0


@dataclass
class TickResult(BatchResult):
    projects: int = 0
    claimed: int = 0
    #: Files read again whose last read had failed for the machine's sake.
    reread: int = 0


class ProjectRagIndexScheduler:
    """Periodic ticks: per project of this node, claim a batch and index it (spec §4.4)."""

    def __init__(
        self,
        *,
        control: ControlStore,
        rags: RagService,
        indexer: ProjectRagIndexer,
        releaser: ClaimReleaser,
        project_rags: ProjectRagService,
        rebuilds: RebuildService,
        settings: SettingsService,
        config: EngineConfig,
        metrics: Metrics,
        worker_id: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        calibrator: Calibrator | None = None,
        importer: DocumentImporter | None = None,
    ) -> None:
        self.control = control
        #: Reads again the files of machine-side read failures (None: no such retries).
        self.importer = importer
        #: Per project, when its read failures are looked through next (the importer's
        #: clock): at most once per retry back-off (or minute), not on every tick.
        self._next_retry_scan: dict[tuple[str, str], float] = {}
        self.calibrator = calibrator
        #: Monotonic seconds the rerank checks are timed by (replaceable in tests).
        self.clock: Callable[[], float] = time.monotonic
        #: Per project, when (:attr:`clock`) the reranker it ranks with is compared next with
        #: the one its RAGs' rerank calibrations were measured with.
        self._next_rerank_check: dict[tuple[str, str], float] = {}
        self.rags = rags
        self.indexer = indexer
        self.releaser = releaser
        self.project_rags = project_rags
        self.rebuilds = rebuilds
        self.settings = settings
        self.config = config
        self.metrics = metrics
        self.worker_id = worker_id or f"{config.node_id}:{uuid.uuid4().hex[:8]}"
        self._sleep = sleep
        self._stop = threading.Event()
        #: Set by :meth:`wake` (a document was queued here, or the store says so): the loop
        #: ticks early. The interval stays the longest wait between ticks.
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None
        self.wakeups = 0  # early ticks taken on a wake-up
        #: The store's feed of documents queued by any process (``Store.watch_queued``),
        #: subscribed while the background thread runs; None: this process's saves only.
        self.watch: Callable[[Callable[[], None]], Callable[[], None] | None] | None = None
        self._unwatch: Callable[[], None] | None = None
        #: Why the background thread gave up (consecutive store failures), else None.
        self.fatal_error: str | None = None
        #: Documents claimed by a batch still being indexed (see :meth:`give_back_claimed`).
        self._in_flight: dict[str, Document] = {}
        self._in_flight_lock = threading.Lock()
        #: Claims the last :meth:`stop` gave back (a batch that outlived its timeout).
        self.given_back = 0
        #: False when the last :meth:`stop` gave up waiting for the store to take them.
        self.gave_back_in_time = True
        #: What the heartbeats record (see :mod:`vancetope_rag.domain.heartbeats`).
        self.version = package_version()
        #: Set by :meth:`stop`, cleared by :meth:`start`: a second stop (the app's close after
        #: the worker's own) has nothing left to do and returns at once.
        self._stopped = False
        #: Projects paused by what waiting does not cure (settings refused, the wrong
        #: dimension), as :meth:`blocked` last found them, and how many documents of theirs
        #: :meth:`pending` counted: an explicit run does not wait for those.
        self._lasting: set[tuple[str, str]] = set()
        self._lasting_left = 0
        #: The last heartbeat written: when (monotonic) and with which open circuits.
        self._beat_at: float | None = None
        self._beat_circuits: list[tuple[str, str, str, str | None, int | None]] | None = None

    def blocked(self, tenant_id: str, project_id: str, *, warn: bool = True) -> str | None:
        """Why this project is not indexed now (the metric outcome), or None when it is.

        A provider that cannot make the project's model (spec §10: not configured) skips the
        project without claiming: its documents keep their attempts and are indexed once the
        setting is corrected, instead of each failing ``max_attempts`` times for it.
        """
        t, p = tenant_id, project_id
        self._lasting.discard((t, p))
        snapshot = self.settings.snapshot(t, p)
        if not snapshot.project_rag_enabled():
            return "skipped"
        if not snapshot.embeddings_enabled():
            return "tenant_disabled"
        try:
            rag = self.project_rags.indexable_rag(t, p, snapshot)
            ready = self.rags.index_ready(rag)
        except Exception as exc:
            if warn:
                log.warning("project %s/%s not indexed this tick: %s", t, p, error_text(exc))
            return "skipped"
        circuit = self.rags.circuit_state(rag, snapshot)
        if circuit is not None and circuit.retry_in_s > 0:
            # its provider is down, refuses the settings or answers the wrong dimension:
            # nothing is claimed until the circuit is due to be tried (the circuit logged it
            # once; status shows it)
            if circuit.config:
                self._lasting.add((t, p))
            return "paused"
        if not ready:
            # a RAG of a new dimension: its search indexes are still building (or init was
            # never run); its documents wait, keeping their attempts
            if warn:
                log.info(
                    "project %s/%s waits for the store's search indexes of dimension %s "
                    "(run `vancetope-rag init --wait` to build them)",
                    t,
                    p,
                    rag.embedding_dimension,
                )
            return "skipped"
        return None

    def tick(self) -> TickResult:
        """One pass over this node's projects. Claims the store refused to take back earlier
        are given back first. A store failure inside a project is counted in
        ``store_errors`` (the project is skipped); one before any project raises."""
        started = time.monotonic()
        result = TickResult()
        self.releaser.retry()
        for project in self.control.projects_for_node(self.config.node_id):
            t, p = project.tenant_id, project.project_id
            result.projects += 1
            before = result.indexed + result.removed
            self._retry_reads(t, p, result)
            self._index_live(t, p, result)
            self._advance_rebuilds(t, p, result)
            if result.indexed + result.removed > before:
                self._calibrate(t, p)
            else:
                self._calibrate_rerank(t, p)
        self._sweep()
        if result.claimed or result.progressed or result.failed or result.store_errors:
            self._log_tick(result, time.monotonic() - started)
        return result

    def _log_tick(self, r: TickResult, seconds: float) -> None:
        """The one line an operator reads per tick that did work (no tenant or paths: the
        per-document warnings say those). A tick whose every claim went back because the
        provider is down did none: debug level (the outage has its own two lines)."""
        only_paused = r.paused and not (r.progressed or r.failed or r.store_errors)
        numbers = {
            "worker": self.worker_id,
            "claimed": r.claimed,
            "projects": r.projects,
            "indexed": r.indexed,
            "unchanged": r.unchanged,
            "removed": r.removed,
            "failed": r.failed,
            "lost_leases": r.lost_lease,
            "paused": r.paused,
            "chunks": r.chunks,
            "embedded_texts": r.embedded_texts,
            "cache_hits": r.cache_hits,
            "store_errors": r.store_errors,
            "duration_s": round(seconds, 3),
        }
        log.log(
            logging.DEBUG if only_paused else logging.INFO,
            "indexer tick %s: %d claimed in %d projects; %d indexed (%d unchanged), "
            "%d removed, %d failed, %d lost leases, %d paused; %d chunks, %d texts embedded, "
            "%d from cache; %d store errors; %.2fs",
            self.worker_id,
            r.claimed,
            r.projects,
            r.indexed,
            r.unchanged,
            r.removed,
            r.failed,
            r.lost_lease,
            r.paused,
            r.chunks,
            r.embedded_texts,
            r.cache_hits,
            r.store_errors,
            seconds,
            extra=numbers,
        )

    def _retry_reads(self, t: str, p: str, result: TickResult) -> None:
        """Read again the files whose back-off after a machine-side failure is over (any
        failure here is logged, never fails the tick)."""
        if self.importer is None:
            return
        now = self.importer.clock()  # the retry times' own clock
        if now < self._next_retry_scan.get((t, p), 0.0):
            return
        self._next_retry_scan[(t, p)] = now + min(self.config.extract_retry_s, 60.0)
        try:
            done = self.importer.retry_due(t, p)
        except RagError as exc:
            log.warning("project %s/%s: failed reads not retried this tick: %s", t, p, exc)
            self._count_store_error(exc, result)
            return
        result.reread += done.read
        if done.tried:
            log.info(
                "project %s/%s: %d files read again after a failure of this machine: %d read, "
                "%d failed again, %d no longer in their folder",
                t,
                p,
                done.tried,
                done.read,
                done.summary.failed,
                done.stopped,
            )

    def _index_live(self, t: str, p: str, result: TickResult) -> None:
        try:
            outcome = self.blocked(t, p)
            if outcome is not None:
                self.metrics.indexer_runs.labels(outcome=outcome).inc()
                return
            docs = self.control.claim_for_rag_index(
                t, p, self.worker_id, self.config.indexer_batch_size, self.config.claim_ttl_s
            )
        except RagError as exc:
            log.warning("project %s/%s skipped this tick: %s", t, p, exc)
            self._count_store_error(exc, result)
            return
        result.claimed += len(docs)
        with self._in_flight_lock:
            self._in_flight.update((d.id, d) for d in docs)
        # Not in a ``finally``: a batch cut short by a signal (KeyboardInterrupt) keeps its
        # documents here for give_back_claimed; a finished one has handled every claim.
        batch = self.indexer.index_batch(t, p, docs, self.worker_id)
        with self._in_flight_lock:
            for d in docs:
                self._in_flight.pop(d.id, None)
        result.add(batch)

    def give_back_claimed(self) -> int:
        """Give back the claims of a batch that was cut short (Ctrl-C or SIGTERM of an
        explicit run): its documents are pending again at once, no attempt counted and their
        last error (if any) kept, instead of ``processing`` until their lease expires. A
        document the batch had finished is no longer ours, and the store's release leaves
        it alone. Returns how many were given back (or kept by the releaser to retry)."""
        with self._in_flight_lock:
            docs, self._in_flight = list(self._in_flight.values()), {}
        for doc in docs:
            self.releaser.release(
                Release.of(
                    doc,
                    self.worker_id,
                    error=doc.index_last_error or "",
                    retry_delay_s=0.0,
                    max_attempts=self.config.max_attempts,
                    count_attempt=False,
                )
            )
        return len(docs)

    @staticmethod
    def _count_store_error(exc: RagError, result: TickResult) -> None:
        if isinstance(exc, StoreError):
            result.store_errors += 1
            result.store_error = exc.message

    def _advance_rebuilds(self, t: str, p: str, result: TickResult) -> None:
        """A rebuild goes on whatever blocks the live RAG's indexing (its old model may be the
        very thing that no longer loads); it checks the kill switch itself."""
        try:
            done, claimed = self.rebuilds.work(t, p, self.worker_id)
        except RagError as exc:
            log.warning("project %s/%s: rebuild not advanced this tick: %s", t, p, exc)
            self._count_store_error(exc, result)
            return
        result.claimed += claimed
        result.add(done)

    def _calibrate(self, t: str, p: str) -> None:
        """Chunks came or went: calibrate the project's RAGs that reached enough chunks or
        grew enough since (``minScore: auto``). A failure keeps the last calibration and is
        tried again after the next pass that changes chunks; it never fails the tick."""
        if self.calibrator is None:
            return
        try:
            self.calibrator.refresh_project(t, p)
        except Exception as exc:
            log.warning("project %s/%s: calibration not refreshed: %s", t, p, error_text(exc))

    def _calibrate_rerank(self, t: str, p: str) -> None:
        """At most every :data:`RERANK_CHECK_S`: measure the rerank calibration of the
        project's RAGs whose reranker was set or changed (or was unreachable) while no chunk
        changed; never fails the tick."""
        now = self.clock()
        if self.calibrator is None or self._next_rerank_check.get((t, p), 0.0) > now:
            return
        self._next_rerank_check[(t, p)] = now + RERANK_CHECK_S
        try:
            self.calibrator.refresh_rerank(t, p)
        except Exception as exc:
            log.warning(
                "project %s/%s: rerank calibration not refreshed: %s", t, p, error_text(exc)
            )

    def _sweep(self) -> None:
        """Old chunk generations go once search sees the new ones (a no-op on SQLite)."""
        try:
            self.rags.sweep_chunks()
        except RagError as exc:
            log.warning("sweeping old chunk generations failed (retried next tick): %s", exc)

    def pending(self) -> int:
        """Documents of this node's indexable projects still waiting or being processed,
        plus the work of running rebuilds (their queues, and each one's switch)."""
        total = lasting = 0
        projects = self.control.projects_for_node(self.config.node_id)
        for project in projects:
            t, p = project.tenant_id, project.project_id
            if self.blocked(t, p, warn=False) not in (None, "paused"):
                continue  # a paused project's documents still wait: they count
            counts = self.control.document_state_counts(t, p)
            waiting = counts.get(IndexState.PENDING.value, 0)
            waiting += counts.get(IndexState.PROCESSING.value, 0)
            total += waiting
            lasting += waiting if (t, p) in self._lasting else 0
        self._lasting_left = lasting
        return total + self.rebuilds.pending((r.tenant_id, r.project_id) for r in projects)

    def run_until_idle(
        self,
        *,
        timeout_s: float | None = None,
        on_tick: Callable[[TickResult, int], None] | None = None,
        stop_when_nothing_claimable: bool = False,
    ) -> TickResult:
        """Tick until nothing is pending (waiting out retry back-offs and others' leases).

        With ``stop_when_nothing_claimable`` it stops as soon as a tick claims nothing: what
        is left waits for its retry time or another worker's lease. Without it, it stops too
        once a tick claims nothing and all that is left waits on what no wait cures (its
        provider refuses the settings or answers the wrong dimension).

        The store failing is bounded by the background thread's rule: after
        ``max_store_failures`` failing ticks (see :meth:`_checked_tick`) with no tick getting
        work done in between, or when the run stops with documents waiting and the store
        failed since work was last done, the claims are given back and :class:`StoreError`
        is raised with the store's message, instead of ticking forever or returning a result
        that reads as "nothing to do". A tick that claims nothing (the documents the store
        refused wait out their retry back-off) neither counts nor clears a failure here.
        """
        total = TickResult()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        failures = 0  # failing ticks since work was last done
        last_error: str | None = None
        while True:
            tick, store_error = self._checked_tick()
            if store_error:
                failures, last_error = failures + 1, store_error
            elif tick.progressed or tick.claimed:
                failures, last_error = 0, None
            total.add(tick)
            total.claimed += tick.claimed
            total.projects = max(total.projects, tick.projects)
            if last_error and failures >= self.config.max_store_failures:
                self._give_up(failures, last_error)
            left = self.pending()
            if on_tick is not None:
                on_tick(tick, left)
            if left == 0:
                return total
            stops = (deadline is not None and time.monotonic() > deadline) or (
                tick.claimed == 0 and (stop_when_nothing_claimable or left <= self._lasting_left)
            )
            if stops and last_error:
                self._give_up(failures, last_error)
            if stops:
                return total
            if tick.claimed == 0:
                self._sleep(min(1.0, max(0.05, self.config.retry_backoff_s / 4)))

    def _checked_tick(self) -> tuple[TickResult, str | None]:
        """One tick, and the store's message when the store failed it: an error before any
        project, or store errors in a tick that got nothing done. The one rule of a failing
        tick for the background thread and for :meth:`run_until_idle`."""
        try:
            tick = self.tick()
        except StoreError as exc:
            log.warning("indexer tick failed: %s", exc.message)
            return TickResult(), exc.message
        if tick.store_errors and not tick.progressed:
            return tick, tick.store_error
        return tick, None

    @staticmethod
    def _gave_up(failures: int, store_error: str) -> str:
        if failures == 1:
            return f"the store failed an indexer tick; last error: {store_error}"
        return f"the store failed {failures} indexer ticks in a row; last error: {store_error}"

    def _give_up(self, failures: int, store_error: str) -> NoReturn:
        """An explicit run stops on a failing store: claims given back, the error raised."""
        self._give_back()
        message = self._gave_up(failures, store_error)
        log.error("indexer run stops: %s", message)
        raise StoreError(message)

    # -- background thread ---------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether :meth:`start` runs the background thread (``RAG_INDEXER_ENABLED``)."""
        return self.config.indexer_enabled

    def start(self) -> None:
        """Run ticks in a daemon thread: initial delay, then every interval.

        Does nothing but say so when the engine configuration switches the background indexer
        off (``RAG_INDEXER_ENABLED=false``): that covers ``worker``, ``serve --with-indexer``
        and any host that starts the scheduler. Explicit :meth:`tick` /
        :meth:`run_until_idle` calls (``vancetope-rag index``) are not affected.
        """
        if not self.enabled:
            log.info(
                "background indexer is off (RAG_INDEXER_ENABLED=false): this process indexes "
                "nothing on its own; `vancetope-rag index` still runs a pass on demand"
            )
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._stopped = False
        self._beat_at = None  # a worker started again says so at its first tick
        self._thread = threading.Thread(
            target=self._loop, name="vancetope-rag-indexer", daemon=True
        )
        self._thread.start()
        if self.watch is not None and self._unwatch is None:
            try:
                self._unwatch = self.watch(self.wake)
            except Exception:  # a feed that cannot start leaves the interval in charge
                log.warning("cannot watch the store for queued documents", exc_info=True)

    def wake(self) -> None:
        """Tick early: documents were queued (by this process, or by another one when the
        store can tell). Cheap and thread-safe; a burst of wake-ups makes one tick."""
        self._woken.set()

    def stop(self, timeout: float = 30.0, *, give_back_s: float | None = None) -> None:
        """Stop the background thread: its tick gets ``timeout`` seconds to finish; then
        the claims of a batch still in hand are given back and the heartbeat says the
        worker stopped. With ``give_back_s``, that last part takes at most so long: a store
        that does not answer (an outage) leaves the claims to their lease instead of
        holding the stop up for the pool's wait on every call. A second call does nothing.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self._woken.set()
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()
        ran = self._thread is not None
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if give_back_s is None:
            self._wind_up(ran)
            return
        winding = threading.Thread(
            target=self._wind_up, args=(ran,), name="vancetope-rag-stop", daemon=True
        )
        winding.start()
        winding.join(give_back_s)
        self.gave_back_in_time = not winding.is_alive()
        if winding.is_alive():
            log.warning(
                "the store did not answer within %gs of the stop: the claims of the batch in "
                "hand are left to their lease (%gs)",
                give_back_s,
                self.config.claim_ttl_s,
            )

    def _wind_up(self, ran: bool) -> None:
        # A tick still running after the timeout (a slow model) dies with the process: its
        # batch goes back now; should the tick finish after all, the fence refuses its writes.
        self.given_back = self.give_back_claimed()
        self._give_back()
        if ran:
            self._beat(stopped=True)

    def _beat(self, *, stopped: bool = False) -> None:
        """Record this worker's heartbeat with its open circuits (a failing store is logged
        by the tick): at most once per interval (ticks woken early come sooner), and at once
        when a circuit opened or closed, so another process's status shows the pause."""
        circuits = self.rags.circuits.open_circuits()
        opened = [(c.provider, c.base_url, c.key_hash, c.model, c.dimension) for c in circuits]
        now = time.monotonic()
        recent = self._beat_at is not None and now - self._beat_at < self.config.indexer_interval_s
        if not stopped and recent and opened == self._beat_circuits:
            return
        try:
            self.control.record_heartbeat(
                Beat(
                    self.worker_id,
                    node_id=self.config.node_id,
                    version=self.version,
                    interval_s=self.config.indexer_interval_s,
                    stopped=stopped,
                    circuits=circuits,
                )
            )
        except Exception as exc:
            log.debug("heartbeat not recorded: %s", error_text(exc))
            return
        self._beat_at, self._beat_circuits = now, opened

    def _give_back(self) -> None:
        """Last try to give back claims the store refused (else their lease expires)."""
        try:
            left = self.releaser.retry()
        except Exception:  # the store may be gone altogether
            left = self.releaser.pending
        if left:
            log.warning(
                "%d claims could not be given back; their lease (%gs) frees them",
                left,
                self.config.claim_ttl_s,
            )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        if self._stop.wait(self.config.indexer_initial_delay_s):
            return
        failures = 0  # consecutive ticks the store failed
        while not self._stop.is_set():
            self._beat()
            try:
                tick, store_error = self._checked_tick()
            except Exception:
                log.exception("indexer tick failed")
                tick, store_error = TickResult(), None
            self._beat()  # only when a circuit opened or closed in the tick
            failures = failures + 1 if store_error else 0
            if store_error and failures >= self.config.max_store_failures:
                self.fatal_error = self._gave_up(failures, store_error)
                log.error("background indexer stops: %s", self.fatal_error)
                return
            # A full batch means more is waiting: a wake-up, so the next tick comes early
            # (after the wake delay, never at once: no embed storm); the provider's pacing
            # spaces the calls inside the ticks.
            if tick.claimed >= self.config.indexer_batch_size:
                self.wake()
            if not self._idle():
                return

    def _idle(self) -> bool:
        """Wait for the next tick: the interval, or less when woken (then ``wake_delay``
        more, so a burst of saves joins one tick and no tick follows the last one sooner
        than that: a wake-up comes after that tick ended, or was set during it). False:
        stopped."""
        wait = self.config.indexer_interval_s
        due = self.rags.circuits.next_trial_s()
        if due:  # a paused provider is tried when due, not up to an interval later (a due
            # one with nothing to send waits the interval: no spinning on it)
            wait = min(wait, due + 0.05)
        woken = self._woken.wait(wait)
        if self._stop.is_set():
            return False
        if woken:
            self.wakeups += 1
            if self._stop.wait(self.config.indexer_wake_delay_s):
                return False
            self._woken.clear()  # the tick now covers these wake-ups (later ones set it again)
        return True
