"""Pause and cancel from any terminal (``docs/design/persistence.md`` §8, the operations table).

- ``pause``: sets ``pause_requested``. A live holder writes ``run_paused`` at its next step boundary and parks
  the row (claimers skip it while the flag is set); ``piw resume`` clears it and writes ``run_resumed``.
- ``cancel`` with a live holder: sets ``cancel_requested``; the holder (polling every 200 ms) aborts the active
  node (closes its model request, kills its shell group), writes ``node_failed{cancelled}`` and ``run_cancelled``.
- ``cancel`` without one (parked, queued, crashed): this process claims the run, repairs a torn tail and appends
  ``run_cancelled`` itself. It never loads the workflow, so a run whose source changed can always be cancelled.
- ``cancel`` of a ``waiting`` run: the queue row becomes ``cancelled``; the bundle is final and stays untouched.

A finished run (or a cancelled waiting one) is refused with one line and exit 2; nothing changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import ClaimLost, PiwError, RunLocked, TraceCorrupt, UsageError
from piw.run.process_groups import stop_group
from piw.run.resume import read_run_trace, repair_tail
from piw.run.runner import configured_durability, ensure_row
from piw.run.step import CANCELLED_ERROR
from piw.store.bundle import Bundle, load_state, open_bundle
from piw.store.db.database import now_ms
from piw.store.db.holders import runner_id
from piw.store.db.index import RunIndex
from piw.store.db.lease import Lease
from piw.store.db.queue import RunQueue
from piw.store.db.rows import QueueRow
from piw.store.db.run_database import open_run_database
from piw.store.fold import RunState
from piw.store.run_store import open_run_stores
from piw.store.trace import resolve_durability
from piw.store.writer import RunWriter
from piw.wire_models import Manifest

WAIT_S = 10.0
"""How long ``pause``/``cancel`` wait for a live holder to act before reporting that the request is pending."""


@dataclass(frozen=True)
class LifecycleResult:
    """What a lifecycle command did, for its one-line report and ``--json``."""

    run_id: str
    status: str
    queue_status: str | None
    message: str
    done: bool
    """The operation took effect (``False``: requested, a live holder will act on it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "status": self.status,
            "queueStatus": self.queue_status,
            "done": self.done,
            "message": self.message,
        }


def _state(bundle: Bundle) -> RunState | None:
    try:
        return load_state(bundle)
    except TraceCorrupt:
        return None


def _result(home: Path, run_id: str, message: str, done: bool) -> LifecycleResult:
    bundle = open_bundle(home, run_id)
    state = _state(bundle)
    row = open_run_database(home).queue.get(run_id)
    status = state.status if state is not None else "running"
    return LifecycleResult(run_id, status, row.status if row else None, message, done)


def _wait_for(queue: RunQueue, run_id: str, settled: Any, wait_s: float) -> QueueRow | None:
    """Poll the row until ``settled(row)`` or ``wait_s`` passes; the last row seen."""
    deadline = time.monotonic() + wait_s
    row = queue.get(run_id)
    while row is not None and not settled(row) and time.monotonic() < deadline:
        time.sleep(0.05)
        row = queue.get(run_id)
    return row


def _finished(run_id: str, state: RunState, verb: str) -> UsageError:
    return UsageError(f"Run {run_id} already ended ({state.status}); there is nothing to {verb}.")


# ---- pause --------------------------------------------------------------------------------------------


def _unfinished_row(
    queue: RunQueue, home: Path, run_id: str, state: RunState | None, verb: str, verbed: str
) -> QueueRow:
    """The queue row of a run whose trace has not ended: created from the trace when missing, reopened when the
    row says final but the trace has no terminal event (a torn last line: the trace wins)."""
    if state is not None:
        ensure_row(queue, state, home)
    row = queue.get(run_id)
    if row is None:
        raise UsageError(f"Run {run_id} has no queue row and its trace is damaged; it cannot be {verbed}.")
    if row.is_final and state is not None:
        queue.reopen(run_id)
        row = queue.get(run_id) or row
    if row.is_final:
        raise UsageError(
            f"Run {run_id} already ended ({row.status} in the run queue); there is nothing to {verb}."
        )
    return row


def _unfinished(
    home: Path, run_id: str, verb: str, verbed: str
) -> tuple[Bundle, RunState | None, RunQueue, QueueRow]:
    """A run whose trace has not ended, with its queue row (see :func:`_unfinished_row`); a finished run is
    refused with :func:`_finished`'s one line."""
    bundle = open_bundle(home, run_id)
    state = _state(bundle)
    if state is not None and state.is_terminal:
        raise _finished(run_id, state, verb)
    queue = open_run_database(home).queue
    return bundle, state, queue, _unfinished_row(queue, home, run_id, state, verb, verbed)


def pause_run(home: Path, run_id: str, wait_s: float = WAIT_S) -> LifecycleResult:
    bundle, state, queue, row = _unfinished(home, run_id, "pause", "paused")
    resume_hint = f"continue it with 'piw resume {run_id}'"
    node = state.current.node_id if state is not None and state.current else None
    where = f" (now in {node})" if node else ""
    paused = state is not None and state.paused
    if row.pause_requested and not paused and row.has_live_claim(queue.clock()):
        # asked before, and the step in progress has not ended yet: say that, not "paused"
        message = (
            f"Pause already requested: run {run_id} pauses after its current step{where}; then {resume_hint}."
        )
        return _result(home, run_id, message, False)
    if row.pause_requested or paused:
        return _result(home, run_id, f"Run {run_id} is already paused; {resume_hint}.", True)
    row = queue.request_pause(run_id)
    if not row.has_live_claim(queue.clock()):
        message = f"Run {run_id} has no process running it; it stays paused (hosts skip it) until you {resume_hint}."
        return _result(home, run_id, message, True)
    settled = _wait_for(queue, run_id, lambda r: not r.has_live_claim(queue.clock()), wait_s)
    if settled is not None and settled.status == "parked":
        return _result(home, run_id, f"Run {run_id} paused at a step boundary; {resume_hint}.", True)
    if settled is not None and settled.is_final:  # its last step was in progress: the run ended instead
        ended = _state(bundle)
        status = ended.status if ended is not None else settled.status
        message = f"Run {run_id} ended ({status}) before it reached another step boundary; there is nothing to pause."
        return _result(home, run_id, message, False)
    message = f"Pause requested: run {run_id} pauses after its current step{where}; then {resume_hint}."
    return _result(home, run_id, message, False)


