"""``piw host``: claim queued runs and execute them, detached (``docs/design/persistence.md`` §10.2,
``docs/design/agent-steps.md`` §7).

A host is a ``claim_next`` loop with up to ``concurrency`` runs in flight, each in its own thread with its own
claim, lease and writer. Runs execute with ``session_visible=False``: an assistant-completion node is never run
invisibly — the engine parks the run before ``node_started`` for its origin session (``needs-origin-session``),
or fails the node before prompting when it has none. A run whose bundle never got its ``run_started`` (its
enqueuer crashed) is moved to ``runs/.incomplete-<runId>-<ms>/`` and recreated from the queue row.

Stopping the host (Ctrl-C, SIGTERM) parks every run in flight: their active nodes are aborted without a terminal
event and the rows are available to the next claimer at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from piw.errors import BundleLinked, DatabaseBusy, DatabaseUnavailable, PiwError, StorageFull, StoreBusy
from piw.run.continuation import ContinuationSpec, pickup_note
from piw.run.decision_book import open_decision_book
from piw.run.delivery import deliver_untargeted
from piw.run.engine import Engine, RunOptions
from piw.run.executors import Executor
from piw.run.host_presence import open_presence
from piw.run.host_recovery import watch_database
from piw.run.retention_duty import RetentionDuty
from piw.run.runner import configured_durability, load_park_reason, tools_known, workflow_path_of
from piw.run.schedule_duty import ScheduleDuty
from piw.run.sweeper import sweep_timeouts
from piw.stop_signal import stop_requested
from piw.store.bundle import load_state, open_bundle
from piw.store.db.database import now_ms
from piw.store.db.deadline import holder_clock
from piw.store.db.holders import runner_id
from piw.store.db.index import from_ms
from piw.store.db.lease import Lease
from piw.store.db.rows import Claim, QueueRow
from piw.store.db.run_database import RunDatabase, open_run_database
from piw.store.fold import RunState
from piw.store.place import runs_home
from piw.store.run_store import open_run_stores
from piw.store.storage import disk_full_retry_s, storage_error
from piw.store.trace import resolve_durability
from piw.store.writer import Listener
from piw.terminal import single_line
from piw.workflow.loader import LoadedWorkflow, load_workflow

log = logging.getLogger(__name__)

ExecutorFactory = Callable[[QueueRow], Callable[[LoadedWorkflow], Executor | None] | None]
Report = Callable[[str], None]


class HostDuty(Protocol):
    """A duty the host ticks after each round of housekeeping, and closes when it stops."""

    def tick(self) -> object: ...
    def close(self) -> None: ...


DutyFactory = Callable[[Path, Report, str], HostDuty]
"""Makes one duty from the home, the host's report and its runner id."""


HOUSEKEEPING_INTERVAL_S = 0.05
"""While runs are in flight, housekeeping (decision timeouts, untargeted notifications, schedules, retention,
duties) runs at most this often: a burst of claims, one per finished run, would otherwise repeat it before every
claim, on the one thread that claims. A host with nothing in flight does it on every pass, as before."""


@dataclass
class HostOptions:
    once: bool = False
    """Stop once no run is claimable and none is in flight (instead of waiting for more)."""
    max_runs: int | None = None
    """Stop after claiming this many runs (and finishing them)."""
    concurrency: int = 1
    poll_s: float = 0.5
    executor_factory: ExecutorFactory | None = None
    """Builds the agent executor of one run from its queue row (provider, model and script it was queued with)."""
    listeners: list[Listener] = field(default_factory=list)
    report: Report = lambda line: None
    workflows: list[Path] = field(default_factory=list)
    """``--workflows`` folders: in database mode the host serves these workflows too (``piw.run.host_presence``)."""
    duties: list[DutyFactory] = field(default_factory=list)
    """More duties ticked with the housekeeping, made once per host: ``piw host`` adds the channels duty
    (``piw.channels.duty``, docs/channels.md), which answers runs and so lives above this module."""


@dataclass
class HostResult:
    claimed: int = 0
    outcomes: dict[str, str] = field(default_factory=dict)
    """Run id → how it stopped here: a run status, ``parked (<reason>)``, or ``error: …``."""


