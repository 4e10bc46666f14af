"""The run writer: the only code that appends events to a run.

Each event follows the write order of ``docs/bundle-format.md`` §6 and §11: fence, externalize large strings
(artifacts first), append the line (+ fsync per durability), ``fold_more``, then refresh the caches. A lock
serialises appends so threads an action starts (updates, child agents) get one total order. Where the lines,
artifacts and fence live is the run's :class:`~piw.store.run_store.RunStore`; the caches (``state.json``,
``manifest.json``, fold checkpoints, the runs index row) are the local bundle's.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from piw.errors import ClaimLost, PiwError, RunLocked
from piw.redaction import redactor_for
from piw.store.artifacts import externalize_plain
from piw.store.fold import RunState, fold_more
from piw.store.foldcache import CheckpointTrail
from piw.store.place import home_of
from piw.store.trace import NODE_TERMINAL_TYPES, RUN_TERMINAL_TYPES, Scope, TraceEvent, decode_event
from piw.wire import is_plain, now_iso

if TYPE_CHECKING:
    from piw.store.run_store import RunStore
    from piw.wire_models import Manifest

Listener = Callable[[TraceEvent, RunState], None]
log = logging.getLogger(__name__)
STATE_CACHE_INTERVAL_S = 1.0
STATE_CACHE_COST_FACTOR = 20
"""``state.json`` is rewritten whole, so its cost grows with the run: after a write that took ``d`` seconds the
next one waits at least ``20 × d`` (and at least a second), which keeps cache writes under ~5 % of a run
however long it gets. Readers fold the trace tail past a stale cache (``docs/bundle-format.md`` §7)."""
_IDLE_CHECK_S = 1.0
"""How often a writer's idle flusher looks at its caches when nothing is due (:meth:`RunWriter._flush_when_idle`)."""
INDEX_INTERVAL_S = 1.0
"""The run's ``runs`` index row is upserted at least this often while events come, whatever the state-cache
interval: a row costs a small SQLite write, not a rewrite of the run, and readers list a running run whose
writer is live from its row (``piw.store.db.index``) instead of refolding it."""
FORCED_STATE_TYPES = frozenset({"run_started", "run_resumed", "run_paused"}) | RUN_TERMINAL_TYPES
"""Events after which ``state.json`` is written at once: the run starts, continues, or lets go of its claim."""
KILL_BEFORE_APPEND_ENV = "PIW_TEST_KILL_BEFORE_APPEND"
KILL_AFTER_APPEND_ENV = "PIW_TEST_KILL_AFTER_APPEND"