# ---- cancel -------------------------------------------------------------------------------------------


def cancel_run(home: Path, run_id: str, wait_s: float = WAIT_S) -> LifecycleResult:
    bundle = open_bundle(home, run_id)
    state = _state(bundle)
    database = open_run_database(home)
    queue = database.queue
    row = queue.get(run_id)
    if state is not None and state.is_terminal:
        if state.status == "waiting" and not (row is not None and row.status == "cancelled"):
            ensure_row(queue, state, home)
            database.decisions.cancel_waiting(run_id)
            message = (
                f"Run {run_id} was waiting on {state.waiting_on}; it is cancelled (its bundle is unchanged)."
            )
            return _result(home, run_id, message, True)
        if state.status == "waiting":
            raise UsageError(
                f"Run {run_id} already ended (waiting, then cancelled); there is nothing to cancel."
            )
        raise _finished(run_id, state, "cancel")
    row = _unfinished_row(queue, home, run_id, state, "cancel", "cancelled")
    if not row.has_live_claim(queue.clock()):
        try:
            return _cancel_unheld(home, queue, bundle, run_id)
        except RunLocked:
            pass  # claimed by someone in the meantime: ask them
    queue.request_cancel(run_id)
    row = _wait_for(queue, run_id, lambda r: r.is_final or not r.has_live_claim(queue.clock()), wait_s)
    if row is not None and row.status == "cancelled":
        return _result(home, run_id, f"Run {run_id} cancelled.", True)
    if row is not None and not row.is_final and not row.has_live_claim(queue.clock()):
        return _cancel_unheld(home, queue, bundle, run_id)  # its holder stopped without acting on the request
    message = (
        f"Cancel requested: run {run_id} stops when its current step is aborted (within a second or so)."
    )
    return _result(home, run_id, message, False)


def _cancel_unheld(home: Path, queue: RunQueue, bundle: Bundle, run_id: str) -> LifecycleResult:
    """Claim a run nobody holds, repair its tail and append ``run_cancelled`` (no workflow is loaded)."""
    claim = queue.claim_run(run_id, runner_id())
    lease = Lease(queue, claim).start()
    durability = resolve_durability(configured_durability(home))
    try:
        store = open_run_stores(home, durability).open(run_id).acquire(lease)
    except RunLocked:
        lease.park(delay_ms=0)
        raise
    try:
        try:
            trace = read_run_trace(store)
        except TraceCorrupt as exc:
            # A damaged middle line: writers refuse the run. The queue row is final; the bundle is left as is.
            lease.release("cancelled", str(exc))
            return _result(
                home,
                run_id,
                f"Run {run_id} cancelled in the run queue; its trace is damaged and was left untouched.",
                True,
            )
        state = trace.state
        if state.is_terminal:  # it finished between our check and the claim
            lease.release("done" if state.status in ("completed", "waiting") else "failed")
            raise UsageError(f"Run {run_id} already ended ({state.status}); there is nothing to cancel.")
        store.fence()
        repair_tail(store, trace)
        group = state.current.process_group if state.current is not None else None
        if group:
            stop_group(group)  # a dead holder's command may still run: it must not outlive the run
        manifest = Manifest.model_validate(bundle.read_manifest())
        writer = RunWriter(store, state, manifest, index=RunIndex(home))
        try:
            writer.append(
                "run", "run_cancelled", {"status": "cancelled", "error": CANCELLED_ERROR}, sync=True
            )
        finally:
            writer.close()
    except ClaimLost:
        store.release()
        lease.stop()
        raise
    except UsageError:
        store.release()
        raise
    except BaseException as exc:
        store.release()
        lease.park("interrupted", error=str(exc) if isinstance(exc, PiwError) else type(exc).__name__)
        raise
    store.release()
    lease.release("cancelled")
    return _result(home, run_id, f"Run {run_id} cancelled.", True)


def is_live(home: Path, run_id: str) -> bool:
    row = open_run_database(home).queue.get(run_id)
    return row is not None and row.has_live_claim(now_ms())


# ---- resume, for a host -------------------------------------------------------------------------------


def resume_queued(home: Path, run_id: str) -> LifecycleResult:
    """``piw resume`` without a terminal (``POST /api/runs/{run_id}/resume``): clear a pause and queue the run for
    ``piw host``, which continues it from its trace. A live holder's run only loses its pause request; a finished
    run is refused with one line."""
    *_, queue, row = _unfinished(home, run_id, "resume", "resumed")
    if row.has_live_claim(queue.clock()):
        queue.clear_pause(run_id)
        return _result(
            home, run_id, f"Run {run_id} is running in a piw process; its pause request is cleared.", True
        )
    claim = queue.claim_run(run_id, runner_id())
    queue.clear_pause(run_id)
    queue.requeue(claim)
    message = (
        f"Run {run_id} is queued; 'piw host' continues it from its trace ('piw watch {run_id}' follows it)."
    )
    return _result(home, run_id, message, True)