class Host:
    """One host process: claims runs and executes them until told to stop (or the options say so)."""

    def __init__(self, home: Path, options: HostOptions, database: RunDatabase | None = None) -> None:
        self.home = home
        self.options = options
        self.database = database or open_run_database(home)
        self.queue = self.database.queue
        self.runner = runner_id()
        self.result = HostResult()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._engines: dict[str, Engine] = {}
        self._threads: dict[str, threading.Thread] = {}
        self._finished: set[str] = set()
        """Runs whose thread has done all its work: reaped at once, not when the thread is seen dead later."""
        self._delivered: set[str] = set()
        self._leases: dict[str, Lease] = {}
        self._full_since: float | None = None
        self._housekeeping_due = 0.0
        self._check_database = watch_database(self.queue, home, self._held, options.report)
        self.presence = open_presence(home, self.queue, self.runner, options.concurrency, options.workflows)
        self._duties = [make(home, options.report, self.runner) for make in options.duties]
        self._fire_schedules = ScheduleDuty(home, self.runner, options.report)  # docs/schedules.md
        self._retention = RetentionDuty(home, options.report)  # [retention], docs/cli.md

    def _held(self) -> dict[str, Lease]:
        with self._lock:
            return {run_id: lease for run_id, lease in self._leases.items() if lease.lost is None}

    def stop(self) -> None:
        """Stop claiming and park every run in flight (their nodes rerun on the next claim)."""
        self._stop.set()
        with self._lock:
            engines = list(self._engines.values())
        for engine in engines:
            engine.request_park()
        self._wake.set()

    def serve(self) -> HostResult:
        options = self.options
        try:  # (the start-up too: a stop while the served workflows load ends the host cleanly)
            if self.presence is not None:
                self.presence.start()
                options.report(
                    f"piw host: serving {len(self.presence.serve_keys)} workflow versions as {self.runner}"
                )
            while not self._stop.is_set():
                if stop_requested():  # a signal whose KeyboardInterrupt was swallowed (piw.stop_signal)
                    self.stop()
                    break
                self._reap()
                limit_reached = options.max_runs is not None and self.result.claimed >= options.max_runs
                if self._pass(limit_reached):
                    continue
                if not self._threads and (limit_reached or options.once):
                    break
                self._wake.wait(options.poll_s)
                self._wake.clear()
        except KeyboardInterrupt:
            self.stop()
        finally:
            self._join_all()
            for duty in self._duties:
                duty.close()
            if self.presence is not None:
                self.presence.stop()
        return self.result

    def _pass(self, limit_reached: bool) -> bool:
        """Housekeeping (:data:`HOUSEKEEPING_INTERVAL_S`), then claim one run if there is room; whether one was
        claimed. A full disk (piw.sqlite cannot be written) is waited out: the host says so, backs off and tries
        again (``docs/detached.md``)."""
        try:
            now = time.monotonic()
            if not self._threads or now >= self._housekeeping_due:
                self._housekeeping()
                self._housekeeping_due = now + HOUSEKEEPING_INTERVAL_S
            if limit_reached or len(self._threads) >= max(1, self.options.concurrency):
                return False
            sent = holder_clock()  # the claimed lease's local deadline starts before the request
            claim = self._claim_next()
        except Exception as exc:
            full = storage_error(exc, self.home)
            if not isinstance(full, StorageFull):
                raise
            self._back_off(full)
            return False
        if claim is None:
            return False
        self._full_since = None
        self._launch(claim, sent)
        return True

    def _back_off(self, full: StorageFull) -> None:
        wait_s = disk_full_retry_s()
        if self._full_since is None:
            self._full_since = time.monotonic()
            self.options.report(
                f"disk full ({full}); this host waits {wait_s:g} s between tries and keeps serving"
            )
        self._stop.wait(wait_s)

    def _claim_next(self) -> Claim | None:
        try:
            return self.queue.claim_next(self.runner)
        except DatabaseBusy:
            raise  # busy past the wait limit: the host stops with exit 75, as housekeeping does (docs/detached.md)
        # A database locked or out of reach just now: the next pass retries.
        except (StoreBusy, DatabaseUnavailable) as exc:
            if isinstance(storage_error(exc, self.home), StorageFull):
                raise  # a full disk: backed off above, with one line
            log.warning("host: claiming failed: %s", exc)
            return None

    def _housekeeping(self) -> None:
        """Each pass: resolve due human decisions with their timeout choice (their continuations are queued and
        claimed like any run), and deliver notifications that have no origin session (part B, ``decisions``)."""
        report = self.options.report
        try:
            self._check_database()  # deleted or replaced under this host: recreated, what it held put back
            if self.presence is not None:
                self.presence.tick()
            self._fire_schedules()
            self._retention()
            for receipt in sweep_timeouts(self.home, self.database):
                spec = receipt.spec
                report(f"{spec.parent_run_id}  {spec.node_id} timed out: continuing as run {spec.run_id}")
            deliver_untargeted(
                self.database.outbox,
                lambda row: report(f"{row.run_id}  ✉ {single_line(row.content)}"),
                self._delivered,
            )
            for duty in self._duties:
                duty.tick()  # e.g. gates announced on their channels, answers read back (docs/channels.md)
        except DatabaseBusy:
            raise  # busy past the wait limit: the host stops with exit 75 (docs/detached.md)
        except Exception as exc:  # housekeeping never stops the host (a database out of reach too)
            log.warning("host housekeeping: %s", exc)

    def _join_all(self) -> None:
        while True:
            with self._lock:
                threads = list(self._threads.values())
            if not threads:
                return
            for thread in threads:
                try:
                    while thread.is_alive():
                        if stop_requested() and not self._stop.is_set():
                            self.stop()  # asked for while waiting, its KeyboardInterrupt swallowed
                        thread.join(self.options.poll_s)
                except KeyboardInterrupt:
                    self.stop()
            self._reap()

    def _reap(self) -> None:
        """Forget the runs whose thread is done. A thread marks its run finished as its last step, so the wake it
        sends is never missed: a slot freed while the loop looks is taken on this pass, not after ``poll_s``."""
        with self._lock:
            for run_id, thread in list(self._threads.items()):
                if run_id in self._finished or not thread.is_alive():
                    if thread.is_alive():
                        thread.join()  # its last statements are running: this returns at once
                    self._finished.discard(run_id)
                    del self._threads[run_id]
                    self._engines.pop(run_id, None)
                    self._leases.pop(run_id, None)

    def _launch(self, claim: Claim, sent_at: float | None = None) -> None:
        self.result.claimed += 1
        lease = Lease(
            self.queue, claim, sent_at=sent_at
        )  # started by the run's thread: one thread start here
        thread = threading.Thread(
            target=self._execute, args=(lease,), name=f"run-{claim.run_id}", daemon=True
        )
        with self._lock:
            self._threads[claim.run_id] = thread
            self._leases[claim.run_id] = lease
        thread.start()

    # ---- one run --------------------------------------------------------------------------------------

    def _execute(self, lease: Lease) -> None:
        try:
            lease.start()
            self._execute_run(lease)
        finally:
            with self._lock:
                self._finished.add(lease.run_id)
            self._wake.set()

    def _execute_run(self, lease: Lease) -> None:
        run_id = lease.run_id
        report = self.options.report
        try:
            state = self._run(lease)
            outcome = self._describe(run_id, state)
        except StorageFull:
            outcome = f"parked (disk full): this host tries it again in {disk_full_retry_s():g} s"
        except PiwError as exc:
            outcome = f"error: {exc}"
        except Exception as exc:  # a bug must not take the host down: the run is parked for a person
            log.exception("run %s failed in the host", run_id)
            outcome = f"error: {type(exc).__name__}: {exc}"
            if lease.lost is None:
                with contextlib.suppress(PiwError):
                    lease.park("interrupted", error=outcome)
        finally:
            if lease.lost is None:
                lease.stop()
        self.result.outcomes[run_id] = outcome
        report(f"{run_id}  {outcome}")

    def _describe(self, run_id: str, state: RunState) -> str:
        if state.is_terminal:
            return state.status
        row = self.queue.get(run_id)
        if row is not None and row.status == "parked":
            reason = row.park_reason or ("paused" if row.pause_requested else None)
            if reason == "needs-origin-session":
                return f"parked (needs-origin-session): continue it in a terminal with 'piw resume {run_id}'"
            if reason == "disk_full":
                return f"parked (disk full): this host tries it again in {disk_full_retry_s():g} s"
            if reason is None:  # this host is stopping: the row is claimable again at once
                return (
                    f"parked (host stopped): the next 'piw host' continues it, or 'piw resume {run_id}' here"
                )
            return f"parked ({reason})"
        return state.status

    def _run(self, lease: Lease) -> RunState:
        run_id = lease.run_id
        row = self.queue.get(run_id)
        assert row is not None
        self.options.report(f"{run_id}  claimed (generation {lease.claim.generation}){pickup_note(row)}")
        bundle_path = runs_home(self.home) / "runs" / run_id
        started = _has_run_started(self.home, run_id)
        if started:
            try:
                state = load_state(open_bundle(self.home, run_id))
            except (
                BundleLinked
            ) as exc:  # nothing is written through a link: the row says why (docs/guarantees.md)
                lease.park("bundle_linked", error=str(exc))
                raise
            served = self.presence.reference_for(row) if self.presence is not None else None
            reference = served or str(workflow_path_of(state.workflow_source, state.workflow_name, self.home))
        else:
            reference = row.workflow_ref or ""
            if self.presence is not None:
                reference = self.presence.reference_for(row) or reference
        try:
            workflow = load_workflow(reference, self.home, tools_known())
        except PiwError as exc:
            lease.park(load_park_reason(exc), error=str(exc))
            raise
        engine = self._engine(workflow, row)
        with self._lock:
            self._engines[run_id] = engine
        if self._stop.is_set():
            engine.request_park()
        if started:
            return engine.resume(run_id, lease)
        if row.workflow_source != workflow.source or row.definition_digest != workflow.digest:
            lease.park("source_changed", error="the workflow changed since the run was queued")
            raise PiwError(
                f"Workflow source changed since run {run_id} was queued; cancel it with "
                f"'piw cancel {run_id}'."
            )
        if bundle_path.exists():
            lease.fence()
            bundle_path.rename(bundle_path.parent / f".incomplete-{run_id}-{now_ms()}")
        if row.origin_session_id:
            engine.options.origin_session = {
                "id": row.origin_session_id,
                "startedAt": from_ms(row.created_at),
            }
        continued = (
            (row.input or {}).get("continuation")
            if row.parent_run_id and isinstance(row.input, dict)
            else None
        )
        if isinstance(continued, dict):  # an answered checkpoint's continuation (decisions: piw.run.answers)
            return engine.start_continuation(ContinuationSpec.from_json(continued), lease=lease)
        title = row.options.get("title")
        return engine.start(row.input, title if isinstance(title, str) else None, run_id=run_id, lease=lease)

    def _engine(self, workflow: LoadedWorkflow, row: QueueRow) -> Engine:
        factory = self.options.executor_factory(row) if self.options.executor_factory else None
        return Engine(
            workflow,
            self.home,
            RunOptions(
                durability=resolve_durability(configured_durability(self.home)),
                listeners=list(self.options.listeners),
                agent_executor=factory(workflow) if factory else None,
                origin_session=None,  # the engine takes the run's recorded origin session on resume
                session_visible=False,
                decisions=open_decision_book(self.database.decisions),
                outbox=self.database.outbox,
            ),
        )


def _has_run_started(home: Path, run_id: str) -> bool:
    try:
        return open_run_stores(home).head(run_id) > 0
    except PiwError:
        return True  # damaged: the resume path parks it as trace_corrupt


def serve(home: Path, options: HostOptions) -> HostResult:
    """Run a host until it stops; Ctrl-C or SIGTERM (as ``KeyboardInterrupt``) parks what is in flight."""
    try:
        host = Host(home, options)
    except KeyboardInterrupt:
        return HostResult()  # stopped while opening the database: nothing was claimed, so nothing to park
    started = time.monotonic()
    result = host.serve()
    log.info("host served %d runs in %.1fs", result.claimed, time.monotonic() - started)
    return result