def _kill_point(variable: str) -> int | None:
    """Test-only crash hook: the trace ``seq`` at which this process SIGKILLs itself, if the variable is set.

    The crash-matrix tests set ``PIW_TEST_KILL_AFTER_APPEND=k`` (or ``…_BEFORE_APPEND``) to die
    deterministically right after (before) the line with ``seq == k`` is written, before any fsync; nothing
    else uses it.
    """
    value = os.environ.get(variable, "")
    return int(value) if value.isdigit() else None


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class RunWriter:
    """Appends trace events for one run and keeps the folded state current."""

    def __init__(
        self,
        store: RunStore,
        state: RunState,
        manifest: Manifest,
        index: Callable[[RunState], None] | None = None,
    ) -> None:
        self.store = store
        """Where the run's lines, artifacts and fence live (taken by the caller, who releases it)."""
        bundle = self.bundle = store.bundle
        self.index = index
        """Upserts the run's ``runs`` index row (write order step 5); a failure is logged, never fatal."""
        self.state = state
        self.manifest = manifest
        self.redactor = redactor_for(home_of(bundle.path.parent.parent))
        """Configured secrets leave every payload before it is stored (``docs/guarantees.md``, "Redaction")."""
        self.listeners: list[Listener] = []
        self._mutex = threading.RLock()
        self._state_due = 0.0
        """``time.monotonic()`` after which the next ``state.json`` write may happen."""
        self._index_due = 0.0
        """``time.monotonic()`` after which the next ``runs`` index upsert is due (:data:`INDEX_INTERVAL_S`)."""
        self._state_seq = -1
        """The ``traceSeq`` of the last ``state.json`` written (so ``close`` never writes the same one twice)."""
        self._index_seq = -1
        """The ``traceSeq`` of the last ``runs`` index row upserted."""
        self._idle = threading.Condition(self._mutex)
        self._flusher: threading.Thread | None = None
        self._held_seen: float | None = None
        """The store's held-lines due the idle flusher was last woken for (``RunStore.held_due``)."""
        """Writes the caches an append left behind when no next append comes to do it (:meth:`_flush_when_idle`)."""
        self._closed = False
        self._failed: OSError | None = None
        """The write error that stopped this writer (a full disk); every later append re-raises it."""
        self._notifications: set[str] | None = None
        self._kill_before = _kill_point(KILL_BEFORE_APPEND_ENV)
        self._kill_after = _kill_point(KILL_AFTER_APPEND_ENV)
        self._trail: CheckpointTrail | None = None
        """Fold checkpoints left as the run goes (a cache: ``None`` once anything about it fails)."""
        try:
            self._trail = CheckpointTrail(bundle.path, state)
        except Exception as exc:  # a cache never stops a run
            log.warning("run %s: no fold checkpoints from the writer: %s", bundle.run_id, exc)

    @property
    def mutex(self) -> threading.RLock:
        """Held while appending; callers hold it to make a check-then-append atomic."""
        return self._mutex

    def append(
        self,
        scope: str,
        type: str,
        payload: dict[str, Any],
        *,
        node_id: str | None = None,
        attempt_id: str | None = None,
        sync: bool = False,
        at: str | None = None,
        externalized: bool = False,
    ) -> TraceEvent:
        """Commit one event. ``sync`` marks an effect boundary that must be durable before the caller goes on.

        ``at`` and ``externalized`` serve :meth:`adopt` only: a copied event keeps its recorded time, and its
        payload already holds artifact refs (externalizing it again would escape them as user data).
        """
        with self._mutex:
            if self._closed:
                raise PiwError("The run writer is closed; nothing more can be recorded for this attempt.")
            if self._failed is not None:
                raise self._failed
            self.store.fence()
            event = self._commit(scope, type, payload, node_id, attempt_id, sync, at, externalized)
            held = self.store.held_due()
            if held is not None and held != self._held_seen:
                self._held_seen = held
                self._idle.notify()  # the idle flusher sends the held lines if no next line comes in time
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_when_idle, name="piw-cache-flush", daemon=True
                )
                self._flusher.start()
            return event

    def _commit(
        self,
        scope: str,
        type: str,
        payload: dict[str, Any],
        node_id: str | None,
        attempt_id: str | None,
        sync: bool,
        at: str | None,
        externalized: bool,
    ) -> TraceEvent:
        """The body of :meth:`append`, under its mutex and fence."""
        seq = self.state.trace_seq + 1
        try:
            if externalized:  # an adopted event: redacted when its own run wrote it
                wire, plain = payload, is_plain(payload)
            else:
                wire, plain = externalize_plain(self.redactor.value(payload), self.store.put_artifact)
        except OSError as exc:
            self._failed = exc  # an artifact could not be written (a full disk): nothing was appended
            raise
        event = TraceEvent(
            seq, at or now_iso(), cast(Scope, scope), type, self.bundle.run_id, wire, node_id, attempt_id
        )
        line = event.encode(plain=plain)
        if not plain:
            # Fold exactly what a reader will parse (JSON keys are strings, tuples become lists), so the
            # live state and any later replay agree; plain payloads already are exactly that.
            event = decode_event(line, seq)
        terminal = type in RUN_TERMINAL_TYPES
        ride_along = not sync and (type == "node_started" or type in NODE_TERMINAL_TYPES)
        if seq == self._kill_before:
            self.store.send_held()  # "before the append": every line before it is in the store
            _die()
        try:
            self.store.append(line, sync=sync or terminal or scope == "run", ride_along=ride_along)
        except OSError as exc:
            # A full disk (or an I/O error) mid-line leaves a torn tail: nothing more may be appended after
            # it, or the tear would sit in mid-file. Resume truncates it (docs/bundle-format.md §10).
            self._failed = exc
            raise
        if seq == self._kill_after:
            self.store.send_held()  # "after the append": the line is in the store, not held back
            _die()
        self.state = fold_more(self.state, [event])
        if self._trail is not None:
            self._leave_checkpoint(line)
        if type == "notification_queued" and self._notifications is not None:
            self._notifications.add(str(payload.get("notificationId")))
        self._refresh_caches(force=type in FORCED_STATE_TYPES)
        for listener in list(self.listeners):
            listener(event, self.state)
        return event

    def _leave_checkpoint(self, line: bytes) -> None:
        trail = self._trail
        assert trail is not None
        try:
            trail.appended(line, self.state)
        except Exception as exc:  # a cache never stops a run: the trail is dropped, the run goes on
            log.warning("run %s: fold checkpoints stopped: %s", self.bundle.run_id, exc)
            self._trail = None

    def adopt(self, event: TraceEvent) -> TraceEvent:
        """Commit a copy of another run's event (a fork's adopted prefix) under this run's id and next ``seq``.

        The artifacts its payload names must already be in this bundle (``copy_artifacts``).
        """
        return self.append(
            event.scope,
            event.type,
            event.payload,
            node_id=event.node_id,
            attempt_id=event.attempt_id,
            at=event.at,
            externalized=True,
        )

    def notification_queued(self, notification_id: str) -> bool:
        """Whether the trace already holds ``notification_queued`` for this id (at most one per id).

        Read from the trace once per writer (an abandoned attempt before a crash may have queued it), then kept
        current by ``append``, so a run with many notify steps does not re-read its trace for each one.
        """
        with self._mutex:
            if self._notifications is None:
                self._notifications = {
                    str(event.payload.get("notificationId"))
                    for event in self.store.iter_trace()
                    if event.type == "notification_queued"
                }
            return notification_id in self._notifications

    def sync(self) -> None:
        """An external effect is about to happen: make every line it may depend on durable.

        ``node_started`` lines and compute steps ride along with the next fsync (``docs/bundle-format.md`` §11), so
        under ``effects`` this fsyncs only when something else is pending.
        """
        with self._mutex:
            self.store.fence()  # a holder past its own deadline starts no effect (docs/detached.md, self-fencing)
            self.store.sync_required()

    def fence(self) -> None:
        """An effect that depends on nothing unsynced is about to start (a model request): ``ClaimLost`` unless
        this process still holds the run. Lines the store holds back are sent first (``RunStore.held_due``)."""
        with self._mutex:
            self.store.fence()
            self.store.send_held()

    def _write_state(self) -> None:
        started = time.monotonic()
        try:
            self.bundle.write_state(self.state)
        except OSError:
            # A failed write (a full disk) is tried again after the usual interval, not on the very next event.
            self._state_due = time.monotonic() + STATE_CACHE_INTERVAL_S
            raise
        finished = time.monotonic()
        cost = finished - started
        self._state_due = finished + max(STATE_CACHE_INTERVAL_S, STATE_CACHE_COST_FACTOR * cost)
        self._state_seq = self.state.trace_seq

    def _refresh_caches(self, force: bool) -> None:
        """state.json, manifest.json and the index row are caches: a failure to write them (a full disk)
        never fails the committed event; the next append or the resume finds out about the disk."""
        try:
            self._write_caches(force)
        except OSError as exc:
            log.warning("run %s: caches not refreshed: %s", self.bundle.run_id, exc)

    def _write_caches(self, force: bool) -> None:
        now = time.monotonic()
        refreshed = force or (now >= self._state_due and self.state.trace_seq != self._state_seq)
        if refreshed:
            self._write_state()
        state = self.state
        manifest = self.manifest
        if (state.status, state.run_title, state.finished_at) != (
            manifest.status,
            manifest.run_title,
            manifest.finished_at,
        ):
            self.manifest = manifest.model_copy(
                update={
                    "status": state.status,
                    "run_title": state.run_title,
                    "finished_at": state.finished_at,
                }
            )
            self.bundle.write_manifest(self.manifest)
            refreshed = True
        if refreshed or now >= self._index_due:
            self.refresh_index()
            self._index_due = now + INDEX_INTERVAL_S

    def refresh_index(self) -> None:
        """Upsert the ``runs`` index row from the current state; a cache, so a failure only logs."""
        if self.index is None:
            return
        try:
            self.index(self.state)
            self._index_seq = self.state.trace_seq
        except Exception as exc:  # the index is a cache: never fail the run for it
            log.warning("run %s: runs index not updated: %s", self.bundle.run_id, exc)

    def _flush_when_idle(self) -> None:
        """Refresh ``state.json`` and the index row that appends left stale, once they are due, when no append
        comes to do it: a step that runs for minutes must not leave ``piw runs`` showing the node before it.

        Appends coalesce these writes (:data:`STATE_CACHE_INTERVAL_S`, :data:`INDEX_INTERVAL_S`) and write them
        only on a later append, so without this a long step kept the caches behind for as long as it ran, where
        ``docs/bundle-format.md`` §7 allows about a second. This thread wakes at most once a second, holds the writer's
        mutex only while it writes, and stops when the writer closes or may no longer write.
        """
        with self._idle:
            while not self._closed and self._failed is None:
                seq = self.state.trace_seq
                held = self.store.held_due()
                due = min(
                    self._state_due if seq != self._state_seq else math.inf,
                    self._index_due if self.index is not None and seq != self._index_seq else math.inf,
                    math.inf if held is None else held,
                )
                now = time.monotonic()
                if due > now:
                    self._idle.wait(min(due - now, _IDLE_CHECK_S))  # appends move the dues: look again soon
                    continue
                try:
                    self.store.fence()
                except (ClaimLost, RunLocked):
                    return  # the claim moved on (or the lock was released): the new holder owns the caches
                except Exception as exc:  # a fence that cannot be checked: write nothing rather than guess
                    log.warning("run %s: caches not refreshed while idle: %s", self.bundle.run_id, exc)
                    return
                if held is not None and held <= now:
                    try:
                        self.store.send_held()
                    except Exception as exc:  # the next append sends them, or finds out why it cannot
                        log.warning(
                            "run %s: held trace lines not sent while idle: %s", self.bundle.run_id, exc
                        )
                        return
                self._refresh_caches(force=False)  # (a failed write sets its own next due: no spin)

    def close(self) -> None:
        """Flush caches and close the trace; the caller releases the store.

        A writer that lost its claim writes nothing more, not even the state cache (the new holder owns it).
        """
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._idle.notify_all()  # the idle flusher stops
            try:
                self.store.fence()
            except (ClaimLost, RunLocked):
                self.store.close()
                return
            try:
                if self._failed is None:
                    self.store.sync()
                if self.state.trace_seq != self._state_seq:
                    self._write_state()
            except (
                OSError
            ) as exc:  # closing after a full disk: the trace is what it is, caches are best effort
                log.warning("run %s: closing after a write error: %s", self.bundle.run_id, exc)
            finally:
                self.store.close()
            if self._trail is not None and self._failed is None:
                try:
                    self._trail.close()
                except Exception as exc:  # the cache's own record; readers check the prefix without it
                    log.warning("run %s: fold checkpoints not recorded: %s", self.bundle.run_id, exc)
            if self._index_seq != self.state.trace_seq:  # (the terminal event's own upsert is this very row)
                self.refresh_index()
