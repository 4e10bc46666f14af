"""The engine's side of a run's claim: the fenced writer lock, the flags it polls, and settling the queue row.

A run executes under a claim on its ``run_queue`` row (``docs/design/persistence.md`` §10.2), held through a
:class:`~piw.store.db.lease.Lease`. This module is what the engine does with it:

- take the per-bundle writer lock fenced by the lease (a busy lock parks the row for ``RENEW_MS``), after stopping
  for good a holder on this machine that was stopped past its lease and still holds it (``piw.run.takeover``);
- expose the ``pause_requested``/``cancel_requested`` flags the lease polls, and abort the active node when a
  cancel arrives or the claim is lost;
- settle the row when the run stops: final status after a terminal event, ``parked`` for a pause, a park
  reason or a holder shutdown, ``queued`` for a detached run that was only created, and nothing at all once
  the claim is lost (the new holder owns the row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from piw.errors import (
    ClaimLost,
    HomeUnavailable,
    OutcomeUnknown,
    PiwError,
    RunFinished,
    RunLocked,
    SourceChanged,
    StorageFull,
    TraceCorrupt,
)
from piw.run.takeover import acquire_from_stale_holder
from piw.store.db.lease import BOUNDARY_FLAGS_MS, Lease
from piw.store.db.queue import RENEW_MS
from piw.store.db.rows import FINAL_QUEUE_STATUS, ParkReason
from piw.store.fold import TERMINAL_STATUSES, RunState
from piw.store.run_store import RunStore
from piw.store.storage import disk_full_retry_s

Stop = Literal["paused", "queued", "shutdown"] | ParkReason
"""Why a loop stopped short of a terminal event: a pause, a detached run handed to the queue, a holder
shutdown, or a park reason."""


class ClaimControl:
    """Wraps the lease of one run (or nothing, for an engine used without the run queue)."""

    def __init__(self, abort: Callable[[], None]) -> None:
        self.lease: Lease | None = None
        self._abort = abort

    def hold(self, lease: Lease | None) -> None:
        self.lease = lease
        if lease is not None:
            lease.on_lost = lambda reason: self._abort()
            lease.on_cancel = self._abort

    @property
    def cancel_requested(self) -> bool:
        return self.lease is not None and self.lease.cancel_requested

    @property
    def pause_requested(self) -> bool:
        return self.lease is not None and self.lease.pause_requested

    def current_flags(self, *, always: bool = False) -> None:
        """Bring the pause/cancel flags up to date at a step boundary: read the row unless the flags were read in
        the last :data:`~piw.store.db.lease.BOUNDARY_FLAGS_MS` (``always``: read it regardless)."""
        if self.lease is not None:
            self.lease.current_flags(0 if always else BOUNDARY_FLAGS_MS)

    @property
    def lost(self) -> bool:
        return self.lease is not None and self.lease.lost is not None

    def acquire(self, store: RunStore) -> RunStore:
        """The run's store taken for writing, fenced by the lease; a busy run parks the row for ``RENEW_MS`` and
        re-raises, unless the lock is held by the stale holder this claim was taken from (then it is stopped)."""
        try:
            return store.acquire(self.lease)
        except RunLocked:
            if self.lease is None:
                raise
            taken = self._take_over(store)
            if taken is not None:
                return taken
            self.lease.park(delay_ms=RENEW_MS)
            raise

    def _take_over(self, store: RunStore) -> RunStore | None:
        lease = self.lease
        if lease is None or lease.claim.taken_from is None:
            return None
        lease.confirm()  # still ours: the previous holder's lease had expired on the database clock
        return acquire_from_stale_holder(lambda: store.acquire(lease), lease.claim.taken_from)

    def running(self) -> None:
        if self.lease is not None:
            self.lease.queue.mark_running(self.lease.claim)

    def settle_refusal(self, exc: BaseException, state: RunState | None) -> None:
        """A resume that refused before writing says why on the row (§8 steps 1–3)."""
        lease = self.lease
        if lease is None:
            return
        if isinstance(exc, ClaimLost):
            lease.stop()
        elif isinstance(exc, RunFinished) and state is not None:
            lease.release(FINAL_QUEUE_STATUS.get(state.status, "done"))  # a crash after the terminal event
        elif isinstance(exc, SourceChanged):
            lease.park("source_changed", error=str(exc))
        elif isinstance(exc, TraceCorrupt):
            lease.park("trace_corrupt", error=str(exc))
        elif isinstance(exc, OutcomeUnknown):
            lease.park("outcome_unknown", error=str(exc))  # only 'piw resolve' continues it
        elif isinstance(exc, RunLocked):
            pass  # acquire() parked it already
        else:
            lease.park("interrupted", error=_describe(exc))

    def settle(self, state: RunState, stopped: Stop | None, error: BaseException | None) -> None:
        """Give the claim back when the loop stops (after the caches are refreshed and the lock released)."""
        lease = self.lease
        if lease is None:
            return
        if lease.lost is not None:
            lease.stop()
            return
        if isinstance(error, StorageFull | HomeUnavailable):
            self._park_on_storage(lease, error)
            return
        try:
            if state.status in TERMINAL_STATUSES:
                lease.release(FINAL_QUEUE_STATUS[state.status])
            elif stopped == "paused":
                lease.park()  # pause_requested stays set: claimers skip the row until 'piw resume'
            elif stopped == "queued":
                lease.requeue()
            elif stopped == "shutdown":
                lease.park()  # holder shutdown: the next claimer may take it at once
            elif stopped is not None:
                lease.park(stopped)
            else:
                lease.park("interrupted", error=None if error is None else _describe(error))
        except ClaimLost:
            lease.stop()

    @staticmethod
    def _park_on_storage(lease: Lease, error: StorageFull | HomeUnavailable) -> None:
        """A full disk parks the run ``disk_full``, claimable again after the back-off (a host retries it once
        there may be room; ``docs/detached.md``); a home that turned read-only parks it for a person. If not even
        the row can be written (piw.sqlite on the full disk), the lease is left to expire and is taken over then."""
        try:
            if isinstance(error, StorageFull):
                lease.park("disk_full", delay_ms=int(disk_full_retry_s() * 1000), error=str(error))
            else:
                lease.park("interrupted", error=str(error))
        except Exception:
            lease.stop()


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, PiwError) else type(exc).__name__
